#!/usr/bin/env bash
# Runs on the GPU machine (one H200) from the repository root, with the bundle made here by
# scripts/package_gpu.sh in .bundle/. Calls each area's script (scripts/device/<area>.sh) with
# its own time limit, never stops at a failing step, and packs everything under $OUT into one
# archive ($OUT/results.tgz) plus a summary ($OUT/summary.txt): the device tool returns at most
# 8 files.
#   usage: bash scripts/device/run_all.sh [AREA ...]     (default: smoke gpu memory speed report)
#   env:   AREA_TIMEOUT_<area>=seconds to override a limit
set -u
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
WORK="$OUT/work"
mkdir -p "$WORK"
export FP8SIM_BUNDLE="$ROOT/.bundle"
export PATH="$FP8SIM_BUNDLE:$PATH"
export LD_LIBRARY_PATH="$FP8SIM_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
} > "$SUMMARY"

areas=("$@")
[ ${#areas[@]} -eq 0 ] && areas=(gpu speed report)
declare -A limit=([smoke]=60 [gpu]=540 [calibrate]=560 [memory]=120 [speed]=200 [report]=360 [optim]=120)
for a in "${areas[@]}"; do
  script="scripts/device/$a.sh"
  if [ "$a" = smoke ]; then
    mkdir -p "$WORK/smoke"
    # package_gpu.sh ships the test binaries as one archive.
    [ -d "$FP8SIM_BUNDLE/tests" ] || tar -C "$FP8SIM_BUNDLE" -xJf "$FP8SIM_BUNDLE/tests.tar.xz"
    ( set -x; "$FP8SIM_BUNDLE/fp8sim" --version; ldd "$FP8SIM_BUNDLE/fp8sim" | grep -i "not found";
      for t in "$FP8SIM_BUNDLE"/tests/test_*_gpu; do "$t" --gtest_brief=1 --gtest_output="xml:$WORK/smoke/$(basename "$t").xml"; done
    ) > "$WORK/smoke/log.txt" 2>&1
    echo "smoke: rc=$? $(grep -hoE '[0-9]+ tests? (ran|from)' "$WORK"/smoke/log.txt | head -1)" >> "$SUMMARY"
    continue
  fi
  if [ ! -f "$script" ]; then echo "$a: no $script" >> "$SUMMARY"; continue; fi
  var="AREA_TIMEOUT_$a"
  t=${!var:-${limit[$a]:-120}}
  start=$(date +%s)
  # The log sits beside the area's folder: some areas (report) insist on a fresh output folder.
  OUT="$WORK" timeout "$t" bash "$script" > "$WORK/$a.run.log" 2>&1
  rc=$?
  echo "$a: rc=$rc in $(( $(date +%s) - start ))s (limit ${t}s)" >> "$SUMMARY"
  tail -n 15 "$WORK/$a.run.log" | sed "s/^/  [$a] /" >> "$SUMMARY"
done
tar czf "$OUT/results.tgz" -C "$WORK" . && rm -rf "$WORK"
cat "$SUMMARY"
