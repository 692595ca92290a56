#!/usr/bin/env bash
# What `fp8sim speed --framework coat` is built from and validated against, on the GPU machine:
#   1. scripts/count_step_ops.py --framework coat: every launch of COAT's step (ATen ops, Triton
#      kernels, optimizer-extension calls) with its bytes, and the host time of each phase, over
#      small configurations -> $OUT/step_ops_coat.json
#   2. measure_matrix.py --plan speed-coat (via frameworks.sh): COAT's timed steps at
#      configurations the inventory does not contain -> $OUT/frameworks_speed-coat.tgz
# Needs the wheels and the fp8-coat sdist of frameworks.sh in .whl/ (carry it).
#   usage: OUT=DIR bash scripts/device/coat_profile.sh [DEADLINE_S] [--skip-count] [--only ENTRIES]
# DEADLINE_S (default 420) stops new timed entries; each may run FP8SIM_PER_ENTRY s (default 150).
# FP8SIM_COUNT_CONFIGS (default 24 of count_step_ops.py's 36; the fit needs 18) bounds the count;
# FP8SIM_COUNT_ARGS passes more options to it (--host-probe).
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
deadline=${1:-420}
shift $(( $# < 1 ? $# : 1 ))
count=1
if [ "${1:-}" = --skip-count ]; then count=0; shift; fi
start=$(date +%s)
status=0
coat=$(ls "$ROOT"/.whl/coat/*.tar.gz 2>/dev/null | head -n 1)
[ -n "$coat" ] && ls .whl/t445/*.whl >/dev/null 2>&1 || { echo "coat_profile.sh: .whl/coat and .whl/t445 are needed"; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site45 .whl/t445/*.whl
if [ $count = 1 ]; then
  PYTHONPATH=/tmp/site45 PYTHONUNBUFFERED=1 python3 scripts/count_step_ops.py --framework coat --coat "$coat" \
    --configs "${FP8SIM_COUNT_CONFIGS:-24}" ${FP8SIM_COUNT_ARGS:-} --out "$OUT/step_ops_coat.json" 2>&1 | tail -n 12 || status=1
fi
left=$(( deadline - ($(date +%s) - start) ))
FP8SIM_PER_ENTRY=${FP8SIM_PER_ENTRY:-150} bash scripts/device/frameworks.sh speed-coat "$left" "$@" || status=1
echo "coat_profile.sh: $(( $(date +%s) - start )) s, status $status"
exit $status
