#!/usr/bin/env bash
# The Python package's tests as CI runs them (ctest's `python` test, FP8SIM_PYTHON_TESTS=ON in the
# ci preset): a fresh virtual environment, a clean `pip install ".[test]"` of this tree (pip
# fetches scikit-build-core, nanobind, numpy, ml_dtypes and pytest from PyPI), then pytest, which
# compares every result with the command line CLI (a CMake build's fp8sim). With
# FP8SIM_WITH_TORCH=1 (.ci/run sets it) the venv also gets PyTorch, transformers and h5py
# (scripts/install_torch.sh) for the trace recorder's tests, which skip without them.
# Usage: scripts/test_python.sh VENV_DIR CLI
set -euo pipefail
venv=$(realpath -m "${1:?usage: scripts/test_python.sh VENV_DIR CLI}")
cli=$(realpath "${2:?usage: scripts/test_python.sh VENV_DIR CLI}")
cd "$(dirname "$0")/.."
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
# Two build jobs at most (the CI machine has two cores); a build folder of its own, inside the venv.
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$venv/bin/python" -m pip install -q \
  --config-settings=build-dir="$venv/build" ".[test]"
if [ "${FP8SIM_WITH_TORCH:-0}" = 1 ]; then
  bash scripts/install_torch.sh "$venv/bin/python"
fi
# Run from outside the tree so that `import fp8sim` is the installed package, not python/fp8sim.
tests=$PWD/python/tests
cd "$venv"
FP8SIM_CLI=$cli "$venv/bin/python" -m pytest -q -p no:cacheprovider "$tests"
