#!/usr/bin/env bash
# Measures training steps as real frameworks run them (scripts/measure_matrix.py plans) on the GPU
# machine and leaves $OUT/frameworks_PLAN.tgz per plan (each measurement's JSON and log, index.json).
#   usage: OUT=DIR bash scripts/device/frameworks.sh PLAN[,PLAN...] [DEADLINE_S [MEASURE_MATRIX_ARGS...]]
#   (for example `frameworks.sh coat 500 --only coat-ckpt__l2-7b-L4__b1,coat__1b-gqa__b2`, or
#   `frameworks.sh maxbatch-compiled 240 --check-at 1b-gqa=B`, B fp8sim's largest micro-batch at 80 GiB)
# Plans: memory, maxbatch, maxbatch-compiled, coat, speed, speed-torchao, ... (measure_matrix.py --help). Wheels the GPU machine lacks travel
# in .whl/ (git-ignored; carry it): .whl/ao/ torchao, .whl/t445/ transformers 4.45.2 with tokenizers
# 0.20 and huggingface_hub < 1.0 (COAT's model code needs them), .whl/coat/ the fp8-coat sdist.
# The deadline (default 500 s, counted after the setup) is shared by the plans and stops new entries, not running ones (each may
# run FP8SIM_PER_ENTRY seconds, default 240); unfinished entries are listed in index.json.
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
plans=${1:?usage: frameworks.sh PLAN[,PLAN...] [DEADLINE_S]}
deadline=${2:-500}
shift $(( $# < 2 ? $# : 2 ))
export PYTHONUNBUFFERED=1
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$1" "${@:2}"; }
if ls .whl/ao/*.whl >/dev/null 2>&1; then pipi /tmp/site .whl/ao/*.whl && export PYTHONPATH=/tmp/site; fi
coat=""
if ls .whl/t445/*.whl >/dev/null 2>&1 && ls .whl/coat/*.tar.gz >/dev/null 2>&1; then
  pipi /tmp/site45 .whl/t445/*.whl && export FP8SIM_SITE_T445=/tmp/site45
  coat=$(ls "$ROOT"/.whl/coat/*.tar.gz | head -n 1)
  # build COAT's optimizer kernels once, before entries load them in parallel
  PYTHONPATH=/tmp/site45:${PYTHONPATH:-} python3 -c "import sys; sys.path.insert(0, 'scripts'); import measure_coat; \
measure_coat.setup('$coat', '/tmp/fp8sim_coat')" || echo "COAT setup failed: coat entries will fail"
fi
# Whatever finished is packed even when the caller's time limit kills this script midway: every
# 20 s (each archive replaced whole) and at the end.
pack() {
  for d in /tmp/frameworks/*/; do
    [ -d "$d" ] || continue
    local a="$OUT/frameworks_$(basename "$d").tgz"
    tar czf "$a.part" -C "$d" . && mv -f "$a.part" "$a"
  done
}
( while sleep 20; do pack; done ) &
packer=$!
trap 'kill $packer 2>/dev/null; pack' EXIT
trap 'exit 124' TERM INT
# The deadline counts from here, after the wheels and COAT's build (about 75 s).
start=$(date +%s)
for plan in ${plans//,/ }; do
  left=$(( deadline - ($(date +%s) - start) ))
  (( left > 30 )) || { echo "no time left for plan $plan"; continue; }
  mkdir -p "/tmp/frameworks/$plan"
  python3 scripts/measure_matrix.py --plan "$plan" --out "/tmp/frameworks/$plan" --jobs 3 --deadline "$left" \
    --per-entry "${FP8SIM_PER_ENTRY:-240}" ${coat:+--coat "$coat"} "$@"
done
echo "frameworks.sh: $(( $(date +%s) - start )) s"
