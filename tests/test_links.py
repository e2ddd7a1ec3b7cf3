"""Every internal link of the README, the docs, the benchmarks' README and the notebooks resolves:
the file exists and, for ``file#anchor``, the heading does (no network: web addresses are not followed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import committed, committed_notebook, markdown_anchors

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(  # the repository's, not a learner's (JupyterLab's .ipynb_checkpoints/ copies)
    [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *committed("docs/*.md")]
    + committed(".github/**/*.md")
    + committed("notebooks/**/*.ipynb")
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def markdown_of(path: Path) -> str:
    """A Markdown file's text, or a notebook's markdown cells joined."""
    if path.suffix == ".ipynb":
        cells = committed_notebook(path)["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def internal_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", markdown_of(path), flags=re.S)  # code blocks hold no links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_link_scan_sees_the_docs_and_the_notebooks():
    names = {p.name for p in SOURCES}
    assert {"README.md", "teaching.md", "setup.md", "troubleshooting.md", "glossary.md", "03_training.ipynb"} <= names
    assert any("glossary.md#" in link for link in internal_links(ROOT / "notebooks" / "03_training.ipynb"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_internal_link_and_anchor_resolves(source):
    broken = []
    for link in internal_links(source):
        target, _, anchor = link.partition("#")
        file = (source.parent / target).resolve() if target else source
        if not file.exists():
            broken.append(f"{link}: no such file")
        elif anchor and file.suffix in (".md", ".ipynb") and anchor not in markdown_anchors(markdown_of(file)):
            broken.append(f"{link}: no heading with that anchor in {file.name}")
    assert broken == []
