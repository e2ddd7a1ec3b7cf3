"""The versions the course runs with: the check at ``import hp_mlm``, and the requirement lists.

``hp_mlm.ops.versions.check_versions`` compares the versions *in memory* (``sys.modules``) with the installed
ones: in Colab, transformers 4 may be imported before the install cell puts 5 on disk, and only a
restart loads the new files. The requirement lists (requirements.txt, pyproject.toml, and
environment.yml through requirements.txt) bound every runtime requirement from above, agree with
each other, and all install ipywidgets (without it tqdm prints "IProgress not found" in notebooks).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hp_mlm.ops import versions

ROOT = Path(__file__).resolve().parents[1]
#: Lines of requirements.txt that are tools for tests and local Jupyter, not what the package needs.
TOOLS = {
    "pytest",
    "pytest-xdist",
    "nbval",
    "hypothesis",
    "ipykernel",
    "nbconvert",
    "jupyterlab",
    "ruff",
    "minicons",
    "build",
    "twine",
    "setuptools",
}  # minicons: a test checks our scores against it; build, twine, setuptools: the wheel's test builds and checks it
#: Runtime requirements that requirements.txt may narrow (never widen): local JupyterLab 4 renders
#: ipywidgets 8 only, while the package admits the ipywidgets 7 that Colab ships.
NARROWER_IN_REQUIREMENTS = {"ipywidgets"}
UPPER = {"<", "<=", "==", "~=", "==="}


def fake_module(name: str, version: str | None) -> types.ModuleType:
    module = types.ModuleType(name)
    if version is not None:
        module.__version__ = version
    return module


def installed(**versions: str):
    """A ``version_of`` that reports these versions, and the real installed ones otherwise."""

    def version_of(package: str) -> str:
        if package in versions:
            if versions[package] is None:
                raise metadata.PackageNotFoundError(package)
            return versions[package]
        return metadata.version(package)

    return version_of


# --- the check at import: the version in memory, not only the one on disk ------------------------


def test_the_installed_environment_passes():
    versions.check_versions()
    versions.check_versions(modules={})
    import transformers  # the real one, now in sys.modules

    versions.check_versions()
    assert transformers.__version__ == metadata.version("transformers")


def test_a_stale_transformers_in_sys_modules_says_restart(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", fake_module("transformers", "4.46.0"))
    with pytest.raises(ImportError) as caught:
        versions.check_versions()
    message = str(caught.value)
    assert "transformers 4.46.0" in message and "transformers>=5,<6" in message
    assert f"installed: {metadata.version('transformers')}" in message
    assert "Runtime > Restart session" in message and "from the top" in message
    assert "pip install" not in message  # the files are right; only a restart helps


def test_a_stale_module_is_found_in_a_given_mapping_too():
    modules = {"datasets": fake_module("datasets", "4.0.0"), "tokenizers": fake_module("tokenizers", "0.20.3")}
    with pytest.raises(ImportError, match=r"datasets 4\.0\.0 .*tokenizers 0\.20\.3 .*Restart the runtime"):
        versions.check_versions(modules, version_of=installed(datasets="5.2.0", tokenizers="0.22.2"))


def test_a_module_in_memory_other_than_the_installed_one_in_range_is_stale_too():
    modules = {"transformers": fake_module("transformers", "5.0.0")}
    with pytest.raises(ImportError, match="Restart the runtime"):
        versions.check_versions(modules, version_of=installed(transformers="5.24.0"))
    versions.check_versions(modules, version_of=installed(transformers="5.0"))  # the same version, spelled otherwise


def test_modules_without_a_version_or_without_metadata_are_left_alone():
    versions.check_versions(
        {"transformers": fake_module("transformers", None), "pyarrow": fake_module("pyarrow", "1.0")},
        version_of=installed(pyarrow=None),
    )


@pytest.mark.parametrize("found", ["4.46.0", "6.0.0"])
def test_an_installed_version_out_of_bounds_keeps_the_pip_message(found):
    with pytest.raises(
        ImportError,
        match=rf"transformers {re.escape(found)} is installed; upgrade with: pip install -U 'transformers>=5,<6'",
    ):
        versions.check_versions({}, version_of=installed(transformers=found))


def test_a_missing_package_says_install():
    with pytest.raises(ImportError, match=r"needs datasets>=4,<6; install it with: pip install -r requirements.txt"):
        versions.check_versions({}, version_of=installed(datasets=None))


def run_python(code: str, **env: str | None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in env}
    environ.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd=ROOT)


def test_importing_hp_mlm_after_a_stale_import_stops_with_the_restart_message():
    code = "import sys, types\nm = types.ModuleType('transformers'); m.__version__ = '4.46.0'\nsys.modules['transformers'] = m\nimport hp_mlm"
    result = run_python(code)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "Runtime > Restart session" in result.stderr


def test_the_check_imports_none_of_the_packages_it_checks():
    code = "import sys, hp_mlm\nfrom hp_mlm.ops import versions\nprint(sorted(set(versions.UPGRADED_BY_THE_INSTALL + ('torch',)) & set(sys.modules)))"
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("value, expected", [(None, "false"), ("true", "true"), ("false", "false")])
def test_tokenizers_parallelism_defaults_to_false_and_a_users_value_wins(value, expected):
    result = run_python("import os, hp_mlm\nprint(os.environ['TOKENIZERS_PARALLELISM'])", TOKENIZERS_PARALLELISM=value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


# --- the requirement lists -------------------------------------------------------------------------


def pyproject_dependencies() -> list[Requirement]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib

        listed = tomllib.loads(text)["project"]["dependencies"]
    except ModuleNotFoundError:  # Python 3.10: the array is a Python list literal
        listed = ast.literal_eval(re.search(r"^dependencies = (\[.*?^\])", text, re.MULTILINE | re.DOTALL).group(1))
    return [Requirement(line) for line in listed]


def requirement_lines(path: Path) -> list[Requirement]:
    """The requirements of a pip requirements file, following ``-r`` (editable installs skipped)."""
    found = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or line.startswith(("-e", "--editable")):
            continue
        if line.startswith(("-r ", "--requirement ")):
            found += requirement_lines(path.parent / line.split(maxsplit=1)[1])
            continue
        found.append(Requirement(line))
    return found


def environment_requirements() -> list[Requirement]:
    import yaml

    env = yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))
    found = []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            for line in entry.get("pip", []):
                if line.startswith(("-r ", "--requirement ")):
                    found += requirement_lines(ROOT / line.split(maxsplit=1)[1])
                elif not line.startswith("-"):
                    found.append(Requirement(line))
        else:
            found.append(Requirement(re.sub(r"^([\w.-]+)=(?!=)", r"\1==", entry)))  # conda's name=1.2
    return found


def name(requirement: Requirement) -> str:
    return re.sub(r"[-_.]+", "-", requirement.name).lower()


def runtime_in_requirements_txt() -> dict[str, Requirement]:
    return {name(r): r for r in requirement_lines(ROOT / "requirements.txt") if name(r) not in TOOLS}


def has_upper_bound(specifier: SpecifierSet) -> bool:
    return any(spec.operator in UPPER for spec in specifier)


def test_every_runtime_requirement_has_an_upper_bound():
    listed = pyproject_dependencies() + list(runtime_in_requirements_txt().values())
    missing = sorted({str(r) for r in listed if not has_upper_bound(r.specifier)})
    assert not missing, f"give these an upper bound (the next major version): {missing}"


def test_an_unbounded_requirement_is_caught():
    assert not has_upper_bound(Requirement("torch>=2.2").specifier)
    assert not has_upper_bound(Requirement("pandas!=2.1.0,>=2").specifier)
    assert has_upper_bound(Requirement("torch>=2.2,<3").specifier)


def subset(narrow: SpecifierSet, wide: SpecifierSet) -> bool:
    """Whether every version ``narrow`` admits is admitted by ``wide``, probed at every bound."""
    probes = set()
    for spec in (*narrow, *wide):
        v = Version(spec.version.replace(".*", ""))
        major, minor, micro = (*v.release, 0, 0)[:3]
        probes |= {
            str(v),
            f"{major}.{minor}.{micro + 1}",
            f"{major + 1}.0.0",
            f"{max(major - 1, 0)}.99.0",
            f"{major}.{minor + 1}.0",
        }
    return all(wide.contains(p, prereleases=True) for p in probes if narrow.contains(p, prereleases=True))


def test_requirements_txt_and_pyproject_list_the_same_runtime_requirements():
    package = {name(r): r for r in pyproject_dependencies()}
    pinned = runtime_in_requirements_txt()
    assert sorted(pinned) == sorted(package), (
        "requirements.txt and pyproject.toml's dependencies list different packages"
    )
    for key, requirement in package.items():
        if key in NARROWER_IN_REQUIREMENTS:
            assert subset(pinned[key].specifier, requirement.specifier), (
                f"requirements.txt admits a {key} that pip install . refuses"
            )
        else:
            assert pinned[key].specifier == requirement.specifier, (
                f"{pinned[key]} in requirements.txt, {requirement} in pyproject.toml"
            )


def test_the_subset_probe_catches_a_wider_range():
    assert subset(SpecifierSet(">=8,<9"), SpecifierSet(">=7.6,<9"))
    assert not subset(SpecifierSet(">=8,<10"), SpecifierSet(">=7.6,<9"))
    assert not subset(SpecifierSet(">=7,<9"), SpecifierSet(">=7.6,<9"))


def test_the_bounds_admit_the_installed_versions():
    """pyproject's bounds, what ``pip install .`` (and Colab's install cell) enforces; requirements.txt
    may narrow a runtime package for local Jupyter (ipywidgets 8), which a Colab runtime need not have."""
    for requirement in pyproject_dependencies():
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{requirement} refuses the installed {version}"
        )


#: Colab's published versions, the second environment CI tests (``.ci/colab_versions.sh``).
COLAB_CONSTRAINTS = ROOT / ".ci" / "colab_constraints.txt"
#: Packages whose Colab versions the course's install must leave alone, all pinned in the file (torch
#: is not: the script installs this machine's CPU build in its place).
LEFT_ALONE = {"transformers", "datasets", "pyarrow", "huggingface-hub", "accelerate", "ipywidgets"}


def colab_pins() -> dict[str, str]:
    """``{package: version}`` of the constraints file; every line pins one version (``==``)."""
    pins = {}
    for requirement in requirement_lines(COLAB_CONSTRAINTS):
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{requirement}: the constraints file pins versions (==)"
        pins[name(requirement)] = spec.version
    return pins


def test_the_bounds_admit_colabs_published_versions():
    package = {name(r): r for r in pyproject_dependencies()}
    pins = colab_pins()
    assert LEFT_ALONE <= set(pins) & set(package), "the constraints file lost one of Colab's packages"
    refused = [
        f"{package[k]} refuses {v}" for k, v in pins.items() if k in package and not package[k].specifier.contains(v)
    ]
    assert not refused, f"pip install . would replace Colab's versions: {refused}"


def test_the_import_check_accepts_colabs_published_versions():
    pins = colab_pins()
    versions.check_versions({}, version_of=pins.__getitem__)  # transformers 5.15.0, datasets 4.0.0
    with pytest.raises(ImportError, match=r"datasets 3\.6\.0 is installed"):
        versions.check_versions({}, version_of={**pins, "datasets": "3.6.0"}.__getitem__)


def test_the_import_check_uses_the_bounds_of_pyproject():
    package = {name(r): r for r in pyproject_dependencies()}
    for key, (low, high) in versions.REQUIRED.items():
        spec = package[key].specifier
        assert spec.contains(f"{low}.0.0") and not spec.contains(f"{low - 1}.99.0"), (
            f"{key}: versions.REQUIRED says >={low}, pyproject {spec}"
        )
        assert not spec.contains(f"{high}.0.0") and spec.contains(f"{high - 1}.99.0"), (
            f"{key}: versions.REQUIRED says <{high}, pyproject {spec}"
        )


@pytest.mark.parametrize(
    "route, requirements",
    [
        ("pyproject.toml dependencies (pip install ., and Colab's pip install git+...)", pyproject_dependencies),
        ("requirements.txt", lambda: requirement_lines(ROOT / "requirements.txt")),
        ("environment.yml", environment_requirements),
    ],
)
def test_every_install_route_installs_ipywidgets(route, requirements):
    assert "ipywidgets" in {name(r) for r in requirements()}, f"{route} does not install ipywidgets"


def test_colab_installs_the_package_with_its_dependencies():
    """The notebooks' first cell installs ``git+REPO_URL``: pyproject's dependencies, ipywidgets among them."""

    from helpers import committed, committed_notebook

    for path in committed("notebooks/*.ipynb"):
        cells = [c for c in committed_notebook(path)["cells"] if c["cell_type"] == "code"]
        first = "".join(cells[0]["source"])
        assert "git+{REPO_URL}" in first, f"{path.name}: the first cell no longer installs the package from REPO_URL"
        assert "--no-deps" not in first, f"{path.name}: --no-deps would skip the package's dependencies"
