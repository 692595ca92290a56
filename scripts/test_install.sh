#!/usr/bin/env bash
# `cmake --install` gives a command line that finds its data without the source tree: installs
# BUILD into a fresh prefix, moves the prefix (the install is relocatable), and checks that the
# installed fp8sim reads its models, recipes and calibration from <prefix>/share/fp8sim.
# Usage: scripts/test_install.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=${1:?usage: scripts/test_install.sh BUILD_DIR WORK_DIR}
work=${2:?usage: scripts/test_install.sh BUILD_DIR WORK_DIR}
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/a" >/dev/null
mv "$work/a" "$work/b"
fp8=$work/b/bin/fp8sim
unset FP8SIM_SOURCE_DIR FP8SIM_MODELS_DIR FP8SIM_RECIPES_DIR FP8SIM_CALIBRATION
"$fp8" memory --model llama2-7b --recipe coat --quiet --json "$work/m.json"
grep -q '"params": 6738415616' "$work/m.json"
"$fp8" speed --model llama2-7b --quiet --json "$work/s.json"
# The path shows relative to the source tree when the prefix lies inside it.
grep -q "b/share/fp8sim/reports/h200/calibration.json\"" "$work/s.json"
"$fp8" speed --framework hf --model tinyllama-1.1b --batch 2 --quiet --json "$work/f.json"
grep -q "b/share/fp8sim/reports/h200/step_ops/hf.json\"" "$work/f.json"
"$fp8" recipes --quiet --json "$work/r.json"
grep -q '"coat"' "$work/r.json"
test -f "$work/b/lib/libfp8sim_core.a" && test -f "$work/b/include/fp8sim/sim/quant/spec.hpp"
echo "installed fp8sim finds its data in $work/b/share/fp8sim"
rm -rf "$work"
