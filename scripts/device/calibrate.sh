#!/usr/bin/env bash
# The speed calibration of the current build, on the GPU machine (one H200), in one call: the
# speed kernels' own check, PyTorch's reference times at the calibration set's shapes, then
# `fp8sim calibrate`, which times every kernel of every speed plan at those shapes and stamps the
# file with the build's commit and kernel versions. Leaves under $OUT/calibrate/:
#   calibration.json        commit it as reports/h200/calibration.json
#   calibrate.txt           fp8sim calibrate's output (notes: shapes a plan does not run)
#   torch_times.json        scripts/torch_layer_time.py: SDPA (causal, default backend, masked), fused AdamW (one tensor and a model's
#                           list), eager elementwise rates, amax, the BF16 layer
#   test_speed_gpu.txt, test_optim_gpu.txt, test_gemm_gpu.txt
#                           the kernels against their CPU references (when the bundle has them)
# Six files: the device tool brings back at most eight.
# The set (fp8sim calibrate --help, docs/speed-model.md): every model of models/ at micro-batches
# 1, 2, 4 and 8 and sequence 2048, Llama-2-13B at 1 x 1024 (COAT Table 7's 2-GPU row) and
# Llama-2-7B at 1 x 4096 (long context: attention grows with the square of the sequence).
# Runs from the repository root with the bundle of scripts/package_gpu.sh in .bundle/:
#   usage: OUT=/some/dir bash scripts/device/calibrate.sh
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${FP8SIM_PYTHON:-python3}
BUNDLE=${FP8SIM_BUNDLE:-$ROOT/.bundle}
D="$OUT/calibrate"
mkdir -p "$D"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
RUN=""
[ -x "$BUNDLE/run" ] && RUN="$BUNDLE/run"
export FP8SIM_MODELS_DIR="$ROOT/models"
export FP8SIM_RECIPES_DIR="$ROOT/recipes"
export PYTHONUNBUFFERED=1
status=0
t0=$(date +%s)
stamp() { echo "[calibrate +$(( $(date +%s) - t0 ))s] $*"; }

[ -x "$BUNDLE/fp8sim" ] || { echo "no fp8sim in $BUNDLE (run scripts/package_gpu.sh first)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader || true

# 1. The kernels' own checks first: a wrong kernel must not produce a timing. The timed kernels'
#    tests whole; of gpu/optim and gpu/gemm those of the optimizers and GEMMs the plans run (the
#    exhaustive GEMM searches are scripts/device/gpu.sh's).
[ -d "$BUNDLE/tests" ] || [ ! -f "$BUNDLE/tests.tar.xz" ] || tar -C "$BUNDLE" -xJf "$BUNDLE/tests.tar.xz"
declare -A filter=([test_speed_gpu]='*' [test_optim_gpu]='AdamwGpu.Bf16*:AdamwGpu.EveryRecipeThreePhase:AdamwGpu.CoatFusedKernel'
                   [test_gemm_gpu]='GemmGpu.AwkwardShapes*:GemmGpu.Llama2Shapes:GemmGpu.ValidationRejectsWrongResults')
for t in test_speed_gpu test_optim_gpu test_gemm_gpu; do
  [ -x "$BUNDLE/tests/$t" ] || continue
  stamp "$t"
  $RUN "$BUNDLE/tests/$t" --gtest_brief=1 --gtest_filter="${filter[$t]}" > "$D/$t.txt" 2>&1 \
    || { echo "$t: FAILED (see $t.txt)"; status=1; }
  tail -n 3 "$D/$t.txt"
done

# 2. PyTorch at the set's shapes (attention is fitted from the nearest of these).
configs=()
for m in models/*.json; do
  name=$(basename "$m" .json)
  for b in 1 2 4 8; do configs+=(--config "$name:${b}x2048"); done
done
configs+=(--config llama2-13b:1x1024 --config llama2-7b:1x4096)
stamp "torch reference (${#configs[@]} arguments)"
"$PY" scripts/torch_layer_time.py "${configs[@]}" --adamw-params 268435456 --adamw-model tinyllama-1.1b --elementwise --amax --out "$D/torch_times.json" \
  || { echo "torch_layer_time.py: exit $?"; status=1; }
[ -f "$D/torch_times.json" ] || { echo "no torch_times.json: the calibration needs PyTorch's attention times"; exit 1; }

# 3. Every kernel of every plan at the set's shapes.
stamp "fp8sim calibrate"
$RUN "$BUNDLE/fp8sim" calibrate --torch-times "$D/torch_times.json" --out "$D/calibration.json" \
  > "$D/calibrate.txt" 2>&1 || { echo "fp8sim calibrate: exit $?"; status=1; }
tail -n 20 "$D/calibrate.txt"
stamp "done (status $status)"
exit $status
