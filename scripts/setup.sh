#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian/Ubuntu machine for fp8sim:
#  - Debian packages: compiler, CMake, Ninja, HDF5 (C++), Boost.Program_options, fmt, Eigen,
#    nlohmann-json, GoogleTest, Google Benchmark, zlib, Python venv support, Chromium (the report's HTML check),
#    clang-format 14 (the layout check), Open MPI (mpirun runs of analyze and report: docs/scale-out.md);
#  - a project-owned Python virtual environment at .venv with numpy, ml_dtypes, h5py, matplotlib
#    (golden vectors, benchmarks' peers, plots).
# CUDA is not installed here: when the machine already has nvcc, the build adds the GPU kernels.
# PyTorch (CPU; with transformers and h5py: the trace recorder and scripts/capture_trace.py) goes
# into .venv only with --with-torch (or FP8SIM_WITH_TORCH=1): the test command's set-up
# (scripts/install_torch.sh, ~3.6 GB).
#   usage: bash scripts/setup.sh [--with-torch]
# The Python package's test (ctest `python`, ci preset) makes its own venv and fetches its build
# and test packages from PyPI (scripts/test_python.sh), and sees this .venv's PyTorch;
# it needs python3-venv from here.
# Safe to run again: it installs only what is missing. Needs root (or sudo) for apt.
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  case "$a" in
    --with-torch) FP8SIM_WITH_TORCH=1 ;;
    *) echo "setup.sh: unknown argument '$a' (usage: bash scripts/setup.sh [--with-torch])" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(build-essential cmake ninja-build pkg-config libhdf5-dev hdf5-tools libboost-program-options-dev
  libfmt-dev libeigen3-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev zlib1g-dev python3 python3-venv python3-pip chromium clang-format-14
  libopenmpi-dev openmpi-bin)
PY_PACKAGES=(numpy ml_dtypes h5py matplotlib)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages already present"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import numpy, ml_dtypes, h5py, matplotlib" 2>/dev/null; then
  echo "setup: installing Python packages into .venv: ${PY_PACKAGES[*]}"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q "${PY_PACKAGES[@]}"
else
  echo "setup: .venv already has ${PY_PACKAGES[*]}"
fi
if [ "${FP8SIM_WITH_TORCH:-0}" = 1 ]; then
  bash scripts/install_torch.sh .venv/bin/python
fi
if command -v nvcc >/dev/null 2>&1; then
  echo "setup: nvcc found ($(nvcc --version | tail -1)): the build includes the CUDA kernels (sm_90a)"
else
  echo "setup: no nvcc: CPU-only build (every reference test still runs)"
fi
