"""The course's website: built from the committed notebooks and docs (never executed), then opened
page by page in a real browser (Debian's headless Chromium, driven by Selenium).

Locally the browser tests skip, saying why, where Sphinx and myst-nb, Selenium, chromium or
chromedriver are missing; in CI (``CI=true``, ``.ci/run`` installs them) they fail instead. Two
screenshots are saved in ``build/site-screenshots/`` (the home page, and notebook 04 at its first figure).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from helpers import committed, committed_notebook

from hp_mlm.ops.site import PAGES, REPOSITORY, build, colab_badge, figure_alt_text, outside_links

# Sphinx 9 announces API changes for its version 11 in the theme and parser; they say nothing about the pages
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "site-screenshots"
NOTEBOOKS = sorted(p.relative_to(ROOT) for pattern in PAGES[2:] for p in committed(pattern))


def missing(reason: str) -> None:
    """Skip locally; in CI the site's tools are installed, so a missing one is a failure."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; .ci/run installs it in CI")
    pytest.skip(reason)


# --- preparing the pages (no Sphinx needed) -------------------------------------------------------------
def test_a_figure_gets_the_description_that_follows_it_as_alt_text():
    png = {"output_type": "display_data", "data": {"image/png": "iVBOR"}, "metadata": {}}
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [png], "source": "plot()"},
            {
                "cell_type": "markdown",
                "metadata": {},
                "source": ["*Figure:* the `max_length` loss per step. ", "Look at *it*."],
            },
            {"cell_type": "code", "metadata": {}, "outputs": [png], "source": "plot()"},
            {"cell_type": "markdown", "metadata": {}, "source": "No description here."},
        ]
    }
    assert figure_alt_text(notebook) == 1
    assert notebook["cells"][0]["metadata"] == {
        "mystnb": {"image": {"alt": "the max_length loss per step. Look at it."}}
    }
    assert notebook["cells"][2]["metadata"] == {}


def test_a_notebook_without_a_colab_badge_gets_one_for_its_own_path():
    page = Path("notebooks/solutions/04_evaluation_solutions.ipynb")
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# 04 · Solutions\n", "Text."]}]}
    assert colab_badge(notebook, page) is True
    first = notebook["cells"][0]["source"]
    assert first.startswith("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]")
    assert f"/github/hp-mlm/hp-mlm/blob/main/{page.as_posix()})\n\n# 04 · Solutions\nText." in first
    assert colab_badge(notebook, page) is False and notebook["cells"][0]["source"] == first  # once only


def test_links_to_files_outside_the_site_point_at_github_and_the_rest_stay():
    pages = {Path("README.md"), Path("docs/glossary.md"), Path("notebooks/03_training.ipynb")}
    text = (
        "[a](../docs/glossary.md#perplexity) [b](../ARCHITECTURE.md) [c](#here) [d](https://example.org/x.md) "
        "![img](fig.png)\n```\n[e](../ARCHITECTURE.md)\n```\n[f](../benchmarks/results/x.md#top)"
    )
    out = outside_links(text, Path("notebooks/03_training.ipynb"), pages)
    assert "[a](../docs/glossary.md#perplexity)" in out and "[c](#here)" in out and "(https://example.org/x.md)" in out
    assert f"[b]({REPOSITORY}/blob/main/ARCHITECTURE.md)" in out
    assert f"[f]({REPOSITORY}/blob/main/benchmarks/results/x.md#top)" in out
    assert "```\n[e](../ARCHITECTURE.md)\n```" in out and "![img](fig.png)" in out  # code and images as written


def test_the_set_up_page_shows_the_courses_own_version(tmp_path):
    from hp_mlm import __version__
    from hp_mlm.ops.site import SETUP_PAGE, stage

    stage(ROOT, tmp_path / "src")
    title, blank, stamp = (tmp_path / "src" / SETUP_PAGE).read_text(encoding="utf-8").splitlines()[:3]
    assert title == "# Setting up a machine" and not blank
    assert stamp.startswith(f"This site shows hp-mlm {__version__}; ")


# --- the built site in a browser -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built once for this module (its build time printed)."""
    if not (importlib.util.find_spec("sphinx") and importlib.util.find_spec("myst_nb")):
        missing("the site builder is not installed (pip install -r docs/site/requirements.txt)")
    started = time.perf_counter()
    index = build(tmp_path_factory.mktemp("site") / "site")
    print(f"site built in {time.perf_counter() - started:.1f} s")
    return index.parent


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium, driven through its own chromedriver (nothing is downloaded)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        missing("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    if not importlib.util.find_spec("selenium"):
        missing("selenium is not installed (pip install -r docs/site/requirements.txt)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    yield chrome
    chrome.quit()


def page_of(source: Path) -> str:
    return source.with_suffix(".html").as_posix()


def visit(browser, site: Path, page: str) -> dict:
    """Open ``page`` and read what a reader sees: the title, code blocks, links, images, ids."""
    browser.get((site / page).as_uri())
    return browser.execute_script(
        """
        const shown = e => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);
        const h1 = [...document.querySelectorAll('h1')].find(shown);
        return {
          title: h1 && shown(h1) ? h1.textContent.replace(/[#¶]/g, '').trim() : null,
          code_cells: [...document.querySelectorAll('div.cell div.cell_input pre')].filter(shown).length,
          code_blocks: [...document.querySelectorAll('article pre, main pre')].filter(shown).length,
          links: [...document.querySelectorAll('a[href]')].map(a => a.href),
          images: [...document.querySelectorAll('img')].map(i => ({alt: i.getAttribute('alt') || '', src: i.src})),
          ids: [...document.querySelectorAll('[id]')].map(e => e.id),
          badges: [...document.querySelectorAll('a[href*="colab.research.google.com"] img')].map(i => i.alt),
          colab: [...document.querySelectorAll('a[href*="colab.research.google.com"]')].map(a => a.href),
        };
        """
    )


@pytest.fixture(scope="module")
def pages(site, browser):
    """What the browser saw on every page of the site's table of contents, by page path."""
    started = time.perf_counter()
    sources = sorted({p.relative_to(ROOT) for pattern in PAGES for p in ROOT.glob(pattern)} - {Path("README.md")})
    seen = {page: visit(browser, site, page) for page in ["index.html", *map(page_of, sources)]}
    print(f"{len(seen)} pages read in the browser in {time.perf_counter() - started:.1f} s")
    return seen


def test_every_page_renders_its_title_and_every_notebook_its_code_cells_and_colab_badge(pages):
    assert len(pages) == 1 + len(list((ROOT / "docs").glob("*.md"))) + len(NOTEBOOKS)  # the README is the home page
    for page, seen in pages.items():
        assert seen["title"], f"{page}: no visible title"
    for source in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        heading = next(line for line in source.read_text(encoding="utf-8").splitlines() if line.startswith("# "))
        page = "index.html" if source.name == "README.md" else page_of(source.relative_to(ROOT))
        assert pages[page]["title"] == heading[2:].strip()
    for source in NOTEBOOKS:
        notebook = committed_notebook(ROOT / source)
        seen = pages[page_of(source)]
        heading = re.search(r"^# (.+)$", "".join(notebook["cells"][0]["source"]), re.M)[1]
        assert seen["title"] == heading.replace("`", "").strip()
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        assert seen["code_cells"] == len(code), f"{source}: {seen['code_cells']} code cells shown of {len(code)}"
        assert "Open In Colab" in seen["badges"]
        assert any(url.endswith(source.as_posix().removeprefix("notebooks/")) for url in seen["colab"]), source
    assert pages["docs/setup.html"]["code_blocks"] > 0 and pages["index.html"]["code_blocks"] > 0


def test_the_table_of_contents_is_in_course_order(pages, site):
    links = [urlsplit(u).path for u in pages["index.html"]["links"] if u.startswith("file:")]
    order = [page_of(s) for s in NOTEBOOKS if "solutions" not in s.parts]
    firsts = [next(i for i, link in enumerate(links) if link.endswith("/" + page)) for page in order]
    assert firsts == sorted(firsts), "notebooks 00 to 06 appear in order"
    assert all(any(link.endswith("/" + page_of(s)) for link in links) for s in NOTEBOOKS)
    assert any(link.endswith("/docs/glossary.html") for link in links)


def test_every_internal_link_and_anchor_resolves(pages, site, browser):
    root = site.resolve().as_uri()
    ids = {page: set(seen["ids"]) for page, seen in pages.items()}
    broken, checked = [], 0
    for page, seen in pages.items():
        for url in {u for u in seen["links"] if u.startswith(root)}:
            path, anchor = unquote(urlsplit(url).path), urlsplit(url).fragment
            target = Path(path).relative_to(site.resolve()).as_posix()
            if not (site / target).is_file():
                broken.append(f"{page}: {url} (no such file)")
                continue
            if anchor and target.endswith(".html"):
                if target not in ids:
                    ids[target] = set(visit(browser, site, target)["ids"])
                if anchor not in ids[target]:
                    broken.append(f"{page}: {url} (no element with id {anchor!r})")
            checked += 1
    assert broken == []
    glossary = [u for u in pages["notebooks/03_training.html"]["links"] if "glossary.html#" in u]
    assert glossary and checked > 200


def test_every_image_has_alt_text_and_every_figure_its_description(pages):
    figures = 0
    for page, seen in pages.items():
        for image in seen["images"]:
            name = Path(urlsplit(image["src"]).path).name
            assert image["alt"].strip() and image["alt"] != name, f"{page}: {name} has no alt text"
            figures += "/_images/" in image["src"]
    fig = pages["notebooks/04_evaluation.html"]["images"]
    assert any(i["alt"].startswith("top-1 and top-5 accuracy on the held-out rows") for i in fig)
    assert figures >= 8


def test_the_widget_cell_of_notebook_04_shows_its_table(site, browser):
    """The "Try your own sentence" widget is saved with a static copy of its tables, which the page shows
    (a widget alone leaves the page's output empty: no widget state is saved)."""
    browser.get((site / "notebooks/04_evaluation.html").as_uri())
    shown = browser.execute_script(
        """
        const shown = e => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);
        const cell = [...document.querySelectorAll('div.cell')].find(
          c => (c.querySelector('div.cell_input') || {}).textContent?.includes('show_before_after('));
        if (!cell) return null;
        const tables = [...cell.querySelectorAll('div.cell_output table')].filter(shown);
        return {tables: tables.length, text: tables.map(t => t.textContent).join(' ')};
        """
    )
    assert shown is not None, "no cell calls show_before_after on the page"
    assert shown["tables"] >= 2 and "mask 1" in shown["text"], shown


def test_solutions_start_collapsed_and_open_on_a_click(site, browser):
    from selenium.webdriver.common.by import By

    opened = 0
    for source in NOTEBOOKS:
        browser.get((site / page_of(source)).as_uri())
        blocks = browser.find_elements(By.CSS_SELECTOR, "details")
        expected = sum("".join(c["source"]).count("<details>") for c in committed_notebook(ROOT / source)["cells"])
        assert len(blocks) == expected, f"{source}: {len(blocks)} solutions rendered of {expected}"
        for block in blocks:
            inside = block.find_elements(By.CSS_SELECTOR, ":scope > :not(summary)")
            assert not block.get_property("open") and inside, f"{source}: a solution is open or empty"
            assert not any(e.is_displayed() for e in inside), f"{source}: a solution shows before it is opened"
        if blocks and opened < 3:
            summary = blocks[0].find_element(By.TAG_NAME, "summary")
            browser.execute_script("arguments[0].scrollIntoView()", summary)
            summary.click()
            assert blocks[0].get_property("open") and blocks[0].find_element(By.CSS_SELECTOR, "pre").is_displayed()
            opened += 1
    assert opened == 3


def test_two_screenshots_for_the_closing_note(site, browser):
    from selenium.webdriver.common.by import By

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.get((site / "index.html").as_uri())
    assert browser.save_screenshot(str(SCREENSHOTS / "home.png"))
    browser.get((site / "notebooks" / "04_evaluation.html").as_uri())
    figure = browser.find_element(By.CSS_SELECTOR, "img[src*='_images']")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", figure)
    assert browser.save_screenshot(str(SCREENSHOTS / "04_evaluation_figure.png"))
    assert all((SCREENSHOTS / n).stat().st_size > 10_000 for n in ("home.png", "04_evaluation_figure.png"))
