#!/usr/bin/env bash
# Runs `fp8sim report` on the GPU machine and leaves the finished report in $OUT/report/
# (report.json, report.md, report.html, *.png): the example under reports/h200/.
#
# Runs from the repository root with the bundle made by scripts/package_gpu.sh in .bundle/
# (fp8sim + its shared libraries in .bundle/lib), as scripts/device/run_all.sh calls it. The GPU
# machine's python3 has matplotlib, so the plots are drawn there; it has no chromium, so the
# first-page screenshot is taken back here (docs/report.md).
#   usage: OUT=/some/dir bash scripts/device/report.sh [extra fp8sim report options]
set -euo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUNDLE=${FP8SIM_BUNDLE:-$ROOT/.bundle}
FP8SIM="$BUNDLE/fp8sim"
[ -x "$FP8SIM" ] || { echo "report.sh: no fp8sim in $BUNDLE (run scripts/package_gpu.sh here first)" >&2; exit 1; }
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The binary was built elsewhere: point it at this tree's scripts, models, traces and calibration.
export FP8SIM_SOURCE_DIR="$ROOT"
export FP8SIM_MODELS_DIR="$ROOT/models"
export FP8SIM_RECIPES_DIR="$ROOT/recipes"
export FP8SIM_PYTHON="${FP8SIM_PYTHON:-$(command -v python3)}"
export FP8SIM_PROGRESS=0
export PYTHONUNBUFFERED=1

"$FP8SIM" --version
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$FP8SIM_PYTHON" -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' || true

mkdir -p "$OUT"
start=$(date +%s)
# --keep-going: the example report is written even when a section fails; the failure shows in
# that section and as a warning here.
"$FP8SIM" report --out "$OUT/report" --keep-going "$@"
echo "report: $(( $(date +%s) - start ))s"
ls -la "$OUT/report"
