#!/usr/bin/env bash
# The measurements `fp8sim speed --framework` is built from and validated against, on the GPU
# machine (one H200), in one call:
#   1. scripts/device/calibrate.sh: the calibration of the current build (with the eager
#      elementwise rates and fused AdamW over a model's parameter list) -> $OUT/calibrate/
#   2. scripts/count_step_ops.py for the torch and hf frameworks: every op of an eager step and its
#      bytes, fitted to the model's dimensions -> $OUT/step_ops.tgz
#   3. scripts/measure_matrix.py --plan speed-frameworks (via frameworks.sh): end-to-end steps at
#      configurations the calibration does not contain -> $OUT/frameworks_speed-frameworks.tgz
# Runs from the repository root with the bundle of scripts/package_gpu.sh in .bundle/ and the
# wheels of frameworks.sh in .whl/.
#   usage: OUT=DIR bash scripts/device/speed_profiles.sh [DEADLINE_S]
# DEADLINE_S (default 400) stops new framework entries; each may run FP8SIM_PER_ENTRY s (default
# 150), so wrap the call in `timeout` when the device limits the call's length.
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
deadline=${1:-400}
start=$(date +%s)
status=0
mkdir -p /tmp/step_ops
for fw in torch hf; do
  python3 scripts/count_step_ops.py --framework "$fw" --out "/tmp/step_ops/ops_$fw.json" 2>&1 | tail -n 6 || status=1
done
tar czf "$OUT/step_ops.tgz" -C /tmp/step_ops .
[ "${FP8SIM_SKIP_CALIBRATE:-0}" = 1 ] || bash scripts/device/calibrate.sh || status=1
left=$(( deadline - ($(date +%s) - start) ))
FP8SIM_PER_ENTRY=${FP8SIM_PER_ENTRY:-150} bash scripts/device/frameworks.sh speed-frameworks "$left" || status=1
echo "speed_profiles.sh: $(( $(date +%s) - start )) s, status $status"
exit $status
