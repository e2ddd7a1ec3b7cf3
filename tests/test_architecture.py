"""The shape of the package: each module imports only from the layers below it (ARCHITECTURE.md)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hp_mlm"
#: Bottom to top. A module may import modules of lower layers only, never its own layer or above.
LAYERS = [
    {"common", "profiles", "troubleshooting", "allocator"},  # helpers below every step
    {"config", "hub"},
    {"data", "models", "entities"},
    {"tokens", "words"},
    {"masking", "packing"},
    {"callbacks", "checkpoints", "objective"},
    {"plan"},
    {"training"},
    {"evaluation"},
    {"scoring"},
    {"inference"},
    {"plots", "probes", "downstream"},
    {"prepare", "checking", "course", "report"},
    {"job", "study", "library", "exercises", "model_exercises", "doctor"},
    {"flags"},
    {"cli"},
    {"__main__"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def package_imports(source: str) -> set[str]:
    """The hp_mlm modules a module's source imports (``from .x import``, ``import hp_mlm.x``, ``from . import x``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("hp_mlm."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("hp_mlm."))
    return found


def violations(sources: dict[str, str]) -> list[str]:
    bad = []
    for module, source in sources.items():
        for target in sorted(package_imports(source)):
            if target not in LAYER or module not in LAYER:
                bad.append(f"{module} -> {target}: not placed in a layer")
            elif LAYER[target] >= LAYER[module]:
                bad.append(f"{module} (layer {LAYER[module]}) imports {target} (layer {LAYER[target]})")
    return bad


def package_sources() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def test_every_module_has_a_layer():
    assert set(package_sources()) == set(LAYER)


def test_imports_follow_the_pipeline_order():
    assert violations(package_sources()) == []


@pytest.mark.parametrize(
    "module, line",
    [
        ("masking", "from .training import train"),  # an earlier step importing a later one
        ("config", "from .cli import main"),
        ("evaluation", "import hp_mlm.inference"),  # absolute spelling, inside a function too
        ("tokens", "from . import masking"),
        ("data", "from .models import load_model"),  # two modules of the same layer
    ],
)
def test_a_reversed_import_is_caught(module, line):
    sources = package_sources()
    sources[module] += f"\n\ndef _late():\n    {line}\n"
    assert violations(sources), f"{line!r} in {module} was not caught"


def test_no_module_is_longer_than_300_lines():
    # the files are formatted (test_the_code_is_formatted_and_lint_clean), so these are formatted lines
    lengths = {name: len(source.splitlines()) for name, source in package_sources().items()}
    assert max(lengths.values()) <= 300, lengths


def code_lines(source: str, node: ast.AST) -> int:
    """Lines of code in a function, its ``def`` included: its lines less blank ones, comments and its docstring."""
    lines = source.splitlines()[node.lineno - 1 : node.end_lineno]
    docstring = set()
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        docstring = set(range(first.lineno, first.end_lineno + 1))
    return sum(
        1
        for number, line in enumerate(lines, start=node.lineno)
        if line.strip() and not line.strip().startswith("#") and number not in docstring
    )


def longest_functions(sources: dict[str, str], limit: int = 60) -> dict[str, int]:
    """``{"module.function": lines of code}`` for every function longer than ``limit``."""
    found = {}
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and code_lines(source, node) > limit:
                found[f"{module}.{node.name}"] = code_lines(source, node)
    return found


def test_no_function_is_longer_than_60_lines_of_code():
    benchmarks = {f"benchmarks/{p.stem}": p.read_text(encoding="utf-8") for p in (ROOT / "benchmarks").glob("*.py")}
    assert longest_functions(package_sources()) == {}
    assert longest_functions(benchmarks) == {}


def test_the_length_check_counts_code_not_docstrings_or_comments():
    body = "\n".join(f"    x{i} = {i}" for i in range(60))  # 60 statements and the def line
    long = f'def f():\n    """Doc.\n\n    More doc.\n    """\n    # a comment\n\n{body}\n'
    assert longest_functions({"m": long}) == {"m.f": 61}
    assert longest_functions({"m": long.replace("    x59 = 59\n", "")}) == {}


def test_the_code_is_formatted_and_lint_clean():
    paths = ["hp_mlm", "tests", "benchmarks"]
    for command in (["format", "--check", *paths], ["check", *paths]):
        done = subprocess.run([sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"
