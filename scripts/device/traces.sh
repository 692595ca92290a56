#!/usr/bin/env bash
# Trace capture on the GPU machine (PyTorch + h5py, no fp8sim build needed): checks that
# scripts/capture_trace.py runs on CUDA with bf16 autocast (activations then arrive as bf16 and
# are stored bit-exactly as uint16) and writes the traces under $OUT for the C++ reader to check
# on the development machine:
#   fp8sim info $OUT/traces/gpu-bf16.h5 --summary && fp8sim analyze $OUT/traces/gpu-bf16.h5
# Usage (from the repository root): OUT=/some/dir bash scripts/device/traces.sh
set -euo pipefail
OUT=${OUT:?set OUT to an output directory}
PY=${PYTHON:-python3}
mkdir -p "$OUT/traces"
"$PY" -c 'import torch, h5py; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "h5py", h5py.__version__)' \
  | tee "$OUT/traces/env.txt"
# The committed sample's model and settings, on CUDA with bf16 autocast, 120 steps.
"$PY" scripts/capture_trace.py llama --model models/tiny-llama.json --device cuda --compute-dtype bfloat16 \
  --steps 120 --capture-steps 115 --window 115:6 --window-params '^layers\.1\.|^embed_tokens|^norm' \
  --act-seqs 1 --act-seq-len 64 --eval-every 20 --out "$OUT/traces/gpu-bf16.h5" 2>&1 | tee "$OUT/traces/gpu-bf16.log"
# h5py view of one bf16 activation: stored as uint16 with dtype=bfloat16.
"$PY" - "$OUT/traces/gpu-bf16.h5" <<'PYEOF' | tee -a "$OUT/traces/env.txt"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
d = f["steps/step_000115/activation/layers.0.mlp.down_proj.input"]
print("down_proj input:", d.dtype, d.shape, d.attrs["dtype"])
PYEOF
