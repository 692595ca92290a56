#!/usr/bin/env bash
# The Python package's tests as CI runs them (ctest's `python` test, FP8SIM_PYTHON_TESTS=ON in the
# ci preset): a fresh virtual environment, a clean `pip install ".[test]"` of this tree (pip
# fetches scikit-build-core, nanobind, numpy, ml_dtypes and pytest from PyPI), then pytest, which
# compares every result with the command line CLI (a CMake build's fp8sim). With
# FP8SIM_WITH_TORCH=1 (the ci test preset sets it) the venv also sees PyTorch, transformers and h5py
# (the project .venv's, or scripts/install_torch.sh) for the trace recorder's tests, which skip
# without them.
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
  # The project's .venv already holds PyTorch after `scripts/setup.sh --with-torch`: its
  # site-packages join this venv's path behind the venv's own (a .pth file), which saves a second
  # 3.6 GB install; the package under test is still this venv's clean install.
  proj_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2>/dev/null || true)
  if [ -n "$proj_site" ] && .venv/bin/python -c "import torch, transformers, h5py" 2>/dev/null; then
    echo "$proj_site" > "$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/fp8sim-project-venv.pth"
  else
    bash scripts/install_torch.sh "$venv/bin/python"
  fi
fi
# Run from outside the tree so that `import fp8sim` is the installed package, not python/fp8sim.
tests=$PWD/python/tests
cd "$venv"
FP8SIM_CLI=$cli "$venv/bin/python" -m pytest -q -p no:cacheprovider "$tests"
