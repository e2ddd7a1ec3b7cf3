"""The version guard: stop at import, in one line, when this Python session cannot run the course.

Operations, not a step of the course: ``hp_mlm/__init__.py`` calls :func:`check_versions` before any
step module is imported, and ``doctor`` reports the same facts instead of stopping on them.
Standard library only (importing it imports none of the packages it checks); a refusal at the
command line reads its help entry from ``ops.troubleshooting``. It also gives the course's own version
(:func:`course_version`, ``hp_mlm.__version__``), whose one source is ``pyproject.toml``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

#: Major versions the course runs with, as ``(lowest, first one excluded)``: transformers' API changed
#: in 5.x; datasets 4.x (Colab's) and 5.x both load the Hub, the cache and local files as the course
#: needs. The same bounds as in pyproject.toml and requirements.txt (tests/test_versions.py).
REQUIRED = {"transformers": (5, 6), "datasets": (4, 6)}

#: Packages that the course's install (``pip install git+...`` in Colab) may upgrade under a Python
#: session that has already imported them. A module in memory whose version differs from the files
#: on disk mixes old and new code, and fails later with ``cannot import name ...``. torch is not
#: here: the course's bounds admit Colab's torch (and Colab's version of each package below, so the
#: install changes none of them there; tests/test_versions.py reads .ci/colab_constraints.txt).
UPGRADED_BY_THE_INSTALL = (
    "transformers",
    "datasets",
    "tokenizers",
    "huggingface_hub",
    "safetensors",
    "accelerate",
    "pyarrow",
)

#: The course's own ``pyproject.toml`` where the package runs from a source checkout (absent in an installed wheel).
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

RESTART = "Restart the runtime (in Colab: Runtime > Restart session) and run this notebook from the top"


def course_version(pyproject: Path = PYPROJECT) -> str:
    """The course's version (``hp_mlm.__version__``), a release number such as ``"0.2.0"``.

    In a source checkout, the ``version`` line of its ``pyproject.toml``: the checkout's own number even
    where an older install of the course left its metadata behind (an editable install keeps the number
    it was installed with). Else the installed distribution's metadata (``importlib.metadata``), which
    a wheel or ``pip install git+...`` writes from the same line; ``"unknown"`` where neither is there.
    """
    found = re.search(r'^version = "([^"]+)"', _checkout(pyproject), re.MULTILINE)
    if found:
        return found.group(1)
    try:
        return metadata.version("hp-mlm")
    except metadata.PackageNotFoundError:
        return "unknown"


def course_source(pyproject: Path = PYPROJECT) -> str:
    """Where the running ``hp_mlm`` comes from, in words: a source checkout (its folder) or an installed
    release (the folder it was installed into), for ``doctor``'s screen."""
    package = Path(__file__).resolve().parents[1]
    if _checkout(pyproject):
        return f"a source checkout, {pyproject.parent}"
    return f"an installed release, {package.parent}"


def _checkout(pyproject: Path) -> str:
    """The text of ``pyproject`` where it is the course's own (a source checkout), else ``""``."""
    text = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    return text if re.search(r'^name = "hp-mlm"', text, re.MULTILINE) else ""


def _major(version: str) -> int:
    match = re.match(r"\s*v?(\d+)", str(version))
    return int(match.group(1)) if match else -1


def _same_version(a: str, b: str) -> bool:
    if str(a) == str(b):
        return True
    try:  # "5.0" and "5.0.0" are one version; packaging comes with transformers
        from packaging.version import InvalidVersion, Version

        return Version(str(a)) == Version(str(b))
    except (ImportError, InvalidVersion):
        return False


def _installed(package: str, version_of: Callable[[str], str]) -> str | None:
    try:
        return version_of(package)
    except metadata.PackageNotFoundError:
        return None


def check_versions(
    modules: Mapping[str, object] | None = None,
    version_of: Callable[[str], str] = metadata.version,
) -> None:
    """Stop with one clear ``ImportError`` when this Python session cannot run the course.

    Two cases. The *installed* transformers or datasets (``version_of``, the files on disk) is
    missing or outside :data:`REQUIRED`: install or upgrade it. Or a package that is *already
    imported* (``modules``, by default ``sys.modules``) is not the installed version, or is outside
    :data:`REQUIRED`: in Colab, transformers 4 was imported before the install cell put 5 on disk;
    only a restart of the runtime loads the new files. A package not imported yet is not imported
    here (that would be slow): it will be imported from the files on disk, whose version is checked.
    """
    modules = sys.modules if modules is None else modules
    for package, (low, high) in REQUIRED.items():
        wanted = f"{package}>={low},<{high}"
        found = _installed(package, version_of)
        loaded = getattr(modules.get(package), "__version__", None)
        if found is None and (loaded is None or not low <= _major(loaded) < high):
            raise ImportError(f"hp_mlm needs {wanted}; install it with: pip install -r requirements.txt")
        if found is not None and not low <= _major(found) < high:
            raise ImportError(
                f"hp_mlm needs {wanted}, but {package} {found} is installed; "
                f"upgrade with: pip install -U '{wanted}' (then restart the runtime)"
            )
    stale = []
    for package in UPGRADED_BY_THE_INSTALL:
        loaded = getattr(modules.get(package), "__version__", None)
        found = None if loaded is None else _installed(package, version_of)
        if found is None or _same_version(loaded, found):
            continue
        needs = (
            f"the course needs {package}>={REQUIRED[package][0]},<{REQUIRED[package][1]}; "
            if package in REQUIRED
            else ""
        )
        stale.append(f"{package} {loaded} ({needs}installed: {found})")
    if stale:
        raise ImportError(
            f"hp_mlm cannot run in this Python session: its memory holds {', '.join(stale)}, imported "
            f"before the files on disk changed, and the version in memory is the one that runs. {RESTART}."
        )


def guard_at_import() -> None:
    """``hp_mlm/__init__.py``'s check: :func:`check_versions`, except for ``doctor`` at the command line
    (it reports a wrong version instead of stopping on it). At the command line (``python -m hp_mlm``,
    also under ``accelerate launch`` or ``torchrun``, or ``hp-mlm``) a refusal is the command line's one
    ``error:`` line with its help entry and exit status 2: its own handler is not running yet.

    Raises:
        ImportError: outside the command line (a notebook, a script), as :func:`check_versions`.
        SystemExit: status 2, at the command line, after the one line on stderr.
    """
    command_line = os.path.basename(sys.argv[0]) in ("-m", "hp-mlm", "__main__.py")
    if command_line and sys.argv[1:2] == ["doctor"]:
        return
    try:
        check_versions()
    except ImportError as error:
        if not command_line:
            raise
        from hp_mlm.ops.troubleshooting import pointer

        print(f"error: {error}{pointer(error)}", file=sys.stderr)
        raise SystemExit(2) from None
