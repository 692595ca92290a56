#!/usr/bin/env bash
# Measures the GPU memory of a real BF16 AdamW training step (OLMo-1B shapes, 1.18 B params,
# micro-batch 4 x 2048) with PyTorch on the GPU machine and leaves
#   $OUT/memory/memory_measured.json   (scripts/measure_memory.py's measurement)
#   $OUT/memory/memory_validate.txt    (fp8sim memory --validate on it, when the bundle has fp8sim)
#   $OUT/memory/memory_validate.json
# Runs from the repository root as scripts/device/run_all.sh calls it; takes < 1 minute on an H200.
# The lead commits the measurement as reports/h200/memory_measured.json and the comparison beside it.
#   usage: OUT=/some/dir bash scripts/device/memory.sh
set -euo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${FP8SIM_PYTHON:-python3}
mkdir -p "$OUT/memory"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
start=$(date +%s)
"$PY" scripts/measure_memory.py --model olmo-1b --batch 4 --seq 2048 --out "$OUT/memory/memory_measured.json"
echo "measure_memory: $(( $(date +%s) - start ))s"
BUNDLE=${FP8SIM_BUNDLE:-$ROOT/.bundle}
if [ -x "$BUNDLE/fp8sim" ]; then
  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FP8SIM_MODELS_DIR="$ROOT/models"
  export FP8SIM_RECIPES_DIR="$ROOT/recipes"
  # A miss (> 10%) exits 1 but the table is still written: keep both.
  "$BUNDLE/fp8sim" memory --validate "$OUT/memory/memory_measured.json" --json "$OUT/memory/memory_validate.json" \
    > "$OUT/memory/memory_validate.txt" 2>&1 || echo "fp8sim memory --validate: exit $?" >> "$OUT/memory/memory_validate.txt"
  cat "$OUT/memory/memory_validate.txt"
else
  echo "no fp8sim in $BUNDLE: run 'fp8sim memory --validate memory_measured.json' on the development machine"
fi
