"""The course as a website: the committed notebooks (never executed), the README and docs/, built by Sphinx
with myst-nb into one folder a teacher can send or serve.

    python -m hp_mlm.ops.site build              # writes build/site/index.html (about 30 s)
    python -m hp_mlm.ops.site build --out DIR

Needs the packages of ``docs/site/requirements.txt``; the builder's settings are ``docs/site/conf.py``
and the table of contents ``docs/site/index.md`` (course order: notebooks 00-06, the docs, the
solutions), which follows the README on the home page. The pages are first copied to ``<out>-src/`` and prepared there, so the
repository's files stay as they are:

- each figure (a PNG output of a code cell) gets the description in the markdown cell after it
  (which starts with ``*Figure:*``) as its alt text, through myst-nb's cell metadata
  (``mystnb.image.alt``);
- a link to a file of the repository that is not a page of the site (``ARCHITECTURE.md``,
  ``benchmarks/...``) becomes a link to that file on GitHub.

- a notebook without a Colab badge at its top (the solutions) gets one, as the episodes have;
- the set-up page (``docs/setup.md``) gets the course's own version under its title.

Everything else renders as written: the episodes' Colab badges, the collapsed
``<details>`` solutions, links to headings of other pages (``glossary.md#perplexity``, GitHub's
anchors, which ``myst_heading_anchors`` makes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path("docs") / "site"
#: The site's pages, as paths under the repository's root; the README is the home page (``index``), followed by
#: the table of contents of ``docs/site/index.md``.
PAGES = ("README.md", "docs/*.md", "notebooks/[0-9]*.ipynb", "notebooks/solutions/[0-9]*.ipynb")
HOME, INDEX, IMAGES = Path("README.md"), Path("index.md"), Path("docs") / "images"
REPOSITORY_NAME = "hp-mlm/hp-mlm"
REPOSITORY = f"https://github.com/{REPOSITORY_NAME}"
#: The set-up page, which the site stamps with the course's version (:func:`course_version`).
SETUP_PAGE = Path("docs") / "setup.md"
COLAB = "https://colab.research.google.com"
FIGURE = "*Figure:* "
LINK = re.compile(r"(?<!!)(\[[^\]]*\]\()([^)\s]+)(\))")
FENCE = re.compile(r"(^```.*?^```)", re.S | re.M)


def figure_alt_text(notebook: dict) -> int:
    """Give every image output the description that follows it (``notebook``: nbformat's JSON dict,
    changed in place): the text of the next markdown cell when it starts with ``*Figure:*``, without
    that label and Markdown marks, as ``cell.metadata.mystnb.image.alt``. Returns how many cells got one."""
    cells, given = notebook["cells"], 0
    for cell, following in zip(cells, cells[1:]):
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        text = "".join(following["source"])
        if cell["cell_type"] == "code" and images and following["cell_type"] == "markdown" and text.startswith(FIGURE):
            alt = re.sub(r"[*`]", "", text.removeprefix(FIGURE)).strip()
            cell["metadata"].setdefault("mystnb", {}).setdefault("image", {})["alt"] = alt
            given += 1
    return given


def colab_badge(notebook: dict, page: Path) -> bool:
    """Put a badge that opens ``page`` (a notebook's path under the root) in Colab at the top of its first
    cell, as the episodes have; a notebook that has one already is left alone. Returns whether one was added."""
    first = "".join(notebook["cells"][0]["source"])
    if COLAB in first:
        return False
    badge = f"[![Open In Colab]({COLAB}/assets/colab-badge.svg)]({COLAB}/github/{REPOSITORY_NAME}/blob/main/{page.as_posix()})"
    cell = notebook["cells"][0]
    if cell["cell_type"] == "markdown":
        cell["source"] = f"{badge}\n\n{first}"
    else:
        notebook["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": badge})
    return True


def outside_links(markdown: str, page: Path, pages: set[Path], root: Path = ROOT) -> str:
    """``markdown`` of ``page`` (a path under ``root``) with each relative link to a file that is not one
    of ``pages`` pointed at that file on GitHub; web links, anchors on the same page and code blocks stay."""

    def repoint(match: re.Match) -> str:
        target, _, anchor = match[2].partition("#")
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
            return match[0]
        resolved = Path(os.path.normpath(page.parent / target))
        if resolved == HOME:  # the README is the site's home page
            home = os.path.relpath(INDEX, page.parent)
            return f"{match[1]}{Path(home).as_posix()}{'#' + anchor if anchor else ''}{match[3]}"
        if resolved in pages:
            return match[0]
        kind = "tree" if (root / resolved).is_dir() else "blob"
        return f"{match[1]}{REPOSITORY}/{kind}/main/{resolved.as_posix()}{'#' + anchor if anchor else ''}{match[3]}"

    parts = FENCE.split(markdown)
    return "".join(part if part.startswith("```") else LINK.sub(repoint, part) for part in parts)


def stage(root: Path, src: Path) -> list[Path]:
    """Copy the site's pages from ``root`` to ``src`` (emptied first) and prepare them (see the module's
    docstring): the home page ``index.md`` is the README followed by ``docs/site/index.md``'s table of contents,
    with the README's pictures (``docs/images``). Returns the pages' paths under ``root``."""
    pages = sorted({p.relative_to(root) for pattern in PAGES for p in root.glob(pattern)})
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    home = outside_links((root / HOME).read_text(encoding="utf-8"), HOME, set(pages), root)
    contents = (root / CONFIG / "index.md").read_text(encoding="utf-8")
    (src / INDEX).write_text(f"{home}\n{contents}", encoding="utf-8")
    shutil.copytree(root / IMAGES, src / IMAGES)
    for page in pages:
        if page == HOME:
            continue
        (src / page).parent.mkdir(parents=True, exist_ok=True)
        text = (root / page).read_text(encoding="utf-8")
        if page.suffix == ".ipynb":
            notebook = json.loads(text)
            figure_alt_text(notebook)
            colab_badge(notebook, page)
            for cell in notebook["cells"]:
                if cell["cell_type"] == "markdown":
                    cell["source"] = outside_links("".join(cell["source"]), page, set(pages), root)
            text = json.dumps(notebook, ensure_ascii=False, indent=1)
        else:
            text = outside_links(text, page, set(pages), root)
        if page == SETUP_PAGE:
            text = course_version(text)
        (src / page).write_text(text, encoding="utf-8")
    return pages


def course_version(markdown: str) -> str:
    """The set-up page with the course's own version under its title: the libraries' versions are on
    ``doctor``'s screen, and its ``hp-mlm`` line is the version installed, to compare with the site's."""
    import hp_mlm

    title, _, rest = markdown.partition("\n")
    stamp = f"This site shows hp-mlm {hp_mlm.__version__}; the `hp-mlm` line of `python -m hp_mlm doctor` names the one installed."
    return f"{title}\n\n{stamp}\n{rest}"


def build(out: str | Path = ROOT / "build" / "site", root: Path = ROOT, quiet: bool = True) -> Path:
    """Build the website into ``out`` from the pages under ``root``, without executing a notebook; returns
    the path of its ``index.html``. Warnings (a broken link or anchor among them) fail the build.

    Raises:
        ModuleNotFoundError: Sphinx or myst-nb is not installed (says which file to install from).
        RuntimeError: Sphinx reported a warning or an error (they are printed above).
    """
    try:
        from sphinx.cmd.build import build_main
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"building the site needs Sphinx and myst-nb: pip install -r {CONFIG.as_posix()}/requirements.txt"
        ) from None
    out = Path(out).resolve()
    src = out.with_name(out.name + "-src")
    stage(root, src)
    options = ["-b", "html", "-c", str(root / CONFIG), "-W", "--keep-going", "-E"] + (["-q"] if quiet else [])
    if build_main([*options, str(src), str(out)]) != 0:
        raise RuntimeError(f"the site build reported problems (above); the pages are staged in {src}")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hp_mlm.ops.site", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="build the course's website into a folder")
    built.add_argument("--out", default=str(ROOT / "build" / "site"), help="the folder (default: build/site)")
    args = parser.parse_args(argv)
    try:
        index = build(args.out)
    except (ModuleNotFoundError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"built the course's website: open {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
