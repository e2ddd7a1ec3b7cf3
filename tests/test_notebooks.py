"""The course notebooks as committed: complete, in order, run by CI, Colab-ready and clean.

These tests read the notebook files only; they execute nothing (CI executes the notebooks with
``pytest --nbval-lax``, see ``notebooks/conftest.py``). To fix a failure about outputs, re-execute
and tidy the notebooks as ``notebooks/tidy.py`` describes.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from helpers import committed, committed_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXPECTED = [
    "00_setup.ipynb",
    "01_tokenising.ipynb",
    "02_masking.ipynb",
    "03_training.ipynb",
    "04_evaluation.ipynb",
    "05_going_further.ipynb",
    "06_the_library_way.ipynb",
]
COLAB = re.compile(
    r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/main/notebooks/([\w.-]+\.ipynb)"
)
REPO_URL = re.compile(r'^REPO_URL = "https://github\.com/([\w.-]+/[\w.-]+)"$', re.MULTILINE)
COLAB_GUARD = '"google.colab" in sys.modules'
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|root|home|tmp|Users|content)/")
MEMORY_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MAX_TEXT_OUTPUT = 20_000  # characters in one text output
MAX_NOTEBOOK_BYTES = 1_500_000


def load(name: str) -> dict:
    """The notebook as the repository holds it, not as a run in place left it (``helpers.committed_notebook``)."""
    return committed_notebook(NOTEBOOKS / name)


def source(cell: dict) -> str:
    text = cell["source"]
    return text if isinstance(text, str) else "".join(text)


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def output_texts(nb: dict):
    """(cell index, text) for every text-like output; images are skipped."""
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                yield i, source({"source": out["text"]})
            elif out["output_type"] == "error":
                yield i, "\n".join([out.get("ename", ""), out.get("evalue", ""), *out.get("traceback", [])])
            else:
                for mime, value in out.get("data", {}).items():
                    if mime.startswith("text/") or mime.endswith("json"):
                        yield (
                            i,
                            value
                            if isinstance(value, str)
                            else "".join(value)
                            if isinstance(value, list)
                            else json.dumps(value),
                        )


def python_only(code: str) -> str:
    """Cell source with IPython magics and shell escapes blanked, so that ``ast`` can parse it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())


# --- the set of notebooks, and that CI runs them ---------------------------------------------------


def test_the_notebooks_are_the_steps_numbered_without_gaps():
    found = sorted(p.name for p in committed("notebooks/*.ipynb"))
    assert found == EXPECTED
    numbers = [int(re.fullmatch(r"(\d\d)_[a-z_]+\.ipynb", name).group(1)) for name in found]
    assert numbers == list(range(len(EXPECTED)))


def test_ci_executes_every_notebook():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib

        options = tomllib.loads(pyproject)["tool"]["pytest"]["ini_options"]
    except ModuleNotFoundError:  # Python 3.10: read the two lines we need
        options = {
            key: ast.literal_eval(m.group(1))
            if (m := re.search(rf"^{key}\s*=\s*(.+)$", pyproject, re.MULTILINE))
            else ""
            for key in ("testpaths", "addopts")
        }
    assert "notebooks" in options["testpaths"], "pytest's testpaths must include notebooks, or CI skips them"
    addopts = options.get("addopts", "")
    addopts = addopts if isinstance(addopts, str) else " ".join(addopts)
    assert "notebooks" not in addopts, f"addopts must not deselect the notebooks: {addopts!r}"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"HP_MLM_PROFILE=smoke .*pytest .*--nbval", ci), (
        "CI must run pytest --nbval(-lax) in the smoke profile"
    )


def test_conftest_keeps_stderr_out_of_comparisons():
    assert "stderr" in (NOTEBOOKS / "conftest.py").read_text(encoding="utf-8")


# --- each notebook -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXPECTED)
def test_first_cell_is_a_colab_badge_for_this_notebook(name):
    nb = load(name)
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown"
    match = COLAB.search(source(first))
    assert match, "the first cell needs an 'Open in Colab' badge"
    assert match.group(2) == name, f"the badge opens {match.group(2)}, not this notebook"
    assert "colab-badge.svg" in source(first)
    install = REPO_URL.search(source(code_cells(nb)[0]))
    assert install and install.group(1) == match.group(1), "the badge and REPO_URL must name the same repository"


@pytest.mark.parametrize("name", EXPECTED)
def test_first_code_cell_installs_only_in_colab(name):
    cell = source(code_cells(load(name))[0])
    tree = ast.parse(python_only(cell))
    guards = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') == COLAB_GUARD
    ]
    assert len(guards) == 1, f"the first code cell needs one `if {COLAB_GUARD}:` block"
    guarded = "\n".join(cell.splitlines()[guards[0].lineno - 1 : guards[0].end_lineno])
    assert "pip" in guarded and "install" in guarded and "REPO_URL" in guarded, (
        "the guard must pip-install the package from REPO_URL"
    )
    guard_lines = range(guards[0].lineno, guards[0].end_lineno + 1)
    outside = [
        line
        for n, line in enumerate(cell.splitlines(), 1)
        if n not in guard_lines and not line.lstrip().startswith("#")
    ]
    assert not any("pip" in line for line in outside), "installs (pip, %pip, !pip) must stay inside the Colab guard"
    assert any(isinstance(node, ast.Import) and any(a.name == "sys" for a in node.names) for node in tree.body)


@pytest.mark.parametrize(
    "installed",
    [{}, {"datasets": "5.2.0", "pyarrow": "26.0.1"}, {"tokenizers": "0.23.1", "fsspec": "2026.9.0", "numpy": "2.3.2"}],
)
def test_the_install_cell_says_when_it_changed_a_package_colab_ships(installed, monkeypatch, capsys):
    """The first code cell, run as in Colab (a stand-in pip): it names each package the install changed
    and asks for a restart only then; with Colab's versions left as they were it says nothing."""
    import importlib.metadata
    import subprocess
    import sys
    import types

    colab = {"torch": "2.11.0", "transformers": "5.15.0", "datasets": "4.0.0", "pyarrow": "18.1.0"}
    colab |= {"huggingface_hub": "1.27.0", "accelerate": "1.14.0", "ipywidgets": "7.7.1", "tokenizers": "0.22.2"}
    colab |= {"numpy": "2.1.3", "pandas": "2.2.3", "fsspec": "2025.3.0"}
    disk = dict(colab)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: disk[name])
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: disk.update(installed))
    cells = {source(code_cells(load(name))[0]) for name in EXPECTED}
    assert len(cells) == 1  # every notebook opens with the same install cell
    exec(python_only(cells.pop()), {})
    out = capsys.readouterr().out
    if not installed:
        assert out == ""
    else:
        assert all(f"{name} {colab[name]} -> {version}" in out for name, version in installed.items())
        assert "Restart session" in out and "torch" not in out


def test_the_install_cell_sends_your_text_and_keeps_each_runs_folder_on_drive(tmp_path, monkeypatch):
    """The first code cell with ``MY_TEXT`` and ``KEEP_OUTPUTS_ON_DRIVE`` set, run as in Colab (a stand-in pip
    and Drive): the settings read the learner's file, and ``outputs/`` becomes a link to the Drive folder, so
    the run's folder there names its data (a Drive folder per profile would mix two texts' runs)."""
    import importlib.metadata
    import os
    import subprocess
    import sys
    import types

    from hp_mlm.config import get_settings

    colab, drive = types.ModuleType("google.colab"), types.ModuleType("google.colab.drive")
    drive.mount, colab.drive = lambda folder: None, drive
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.drive", drive)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.0")
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: None)
    linked = []
    monkeypatch.setattr(os, "makedirs", lambda *args, **kwargs: None)
    monkeypatch.setattr(os, "symlink", lambda target, link: linked.append((target, link)))
    monkeypatch.setattr(os.path, "lexists", lambda path: False)
    for name in ("HP_MLM_DATASET", "HP_MLM_SPLIT", "HP_MLM_PROFILE", "HP_MLM_OUTPUT_DIR"):
        monkeypatch.setenv(name, "")  # so that monkeypatch removes what the cell sets, after the test
        monkeypatch.delenv(name)
    cell = python_only(source(code_cells(load(EXPECTED[3]))[0]))
    for setting, value in (("MY_TEXT", '"/content/My Book.txt"'), ("KEEP_OUTPUTS_ON_DRIVE", "True")):
        assert f"\n{setting} = " in cell, f"the install cell no longer has {setting}"
        cell = re.sub(rf"^{setting} = [^#\n]*", f"{setting} = {value}  ", cell, count=1, flags=re.M)
    monkeypatch.chdir(tmp_path)  # Colab's /content: no repository above
    exec(cell, {})
    assert os.environ["HP_MLM_DATASET"] == "/content/My Book.txt" and os.environ["HP_MLM_SPLIT"] == "train"
    assert linked == [("/content/drive/MyDrive/hp-mlm/outputs", "/content/outputs")]
    assert "HP_MLM_OUTPUT_DIR" not in os.environ
    assert get_settings("quick").output_dir == "outputs/quick-My-Book"  # under the link: on Drive


@pytest.mark.parametrize("name", EXPECTED)
def test_google_colab_is_imported_only_inside_the_guard(name):
    for number, cell in enumerate(code_cells(load(name))):
        tree = ast.parse(python_only(source(cell)))
        allowed: set[int] = set()
        if number == 0:
            for node in tree.body:
                if isinstance(node, ast.If) and COLAB_GUARD in ast.unparse(node.test).replace("'", '"'):
                    allowed |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n == "google" or n.startswith("google.colab") for n in names):
                assert id(node) in allowed, f"code cell {number} imports google.colab outside the Colab guard"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_was_executed_top_to_bottom_with_a_real_model_and_says_so(name):
    nb = load(name)
    counts = [c["execution_count"] for c in code_cells(nb)]
    assert None not in counts, "every code cell must be executed (commit the notebooks executed)"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), "cells must run once, in order"
    assert any("profile: offline" in text for _, text in output_texts(nb)), (
        "execute the committed copy with HP_MLM_PROFILE=offline"
    )
    intro = source(nb["cells"][0])
    assert "`offline` profile" in intro and "`full` profile" in intro and "docs/results.md" in intro, (
        "one line says which profile produced the outputs, that Colab's full profile gives the books', and links how"
    )


@pytest.mark.parametrize("name", EXPECTED)
def test_invariants_are_asserts_and_compared_outputs_are_profile_free(name):
    cells = code_cells(load(name))
    assert any(re.search(r"^\s*assert ", source(c), re.M) for c in cells), "carry the invariants as in-cell asserts"
    for cell in cells:
        if source(cell).startswith("# NBVAL_CHECK_OUTPUT"):
            assert cell["outputs"], "a # NBVAL_CHECK_OUTPUT cell must carry its stored output"


@pytest.mark.parametrize("name", EXPECTED)
def test_no_frozen_progress_bars_and_no_text_from_elsewhere(name):
    for i, text in output_texts(load(name)):
        assert not re.search(r"\b0%\|", text), f"cell {i} holds a progress bar frozen at 0%"
        assert not re.search(r"\b(Dorothy|Scarecrow|oz_mlm)\b", text), f"cell {i} shows text the project did not write"


@pytest.mark.parametrize("name", [n for n in EXPECTED if n[:2] in ("03", "04", "05", "06")])
def test_later_notebooks_use_the_step_modules_not_the_job(name):
    code = "\n".join(source(c) for c in code_cells(load(name)))
    assert not re.search(r"hp_mlm(\.job| import job)", code), "notebooks 03-05 teach the steps: import step modules"


@pytest.mark.parametrize("name", EXPECTED)
def test_no_error_outputs(name):
    for i, cell in enumerate(load(name)["cells"]):
        errors = [o for o in cell.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"cell {i} holds an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"


@pytest.mark.parametrize("name", EXPECTED)
def test_outputs_hold_no_machine_paths_or_memory_addresses(name):
    for i, text in output_texts(load(name)):
        assert not MACHINE_PATH.search(text), (
            f"cell {i} prints an absolute path: {MACHINE_PATH.search(text).group(0)}..."
        )
        assert not MEMORY_ADDRESS.search(text), (
            f"cell {i} prints a memory address: {MEMORY_ADDRESS.search(text).group(0)}"
        )


@pytest.mark.parametrize("name", EXPECTED)
def test_no_widget_state_and_no_huge_outputs(name):
    nb = load(name)
    assert "widgets" not in nb["metadata"], "strip metadata.widgets (python notebooks/tidy.py)"
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            assert WIDGET_VIEW not in out.get("data", {}), (
                f"cell {i} holds a progress-bar widget (python notebooks/tidy.py)"
            )
    for i, text in output_texts(nb):
        assert len(text) <= MAX_TEXT_OUTPUT, f"cell {i} has a text output of {len(text)} characters"
    assert (NOTEBOOKS / name).stat().st_size <= MAX_NOTEBOOK_BYTES


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_reads_the_profile_and_imports_hp_mlm(name):
    code = "\n".join(source(c) for c in code_cells(load(name)))
    assert "get_settings()" in code, "read the profile and HP_MLM_<SETTING> overrides with get_settings()"
    assert "from hp_mlm" in code
    assert not re.search(r"from transformers import[^\n]*\bAdam", code), "use torch.optim.AdamW"


# --- run-to-run noise and what the course says its numbers are (noisy outputs) -----

TIMING = re.compile(r"\b(seconds|wall|time|s/step|it/s)\b", re.IGNORECASE)


def column_headers(text: str) -> list[str]:
    """The column headers of a table output: a pandas HTML table (the first row of its <thead>, the
    index corner left out) or a Markdown table (its first line); [] for other text."""
    if "<table" in text:
        head = re.search(r"<thead>\s*<tr[^>]*>(.*?)</tr>", text, re.S)
        return [h.strip() for h in re.findall(r"<th[^>]*>([^<]*)</th>", head.group(1) if head else "") if h.strip()]
    first = text.strip().splitlines()[0] if text.strip() else ""
    if first.startswith("|") and re.search(r"^\|[\s:|-]+\|$", "\n".join(text.strip().splitlines()[1:2])):
        return [h.strip() for h in first.strip("|").split("|") if h.strip()]
    return []


@pytest.mark.parametrize("name", EXPECTED)
def test_no_library_bars_and_no_timings_beside_results(name):
    for i, text in output_texts(load(name)):
        assert "Loading weights" not in text and not re.search(r"\d+it/s|examples/s", text), (
            f"cell {i} holds a library progress bar: silence it (disable_progress_bar) in the setup cell"
        )
        headers = column_headers(text)
        timed = [h for h in headers if TIMING.search(h)]
        assert not timed or len(timed) == len(headers), (
            f"cell {i} puts wall times {timed} beside results: they change every run; give them their own table"
        )


def test_the_study_says_how_long_its_runs_took_in_a_table_of_their_own():
    tables = [text for _, text in output_texts(load("05_going_further.ipynb")) if column_headers(text)]
    results = [t for t in tables if any("top-1" in h for h in column_headers(t))]
    timings = [t for t in tables if column_headers(t) and all(TIMING.search(h) for h in column_headers(t))]
    assert results and timings


def test_perplexity_is_called_a_masked_token_pseudo_perplexity():
    prose = "\n".join(source(c) for c in load("04_evaluation.ipynb")["cells"] if c["cell_type"] == "markdown")
    assert re.search(r"pseudo-?\)?-?perplexity", prose, re.IGNORECASE)
    assert re.search(r"left-to-right|left to right", prose), "say why it is not a left-to-right model's perplexity"
    code = "\n".join(source(c) for c in code_cells(load("04_evaluation.ipynb")))
    assert "targets=" in code, "notebook 04 teaches fill_mask(..., targets=[...]) on the opening sentence"
