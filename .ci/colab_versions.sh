#!/usr/bin/env bash
# Colab's versions as a second test environment. A fresh virtual environment gets Colab's published
# packages (.ci/colab_constraints.txt), then the course as the notebooks' first cell installs it in
# Colab (`pip install` of the repository, not editable). pip's lists before and after show that the
# install changed none of Colab's packages (it stops if one changed); then a fast subset of the tests
# and notebooks 00-02 run in the smoke profile against the installed copy.
#
#   bash .ci/colab_versions.sh       # CI: this machine's python3 and its CPU torch 2.13.0 for Colab's torch
#   COLAB_PYTHON=/path/to/python3.13 COLAB_TORCH=torch==2.11.0 bash .ci/colab_versions.sh
#                                    # Colab's Python and torch: a CUDA build (about 5 GB), which runs on a CPU
set -euo pipefail
cd "$(dirname "$0")/.."
export PYDEVD_DISABLE_FILE_VALIDATION=1  # ipykernel 6.17's debugger: four lines of warning per kernel otherwise
started=$SECONDS
PYTHON=${COLAB_PYTHON:-python3}
TORCH=${COLAB_TORCH:-torch==2.13.0}
VENV=.venv-colab
PY=$VENV/bin/python
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$PY" -m pip install -q --no-compile "$TORCH" uv
# Colab's packages at its versions, and the test tools (uv: about a minute faster than pip here)
"$VENV/bin/uv" pip install -q --python "$PY" -c .ci/colab_constraints.txt \
  transformers datasets accelerate huggingface_hub tokenizers fsspec pyarrow pandas numpy matplotlib scikit-learn \
  ipywidgets ipykernel \
  pytest pytest-xdist nbval hypothesis nbconvert
"$PY" -m pip list --format=freeze >"$VENV/before.txt" 2>/dev/null
"$PY" -m pip install -q --no-compile . 2>"$VENV/install.log" || { cat "$VENV/install.log"; exit 1; }
"$PY" -m pip list --format=freeze >"$VENV/after.txt" 2>/dev/null
echo "colab versions: environment built in $((SECONDS - started)) s"
"$PY" - "$VENV/before.txt" "$VENV/after.txt" <<'EOF'
"""Colab's packages in pip's list before and after the course's install; exit 1 if one changed."""
import re
import sys


def listed(path):
    pairs = (line.strip().split("==", 1) for line in open(path, encoding="utf-8") if "==" in line)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pairs}


before, after = listed(sys.argv[1]), listed(sys.argv[2])
colab = ["torch", "transformers", "datasets", "accelerate", "huggingface-hub", "pyarrow", "ipywidgets",
         "pandas", "numpy", "matplotlib", "scikit-learn", "ipykernel", "tokenizers", "safetensors", "fsspec"]
print(f"{'package':<16} {'before':<14} after the course's install")
for name in colab:
    print(f"{name:<16} {before.get(name, '-'):<14} {after.get(name, '-')}")
others = sorted(f"{n} {before.get(n, '-')} -> {after.get(n, '-')}" for n in before.keys() | after.keys()
                if n not in colab and before.get(n) != after.get(n))
print("every other change in pip's list:", ", ".join(others) or "none")
changed = [n for n in colab if before.get(n) != after.get(n)]
if changed:
    sys.exit(f"error: the course's install changed Colab's {', '.join(changed)}: widen pyproject.toml's bounds")
EOF
"$PY" -m ipykernel install --sys-prefix --name python3 >/dev/null
# The installed copy, not the checkout: the tests and kernels import hp_mlm from site-packages
# (pytest's own script, not `python -m pytest`, which would put the checkout first on sys.path).
(cd /tmp && "$OLDPWD/$PY" -c "import sys, hp_mlm; print('python', sys.version.split()[0], '- hp_mlm from', hp_mlm.__file__)")
export MPLBACKEND=Agg HP_MLM_PROFILE=smoke
# The subset (README, "Testing"): the version bounds; every way rows load (local files, a Hub id
# through the Hub or the cache; the five whole commands run from the cache are left out, 80 s); one
# training run with its checkpoints; notebooks 00-02.
"$VENV/bin/pytest" -q -n auto --dist loadfile --nbval-lax --nbval-current-env \
  -k "not (default_train_command or predict_by_hub_id or evaluate_by_hub_ids or fixture_cache_is_what)" \
  tests/test_versions.py tests/test_data.py tests/test_hub_paths.py \
  tests/test_training.py::test_training_lowers_the_loss_and_checkpoints_atomically \
  notebooks/00_setup.ipynb notebooks/01_tokenising.ipynb notebooks/02_masking.ipynb
echo "colab versions: $((SECONDS - started)) s in all"
