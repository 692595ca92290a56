#!/usr/bin/env bash
# Installs the PyTorch that the trace recorder's tests use (CPU only) into the virtual environment
# of PYTHON, from PyPI: torch, transformers (a real Hugging Face model built from a config, no
# download) and h5py. PyPI's Linux torch wheel is built for CUDA and depends on ~3 GB of CUDA
# packages; torch imports on a CPU machine as long as the libraries its shared objects link
# against are present, so this installs torch without its dependencies, plus only those CUDA
# libraries and torch's pure-Python dependencies: 3.6 GB instead of 4.9 GB (no triton, cuSOLVER,
# NVRTC, NVTX, cuda-bindings, which torch loads only on first use on a GPU). If that torch does
# not import, it falls back to the ordinary `pip install torch`.
# Usage: scripts/install_torch.sh PYTHON     (a venv's python)
set -euo pipefail
py=${1:?usage: scripts/install_torch.sh PYTHON}
TORCH=2.11.0
# The NEEDED entries of torch 2.11.0's lib/*.so (readelf -d), pinned to torch's own requirements.
CUDA_LIBS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 nvidia-cublas==13.1.0.3 nvidia-cufft==12.0.0.61
  nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink==13.0.88
  nvidia-cudnn-cu13==9.19.0.56 nvidia-cusparselt-cu13==0.8.0 nvidia-nccl-cu13==2.28.9 nvidia-nvshmem-cu13==3.4.5)
PURE=(filelock "typing-extensions>=4.10.0" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" numpy)
if "$py" -c "import torch, transformers, h5py" 2>/dev/null; then
  echo "install_torch: $("$py" -c 'import torch; print("torch", torch.__version__)') already there"
  exit 0
fi
start=$(date +%s)
"$py" -m pip install -q --no-deps "torch==$TORCH" "${CUDA_LIBS[@]}"
"$py" -m pip install -q "${PURE[@]}"
if ! "$py" -c "import torch; torch.nn.Linear(2, 2)(torch.ones(1, 2))" 2>/dev/null; then
  echo "install_torch: torch without its CUDA extras does not import; installing torch with all dependencies"
  "$py" -m pip install -q "torch==$TORCH"
fi
"$py" -m pip install -q h5py "transformers==5.24.0"
site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "install_torch: torch $TORCH + transformers + h5py in $(( $(date +%s) - start )) s, $(du -sh "$site" | cut -f1) in $site"
