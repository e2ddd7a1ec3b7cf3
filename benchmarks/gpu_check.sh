#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): the full profile at bert-base size on CUDA, auto and
# fp16, through an offline Hub cache; under 10 minutes on one GPU. Without CUDA: exit 2 at once.
set -euo pipefail
cd "$(dirname "$0")/.."
# PYTHON: the interpreter to run it with (the tests pass their own); else `python` from PATH (an activated venv)
exec "${PYTHON:-python}" benchmarks/gpu_check.py "$@"
