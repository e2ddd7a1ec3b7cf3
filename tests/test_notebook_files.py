"""What keeps nbval's run of the committed notebooks independent of the machine that saved them.

* The kernel: nbval starts the kernel named in a notebook's ``metadata.kernelspec.name`` unless
  ``--nbval-current-env`` is given; a notebook saved from a kernel called, say,
  ``conda-env-hp-mlm-py`` fails on every other machine. The README's and CI's test commands pass
  the flag, and every notebook names ``python3``.
* A trailing ``;``: nbval (0.10 and later) runs cells without IPython's history, so a ``;`` no
  longer hides a cell's result (computationalmodelling/nbval#194); in a cell whose output nbval
  compares, the result appears in the run but not in the committed copy, and the cell fails.
  With ``--nbval-lax`` a cell is compared only when marked ``# NBVAL_CHECK_OUTPUT`` (or tagged
  ``nbval-check-output``), unless also marked to skip or to ignore its output.
* "IProgress not found": tqdm's text when ipywidgets is missing; a committed output holding it
  shows that the install left ipywidgets out.

The detection functions take notebook dicts, so that they are tested on synthetic notebooks too.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

import pytest
from helpers import committed, committed_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = committed("notebooks/*.ipynb") + committed("notebooks/solutions/*.ipynb")
KERNEL = "python3"
TEST_COMMAND = re.compile(r"pytest\s+(?:-n auto --dist loadfile\s+)?--nbval[^`\n]*")


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return text if isinstance(text, str) else "".join(text)


def kernel_problems(nb: dict) -> list[str]:
    name = nb.get("metadata", {}).get("kernelspec", {}).get("name")
    return [] if name == KERNEL else [f"metadata.kernelspec.name is {name!r}, not {KERNEL!r}"]


def output_checked(cell: dict, lax: bool = True) -> bool:
    """Whether nbval compares this cell's outputs, decided as nbval's collector does it."""
    from nbval.plugin import find_comment_markers, find_metadata_tags

    if cell.get("cell_type") != "code":
        return False
    options = dict(find_metadata_tags(cell.get("metadata", {})))
    options.update(find_comment_markers(source(cell)))  # comments win over tags, as in nbval
    if options.get("skip"):
        return False
    return bool(options.get("check", not lax))


def ends_with_semicolon(code: str) -> bool:
    """Whether the last line of code (comments and blank lines aside) ends in ``;``."""
    lines = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return False
    if lines[-1].lstrip().startswith(("%", "!")):  # IPython magic or shell escape: its text
        return lines[-1].rstrip().endswith(";")
    python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(python + "\n").readline))
    except (tokenize.TokenError, SyntaxError):  # not Python: look at the text
        return lines[-1].split("#", 1)[0].rstrip().endswith(";")
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    meaningful = [t for t in tokens if t.type not in skipped]
    return bool(meaningful) and meaningful[-1].type == tokenize.OP and meaningful[-1].string == ";"


def semicolon_problems(nb: dict, lax: bool = True) -> list[str]:
    return [
        f"code cell {n} ends in ';' and nbval compares its output: drop the ';' (nbval shows the result anyway)"
        for n, cell in enumerate(c for c in nb.get("cells", []) if c.get("cell_type") == "code")
        if output_checked(cell, lax) and ends_with_semicolon(source(cell))
    ]


def output_texts(cell: dict):
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            yield source({"source": out.get("text", "")})
        elif out.get("output_type") == "error":
            yield "\n".join([out.get("ename", ""), out.get("evalue", ""), *out.get("traceback", [])])
        else:
            for value in out.get("data", {}).values():
                yield (
                    value
                    if isinstance(value, str)
                    else "".join(value)
                    if isinstance(value, list)
                    else json.dumps(value)
                )


def iprogress_problems(nb: dict) -> list[str]:
    return [
        f"cell {i} shows tqdm's 'IProgress not found': ipywidgets was missing when it ran"
        for i, cell in enumerate(nb.get("cells", []))
        if any("IProgress not found" in text for text in output_texts(cell))
    ]


def notebook(*cells: dict, kernel: str | None = KERNEL) -> dict:
    metadata = (
        {} if kernel is None else {"kernelspec": {"name": kernel, "display_name": "Python 3", "language": "python"}}
    )
    return {"cells": list(cells), "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def code(text: str, tags: list[str] | None = None, outputs: list[dict] | None = None) -> dict:
    metadata = {"tags": tags} if tags else {}
    return {"cell_type": "code", "source": text, "metadata": metadata, "outputs": outputs or [], "execution_count": 1}


# --- the detection, on synthetic notebooks --------------------------------------------------------


@pytest.mark.parametrize("kernel", ["conda-env-hp-mlm-py", "python3.11", "hp-mlm", None])
def test_a_kernelspec_other_than_python3_is_caught(kernel):
    assert kernel_problems(notebook(code("1 + 1"), kernel=kernel))


def test_python3_kernelspec_passes():
    assert kernel_problems(notebook(code("1 + 1"))) == []


@pytest.mark.parametrize(
    "text, tags",
    [
        ("# NBVAL_CHECK_OUTPUT\nplt.plot(x);", None),
        ("# NBVAL_CHECK_OUTPUT\nx = 1\nshow(x);  # a comment after it\n\n", None),
        ("#NBVAL_CHECK_OUTPUT\nfor i in range(2):\n    print(i);\n# the end\n", None),
        ("plt.plot(x);", ["nbval-check-output"]),
        ("# NBVAL_CHECK_OUTPUT\n%matplotlib inline\nplt.plot(x);", None),
    ],
)
def test_a_semicolon_in_a_compared_cell_is_caught(text, tags):
    assert semicolon_problems(notebook(code("import math"), code(text, tags)))


@pytest.mark.parametrize(
    "text, tags",
    [
        ("plt.plot(x);", None),  # --nbval-lax does not compare unmarked cells
        ("# NBVAL_CHECK_OUTPUT\nprint('a;')", None),  # the ';' is in a string
        ("# NBVAL_CHECK_OUTPUT\nx = 1; y = 2\nprint(x + y)", None),  # not on the last line
        ("# NBVAL_CHECK_OUTPUT\nprint(1)  # like this;", None),  # in a comment
        ("# NBVAL_SKIP\n# NBVAL_CHECK_OUTPUT\nplt.plot(x);", None),  # not run at all
        ("# NBVAL_IGNORE_OUTPUT\nplt.plot(x);", ["nbval-check-output"]),  # the comment wins
    ],
)
def test_cells_that_nbval_does_not_compare_or_that_end_without_a_semicolon_pass(text, tags):
    assert semicolon_problems(notebook(code(text, tags))) == []


def test_without_lax_every_unmarked_cell_is_compared():
    nb = notebook(code("plt.plot(x);"))
    assert semicolon_problems(nb, lax=True) == []
    assert semicolon_problems(nb, lax=False)


def test_iprogress_warning_in_an_output_is_caught():
    warning = {
        "output_type": "stream",
        "name": "stderr",
        "text": ["TqdmWarning: IProgress not found. ", "Please update jupyter and ipywidgets."],
    }
    assert iprogress_problems(notebook(code("from tqdm.auto import tqdm", outputs=[warning])))
    assert iprogress_problems(notebook(code("print('IProgress not found')"))) == []  # in the source only


# --- the committed notebooks, and the commands that run them --------------------------------------


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_names_the_python3_kernel(path):
    assert kernel_problems(committed_notebook(path)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_compared_cell_of_a_committed_notebook_ends_in_a_semicolon(path):
    assert semicolon_problems(committed_notebook(path)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_committed_output_says_iprogress_not_found(path):
    assert iprogress_problems(committed_notebook(path)) == []


@pytest.mark.parametrize("name", ["README.md", ".ci/run"])
def test_every_nbval_command_runs_the_current_environment(name):
    commands = TEST_COMMAND.findall((ROOT / name).read_text(encoding="utf-8"))
    assert commands, f"{name} has no `pytest --nbval...` command"
    for command in commands:
        assert "--nbval-current-env" in command.split(), f"{name}: {command!r} lacks --nbval-current-env"


@pytest.mark.parametrize("name", ["README.md", ".ci/run", ".ci/colab_versions.sh"])
def test_every_parallel_test_command_keeps_a_notebooks_cells_on_one_worker(name):
    """pytest-xdist's default hands out single items: a notebook's cells, which share one kernel in order,
    would be split between workers. ``--dist loadfile`` sends each file whole to one worker."""
    text = (ROOT / name).read_text(encoding="utf-8")
    commands = [line for line in text.splitlines() if "pytest" in line and "--nbval" in line]
    assert commands, f"{name} has no pytest command with nbval"
    for command in commands:
        assert "-n auto" in command and "--dist loadfile" in command, f"{name}: {command.strip()!r}"


def test_the_installed_nbval_has_the_current_env_flag(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("nbval")
    assert pytestconfig.getoption("nbval_current_env") in (False, True)  # raises if nbval lacks the option
