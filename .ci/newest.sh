#!/usr/bin/env bash
# The newest releases as a test environment (CI's weekly leg, .github/workflows/ci.yml): a fresh virtual
# environment gets the newest torch, transformers, datasets, accelerate and huggingface_hub that the package
# index has, and the rest of requirements.txt; a table says, for each, the newest release, the one installed
# and whether the course's bounds (pyproject.toml) admit the newest; then the README's test command runs in
# the smoke profile (tests/test_site.py left out: the site's browser test tests no library). It exits 1 when a
# test fails or when a newest release lies outside the course's bounds (a room's Colab may soon ship it).
#
#   bash .ci/newest.sh                                   # the README's test command
#   bash .ci/newest.sh tests/test_data.py notebooks/00_setup.ipynb   # only these tests and notebooks
#   NEWEST_TORCH_INDEX= bash .ci/newest.sh               # torch from the package index as it is (a CUDA build
#                                                        # of several GB on Linux, which runs on a CPU too)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYDEVD_DISABLE_FILE_VALIDATION=1
started=$SECONDS
VENV=.venv-newest
PY=$VENV/bin/python
TORCH_INDEX=${NEWEST_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
NEWEST=(torch transformers datasets accelerate huggingface_hub)
rm -rf "$VENV"
python3 -m venv "$VENV"
"$PY" -m pip install -q -U pip
# torch first, the CPU build where TORCH_INDEX names one: a bare `torch` would pull a CUDA build
"$PY" -m pip install -q -U torch ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
# the newest of each within reach of the course's own bounds (what a fresh install in a room gets); the
# torch just installed is kept (an eager upgrade could trade the CPU build for the index's CUDA one)
"$PY" -c "from importlib.metadata import version; print('torch==' + version('torch'))" >"$VENV/torch.txt"
"$PY" -m pip install -q -U --upgrade-strategy eager -c "$VENV/torch.txt" -r requirements.txt "${NEWEST[@]:1}"
echo "newest releases: environment built in $((SECONDS - started)) s"
for name in "${NEWEST[@]}"; do
    index=()
    if [ "$name" = torch ] && [ -n "$TORCH_INDEX" ]; then index=(--index-url "$TORCH_INDEX"); fi
    echo "$name $("$PY" -m pip index versions "$name" "${index[@]}" 2>/dev/null | sed -n 's/.*(\(.*\))$/\1/p' | head -1)"
done >"$VENV/newest.txt"
bounds=0
"$PY" - "$VENV/newest.txt" <<'PYEOF' || bounds=1
"""For each package: the newest release, the installed one, and whether pyproject.toml's bounds admit the newest."""
import sys
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.version import Version

with open("pyproject.toml", "rb") as f:
    bounds = {Requirement(r).name.replace("-", "_"): Requirement(r).specifier for r in tomllib.load(f)["project"]["dependencies"]}
outside = []
print(f"{'package':<16} {'newest':<12} {'installed':<14} the course's bounds")
for line in open(sys.argv[1], encoding="utf-8"):
    name, _, newest = line.strip().partition(" ")
    spec = bounds[name.replace("-", "_")]
    admitted = bool(newest) and spec.contains(Version(newest).public.split("+")[0])
    print(f"{name:<16} {newest or '?':<12} {version(name):<14} {spec}: {'admit it' if admitted else 'DO NOT admit it'}")
    if newest and not admitted:
        outside.append(f"{name} {newest}")
if outside:
    sys.exit(f"error: the newest {', '.join(outside)} lie outside pyproject.toml's bounds: test it, then widen them")
PYEOF
"$PY" -m ipykernel install --sys-prefix --name python3 >/dev/null
export MPLBACKEND=Agg HP_MLM_PROFILE=smoke
set +e
if [ "$#" -eq 0 ]; then set -- --ignore=tests/test_site.py; fi
"$PY" -m pytest -n auto --dist loadfile --nbval-lax --nbval-current-env -q "$@"
tests=$?
set -e
echo "newest releases: $((SECONDS - started)) s in all"
if [ "$tests" -ne 0 ]; then exit "$tests"; fi
exit "$bounds"
