#!/usr/bin/env bash
# Step-time replay on the GPU machine (one H200): PyTorch reference times, then `fp8sim speed`
# timing every kernel of the Llama-2-7B / 13B (and LLaMA-30B, Table 7) layers on the device.
# Leaves under $OUT/speed/:
#   torch_times.json          scripts/torch_layer_time.py: BF16 layer fwd+bwd, SDPA, fused AdamW, amax
#   speed_llama2-7b.{json,md,txt}   Table 7's 4-GPU row: bf16=2, te=2, coat=4, with all Table 7 rows,
#                                   Figure 4(b) and the PyTorch validation
#   speed_llama2-13b.{json,md,txt}  Table 7's 4-GPU row: bf16=1, te=1, coat=2
#   speed.json, speed.md      what the lead commits as reports/h200/speed.{json,md}
#   test_speed_gpu.xml        the speed kernels against their CPU references (when the bundle has it)
# Runs from the repository root (scripts/device/run_all.sh calls it with a 180 s limit); about
# 1 minute on an H200.
#   usage: OUT=/some/dir bash scripts/device/speed.sh
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${FP8SIM_PYTHON:-python3}
BUNDLE=${FP8SIM_BUNDLE:-$ROOT/.bundle}
D="$OUT/speed"
mkdir -p "$D"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The bundle's `run` adds the host's cuBLASLt directory to the loader path when it is not found.
RUN=""
[ -x "$BUNDLE/run" ] && RUN="$BUNDLE/run"
export FP8SIM_MODELS_DIR="$ROOT/models"
export FP8SIM_RECIPES_DIR="$ROOT/recipes"
export PYTHONUNBUFFERED=1
status=0
t0=$(date +%s)
stamp() { echo "[speed +$(( $(date +%s) - t0 ))s] $*"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader || true

# 1. PyTorch: every (model, batch, seq) the reports evaluate (Table 7's rows at each method's
#    batch, and COAT's batches at BF16's), fused AdamW on 2^28 params, eager amax (Fig. 4(b)).
stamp "torch reference"
"$PY" scripts/torch_layer_time.py \
  --config llama2-7b:1x2048 --config llama2-7b:2x2048 --config llama2-7b:4x2048 --config llama2-7b:8x2048 \
  --config llama2-13b:1x1024 --config llama2-13b:1x2048 --config llama2-13b:2x2048 --config llama2-13b:4x2048 \
  --config llama-30b:1x2048 \
  --adamw-params 268435456 --amax --out "$D/torch_times.json" || { echo "torch_layer_time.py: exit $?"; status=1; }

if [ ! -x "$BUNDLE/fp8sim" ]; then
  echo "no fp8sim in $BUNDLE: only the PyTorch reference was measured"
  exit 1
fi
[ -f "$D/torch_times.json" ] || { echo "no torch_times.json: fp8sim speed needs PyTorch's attention times"; exit 1; }

# 2. The kernels' own check first (a wrong kernel must not produce a timing).
if [ -x "$BUNDLE/tests/test_speed_gpu" ]; then
  stamp "test_speed_gpu"
  $RUN "$BUNDLE/tests/test_speed_gpu" --gtest_brief=1 --gtest_output="xml:$D/test_speed_gpu.xml" > "$D/test_speed_gpu.txt" 2>&1 \
    || { echo "test_speed_gpu: FAILED (see test_speed_gpu.txt)"; status=1; }
  tail -n 3 "$D/test_speed_gpu.txt"
fi

# 3. Measured replays. The first also times every Table 7 shape and Figure 4(b)'s kernels; the
#    second adds Llama-2-13B's 4-GPU row. (The committed calibration comes from calibrate.sh.)
stamp "fp8sim speed llama2-7b (table 7, fig 4b)"
$RUN "$BUNDLE/fp8sim" speed --model llama2-7b --batch bf16=2,te=2,coat=4 --seq 2048 --gpus 4 --table7 \
  --torch-times "$D/torch_times.json" \
  --json "$D/speed_llama2-7b.json" --markdown "$D/speed_llama2-7b.md" > "$D/speed_llama2-7b.txt" 2>&1 \
  || { echo "fp8sim speed llama2-7b: exit $?"; status=1; }
cat "$D/speed_llama2-7b.txt" | head -n 60

stamp "fp8sim speed llama2-13b"
$RUN "$BUNDLE/fp8sim" speed --model llama2-13b --batch bf16=1,te=1,coat=2 --seq 2048 --gpus 4 --no-fig4b \
  --torch-times "$D/torch_times.json" \
  --json "$D/speed_llama2-13b.json" --markdown "$D/speed_llama2-13b.md" > "$D/speed_llama2-13b.txt" 2>&1 \
  || { echo "fp8sim speed llama2-13b: exit $?"; status=1; }
head -n 20 "$D/speed_llama2-13b.txt"

# 4. The files to commit as reports/h200/speed.{json,md}.
if [ -f "$D/speed_llama2-7b.json" ]; then
  cp "$D/speed_llama2-7b.json" "$D/speed.json"
  {
    echo "# fp8sim speed on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) ($(date -u +%F))"
    echo
    echo "Commands (scripts/device/speed.sh):"
    echo
    echo '```'
    echo "python3 scripts/torch_layer_time.py --config llama2-7b:{1,2,4,8}x2048 --config llama2-13b:{1x1024,1x2048,2x2048,4x2048} --config llama-30b:1x2048 --adamw-params 268435456 --amax --out torch_times.json"
    echo "fp8sim speed --model llama2-7b --batch bf16=2,te=2,coat=4 --seq 2048 --gpus 4 --table7 --torch-times torch_times.json"
    echo "fp8sim speed --model llama2-13b --batch bf16=1,te=1,coat=2 --seq 2048 --gpus 4 --no-fig4b --torch-times torch_times.json"
    echo '```'
    echo
    cat "$D/speed_llama2-7b.md"
    [ -f "$D/speed_llama2-13b.md" ] && cat "$D/speed_llama2-13b.md"
  } > "$D/speed.md"
fi
stamp "done (status $status)"
exit $status
