"""The shape of the package (ARCHITECTURE.md): four areas, imports in one direction, reading budgets.

- The core (the modules directly in ``hp_mlm/``) imports nothing from ``course``, ``studies`` or
  ``ops``; the package's ``__init__`` imports the version guard alone.
- Every module imports only modules of lower layers (across all four areas).
- Reading budgets: the code lines a reader meets following ``train``, ``evaluate``, ``fill_mask`` or
  ``mask_tokens`` through their calls, and the core's size. Each check proves it catches a violation.
- A function fits a screen (80 lines of code); ruff formats and lints the code.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import committed, committed_notebook

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hp_mlm"
AREAS = ("course", "studies", "ops")
#: Bottom to top. A module may import modules of lower layers only, never its own layer or above.
LAYERS = [
    {"common", "profiles", "ops.troubleshooting", "ops.allocator", "studies.master_weights", "ops.site"},
    {"config", "hub", "ops.versions", "course.shipped"},
    {"data", "models"},
    {"tokens"},
    {"masking"},
    {"checkpoints"},
    {"training"},
    {"callbacks"},
    {"evaluation"},
    {"scoring"},
    {"inference"},
    {"prepare"},
    {
        "course.plots",
        "studies.probes",
        "studies.downstream",
        "studies.original",
        "studies.breakdowns",
        "studies.entities",
        "studies.names",
        "ops.card",
    },
    {
        "course.checking",
        "course.episodes",
        "course.watch",
        "course.examples",
        "course.runs",
        "ops.report",
        "ops.handout",
        "ops.push",
    },
    {
        "ops.job",
        "course.catch_up",
        "course.premise",
        "studies.options",
        "course.exercises",
        "course.model_exercises",
        "ops.doctor",
    },
    # notebook 06's study trains its options' rows (studies.options.training_tokens); the widget opens on the
    # run's premise (course.premise)
    {"studies.library", "ops.flags", "course.widget"},
    {"ops.cli"},
    {"__main__"},
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}
#: Code lines a reader meets following each entry through its calls (see :func:`reading`), at most.
#: The loop calls its objective as a module (``plan.objective(...)``), which a call does not follow:
#: the loss it runs has its own line. ``evaluate`` calls the breakdowns it is given
#: (``studies.breakdowns``: none by default), ``fill_mask`` answers tokens and ``fill_words`` whole words.
BUDGETS = {
    ("training.train",): 150,
    ("training.MaskedLMObjective.forward",): 40,
    ("evaluation.evaluate",): 150,
    ("inference.fill_mask",): 250,
    ("inference.fill_words",): 250,
    ("masking.mask_tokens",): 80,
}
#: At most this many core modules and code lines in all. The issue asked 2,000 lines; ARCHITECTURE.md
#: says what the 2,250 are (nearly all of them reached from what notebooks 00-04 call).
CORE_MODULES, CORE_LINES = 16, 2250


def package_sources() -> dict[str, str]:
    """``{"training": source, "ops.job": source, "__init__": source, ...}``; subpackages' ``__init__``
    (a docstring each) left out."""
    sources = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            continue
        sources[".".join(parts)] = path.read_text(encoding="utf-8")
    return sources


def core(sources: dict[str, str]) -> dict[str, str]:
    """The learner's core: the step modules directly in ``hp_mlm/``."""
    return {m: s for m, s in sources.items() if "." not in m and m not in ("__init__", "__main__")}


def imported(module: str, node: ast.ImportFrom | ast.Import, modules: set[str]) -> list[tuple[str, str | None]]:
    """``(hp_mlm module, name or None)`` for each thing an import statement in ``module`` brings in
    (``modules``: the package's modules, to tell ``from hp_mlm.ops import job`` from ``from .x import f``)."""
    if isinstance(node, ast.Import):
        return [(a.name.removeprefix("hp_mlm."), None) for a in node.names if a.name.startswith("hp_mlm.")]
    if node.level:
        package = module.split(".")[: -node.level] if "." in module else []
        base = ".".join([*package, node.module] if node.module else package)
    elif node.module == "hp_mlm" or (node.module or "").startswith("hp_mlm."):
        base = node.module.removeprefix("hp_mlm").removeprefix(".")
    else:
        return []
    if base and base in modules:  # from .training import train
        return [(base, a.name) for a in node.names]
    return [(f"{base}.{a.name}" if base else a.name, None) for a in node.names]  # from hp_mlm.ops import job


def package_imports(module: str, source: str) -> set[str]:
    """The hp_mlm modules a module's source imports, anywhere in it (inside functions too)."""
    return {
        target
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target, _ in imported(module, node, set(package_sources()))
    }


def violations(sources: dict[str, str]) -> list[str]:
    bad = []
    for module, source in sources.items():
        targets = sorted(package_imports(module, source))
        if module == "__init__":
            bad += [f"__init__ imports {t}: only the version guard" for t in targets if t != "ops.versions"]
            continue
        for target in targets:
            if target not in LAYER or module not in LAYER:
                bad.append(f"{module} -> {target}: not placed in a layer")
            elif LAYER[target] >= LAYER[module]:
                bad.append(f"{module} (layer {LAYER[module]}) imports {target} (layer {LAYER[target]})")
            if module in core(sources) and target.split(".")[0] in AREAS:
                bad.append(f"{module} is in the core and imports {target}")
    return bad


def test_every_module_has_a_layer_and_every_area_a_folder():
    sources = package_sources()
    assert set(sources) - {"__init__"} == set(LAYER)
    assert {m.split(".")[0] for m in sources if "." in m} == set(AREAS)


def test_imports_follow_the_pipeline_order_and_the_core_imports_no_other_area():
    assert violations(package_sources()) == []


@pytest.mark.parametrize(
    "module, line",
    [
        ("masking", "from .training import train"),  # an earlier step importing a later one
        ("config", "from hp_mlm.ops.cli import main"),
        ("evaluation", "import hp_mlm.inference"),  # absolute spelling, inside a function too
        ("tokens", "from . import masking"),
        ("data", "from .models import load_model"),  # two modules of the same layer
        ("training", "from hp_mlm.ops.allocator import reuse_freed_memory"),  # the core reaching into ops
        ("prepare", "from hp_mlm.course import plots"),
        ("__init__", "from .training import train"),
    ],
)
def test_a_reversed_import_is_caught(module, line):
    sources = package_sources()
    sources[module] += f"\n\ndef _late():\n    {line}\n"
    assert violations(sources), f"{line!r} in {module} was not caught"


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


def module_code_lines(source: str) -> int:
    """Lines of code in a module: less blank lines, comments and every docstring."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings |= set(range(first.lineno, first.end_lineno + 1))
    return sum(
        1
        for number, line in enumerate(source.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    )


class Index:
    """Every function and method of some modules (``"training.train"``, ``"training.TrainingPlan.save"``)
    with its code lines, and what each one calls or names, resolved through imports."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources, self.lines, self.nodes, self.methods = sources, {}, {}, {}
        self.classes: dict[str, list[str]] = {}
        self.names: dict[str, dict[str, str]] = {}  # module -> {local name: "module.thing" or "module"}
        for module, source in sources.items():
            tree = ast.parse(source)
            names = self.names.setdefault(module, {})
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for (target, name), alias in zip(imported(module, node, set(sources)), node.names):
                        names[alias.asname or (name or target.split(".")[-1])] = f"{target}.{name}" if name else target
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.add(f"{module}.{node.name}", node, source)
                    names[node.name] = f"{module}.{node.name}"
                elif isinstance(node, ast.ClassDef):
                    names[node.name] = f"{module}.{node.name}"
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            qualified = f"{module}.{node.name}.{item.name}"
                            self.add(qualified, item, source)
                            self.methods.setdefault(item.name, []).append(qualified)
                            self.classes.setdefault(f"{module}.{node.name}", []).append(qualified)

    def add(self, qualified: str, node: ast.AST, source: str) -> None:
        self.lines[qualified], self.nodes[qualified] = code_lines(source, node), node

    def calls(self, qualified: str) -> set[str]:
        """The package functions ``qualified`` calls or names: a name through the module's imports and
        definitions (a class: its ``__init__``, ``__call__``, ``forward``), ``module.name`` through an
        imported module, ``anything.method(...)`` every method of that name of the classes the module
        defines or imports (where a reader looks for it; except dunders)."""
        module = next(m for m in sorted(self.sources, key=len, reverse=True) if qualified.startswith(m + "."))
        names, found = self.names[module], set()

        def resolve(target: str) -> None:
            if target in self.lines:
                found.add(target)
            for method in self.classes.get(target, []):
                if method.rsplit(".", 1)[1] in ("__init__", "__call__", "forward"):
                    found.add(method)

        for node in ast.walk(self.nodes[qualified]):
            if isinstance(node, ast.Name) and node.id in names:
                resolve(names[node.id])
            elif isinstance(node, ast.Attribute):
                owner = names.get(node.value.id) if isinstance(node.value, ast.Name) else None
                if owner in self.sources:  # common.autocast(...)
                    resolve(f"{owner}.{node.attr}")
                elif not node.attr.startswith("__"):  # a method of a class this module defines or imports
                    visible = {target for target in names.values() if target in self.classes}
                    found.update(m for m in self.methods.get(node.attr, []) if m.rsplit(".", 1)[0] in visible)
        found.discard(qualified)
        return found


def reading(index: Index, entries: tuple[str, ...]) -> dict[str, int]:
    """``{function: code lines}`` of every function reachable from ``entries`` through calls."""
    seen, todo = set(), list(entries)
    while todo:
        function = todo.pop()
        if function not in seen:
            seen.add(function)
            todo += index.calls(function)
    return {function: index.lines[function] for function in sorted(seen)}


@pytest.mark.parametrize("entries, budget", BUDGETS.items(), ids=[e[0] for e in BUDGETS])
def test_following_a_function_through_its_calls_meets_few_lines(entries, budget):
    met = reading(Index(core(package_sources())), entries)
    assert sum(met.values()) <= budget, f"{sum(met.values())} code lines in {len(met)} functions: {met}"


def test_the_reading_count_follows_imports_methods_and_classes():
    sources = {
        "a": (
            "from .b import helper\nfrom . import c\nfrom .c import Thing\n\n"
            "def entry(x):\n    y = helper(x)\n    c.other(y).stop()\n    return c.other(y).run()\n"
        ),
        "b": "def helper(x):\n    return x\n\ndef unused():\n    return 0\n",
        "c": (
            "class Thing:\n    def __init__(self):\n        self.x = 1\n\n    def run(self):\n        return self.x\n\n"
            "def other(y):\n    return Thing()\n"
        ),
        "d": "class Elsewhere:\n    def stop(self):\n        return None\n",  # a class `a` neither defines nor imports
    }
    met = reading(Index(sources), ("a.entry",))
    assert met == {"a.entry": 4, "b.helper": 2, "c.other": 2, "c.Thing.__init__": 2, "c.Thing.run": 2}


def test_a_long_road_is_caught():
    sources = core(package_sources())
    sources["training"] += "\n\ndef _detour():\n" + "".join(f"    x{i} = {i}\n" for i in range(200))
    sources["training"] = sources["training"].replace("    plan.start()", "    _detour()\n    plan.start()", 1)
    assert "    _detour()\n    plan.start()" in sources["training"]
    met = reading(Index(sources), ("training.train",))
    assert met["training._detour"] == 201 and sum(met.values()) > 150


def test_the_core_is_small():
    sources = core(package_sources())
    lines = {m: module_code_lines(s) for m, s in sources.items()}
    assert len(sources) <= CORE_MODULES, sorted(sources)
    assert sum(lines.values()) <= CORE_LINES, lines


def longest_functions(sources: dict[str, str], limit: int = 80) -> dict[str, int]:
    """``{"module.function": lines of code}`` for every function longer than ``limit`` (a screen)."""
    found = {}
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and code_lines(source, node) > limit:
                found[f"{module}.{node.name}"] = code_lines(source, node)
    return found


def test_every_function_fits_a_screen():
    benchmarks = {f"benchmarks/{p.stem}": p.read_text(encoding="utf-8") for p in (ROOT / "benchmarks").glob("*.py")}
    assert longest_functions(package_sources()) == {}
    assert longest_functions(benchmarks) == {}


def test_the_length_check_counts_code_not_docstrings_or_comments():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))  # 80 statements and the def line
    long = f'def f():\n    """Doc.\n\n    More doc.\n    """\n    # a comment\n\n{body}\n'
    assert longest_functions({"m": long}) == {"m.f": 81}
    assert longest_functions({"m": long.replace("    x79 = 79\n", "")}) == {}
    assert module_code_lines(f'"""Module doc."""\n\n# why\n{long}') == 81


def test_the_code_is_formatted_and_lint_clean():
    paths = ["hp_mlm", "tests", "benchmarks"]
    for command in (["format", "--check", *paths], ["check", *paths]):
        done = subprocess.run([sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"


def notebook_imports(notebook: Path) -> set[str]:
    """The hp_mlm modules a notebook's code cells import (``from hp_mlm.studies import library`` counts as
    ``studies.library``)."""
    import re

    code = "\n".join("".join(c["source"]) for c in committed_notebook(notebook)["cells"] if c["cell_type"] == "code")
    found = set(re.findall(r"from hp_mlm\.([\w.]+) import", code)) | set(
        re.findall(r"^\s*import hp_mlm\.([\w.]+)", code, re.M)
    )
    for area, names in re.findall(r"from hp_mlm\.(course|studies|ops) import ([\w, ]+)", code):
        found |= {f"{area}.{name.strip()}" for name in names.split(",")}
    return found - set(AREAS)


def test_the_architecture_page_names_what_each_notebook_imports():
    """Each row of ARCHITECTURE.md's notebook table names exactly the modules that notebook imports."""
    import re

    page = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d\d) [^|]+\|([^|]+)\|([^|]+)\|$", page, re.M)
    named = {number: set(re.findall(r"`([\w.]+)`", core_cell + areas_cell)) for number, core_cell, areas_cell in rows}
    notebooks = {p.name[:2]: notebook_imports(p) for p in committed("notebooks/0*.ipynb")}
    assert named == notebooks
