#!/usr/bin/env bash
# The GPU area's device run: the GPU tests, `fp8sim compare` on the committed sample trace, the
# peers (scripts/bench_peers.py) and `fp8sim bench`, with every output under $OUT/gpu/.
# Run on the GPU machine from the repository root with the bundle (scripts/package_gpu.sh) in
# .bundle/. Every step is independent: each has its own time limit and log, a failing step never
# stops the others, and steps.tsv records each one's exit status and duration.
#
#   usage: OUT=DIR bash scripts/device/gpu.sh [--smoke] [--only STEP,...] [--skip STEP,...] [--coat]
#                                             [--ops OP,...]
#     steps: env tests compare plan peers bench          (default: all)
#     --smoke  < 60 s: the cast + GEMM tests and a filtered quantize/adamw subset, compare on 2
#              tensors per role, bench --smoke without peers
#     --coat   build COAT's kernels from .bundle/peers/fp8_coat-*.tar.gz (if present) and time them
#              as peers, with the code agreement check (adds ~2 min of compile time)
#     --ops    the ops that plan, peers and bench time (`fp8sim bench --ops`; default: all)
#   outputs: $OUT/gpu/{steps.tsv, summary.txt, env.log, test_*.xml, test_*.log, compare.{json,md,log},
#            plan.json, peers.json, peers.log, bench.{json,md,log}}
set -u -o pipefail
: "${OUT:=$PWD/out}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${FP8SIM_BUNDLE:-$ROOT/.bundle}
D="$OUT/gpu"
mkdir -p "$D"
smoke=0
coat=0
only=""
skip=""
ops=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --coat) coat=1 ;;
    --only) only=",$2,"; shift ;;
    --skip) skip=",$2,"; shift ;;
    --ops) ops=(--ops "$2"); shift ;;
    *) echo "gpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
export PYTHONUNBUFFERED=1 FP8SIM_PROGRESS=0
# Never let NCCL/PyTorch use NVLink multicast on a shared host (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS="$D/steps.tsv"
printf 'step\trc\tseconds\tlimit\n' > "$STEPS"

want() {
  [[ -n "$only" && "$only" != *",$1,"* ]] && return 1
  [[ -n "$skip" && "$skip" == *",$1,"* ]] && return 1
  return 0
}

# step NAME LIMIT_S CMD...: runs CMD with a time limit, output to $D/NAME.log; never aborts.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=15 "$limit" "$@" > "$D/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$limit" >> "$STEPS"
  echo "== $name: rc=$rc ($(( $(date +%s) - t0 ))s, limit ${limit}s)"
  tail -n 12 "$D/$name.log" | sed 's/^/   /'
  return 0
}

if [[ ! -x "$B/fp8sim" || ! -x "$B/run" ]]; then
  echo "gpu.sh: error: no bundle in $B (run scripts/package_gpu.sh on the build machine; carry .bundle)" >&2
  exit 1
fi
RUN="$B/run"
# Tests that run the CLI or read the sample trace find them here, not at the build machine's paths.
export FP8SIM_TEST_BINARY="$B/fp8sim" FP8SIM_TEST_SOURCE_DIR="$ROOT"
if [[ ! -d "$B/tests" && -f "$B/tests.tar.xz" ]]; then tar -C "$B" -xJf "$B/tests.tar.xz"; fi

if want env; then
  step env 60 bash -c "nvidia-smi; echo; cat '$B/MANIFEST'; echo; '$RUN' fp8sim --version;
    for f in '$B'/fp8sim '$B'/tests/*; do echo \"ldd \$f:\"; LD_LIBRARY_PATH='$B/lib' ldd \"\$f\" | grep -E 'not found|cublas' || true; done;
    python3 -c 'import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'"
fi

if want tests; then
  for t in "$B"/tests/test_*_gpu; do
    [[ -x "$t" ]] || continue
    n=$(basename "$t")
    filter="*"
    if (( smoke )); then
      case "$n" in
        test_quant_gpu) filter="*PlainGranularities*:*Delayed*:*Degenerate*" ;;
        test_optim_gpu) filter="*CoatFusedKernel*:*Fp32States*" ;;
        test_gemm_gpu) filter="*Awkward*:*WrongScale*" ;;
      esac
    fi
    step "$n" $(( smoke ? 40 : 300 )) "$RUN" "$t" --gtest_filter="$filter" --gtest_output="xml:$D/$n.xml"
  done
fi

trace=$(ls traces/*.h5 2>/dev/null | head -n 1)
if want compare; then
  if [[ -z "$trace" ]]; then
    echo "== compare: skipped (no traces/*.h5)" | tee -a "$D/compare.log"
  elif (( smoke )); then
    step compare 40 "$RUN" fp8sim compare "$trace" --max-tensors 2 --json "$D/compare.json" --md "$D/compare.md"
  else
    step compare 300 "$RUN" fp8sim compare "$trace" --gemm-suite --json "$D/compare.json" --md "$D/compare.md"
  fi
fi

smoke_flag=()
(( smoke )) && smoke_flag=(--smoke)
if want plan; then
  step plan 30 "$RUN" fp8sim bench --write-plan "$D/plan.json" "${smoke_flag[@]}" "${ops[@]}"
fi

peers_args=()
if want peers && (( ! smoke )) && [[ -f "$D/plan.json" ]]; then
  coat_args=()
  sdist=$(ls "$B"/peers/fp8_coat-*.tar.gz 2>/dev/null | head -n 1)
  if (( coat )) && [[ -n "$sdist" ]]; then coat_args=(--coat-sdist "$sdist" --coat-dump "$D/coat_states"); fi
  step peers 480 python3 scripts/bench_peers.py --plan "$D/plan.json" --json "$D/peers.json" "${coat_args[@]}"
fi
[[ -f "$D/peers.json" ]] && peers_args=(--peers "$D/peers.json")
[[ -d "$D/coat_states" ]] && peers_args+=(--coat-states "$D/coat_states")

if want bench; then
  step bench $(( smoke ? 45 : 480 )) "$RUN" fp8sim bench "${smoke_flag[@]}" "${ops[@]}" "${peers_args[@]}" \
    --json "$D/bench.json" --md "$D/bench.md"
fi
rm -rf "$D/coat_states"  # large; the agreement numbers are in bench.json

{
  echo "gpu.sh $( (( smoke )) && echo --smoke) finished $(date -u +%FT%TZ)"
  column -t -s $'\t' "$STEPS" 2>/dev/null || cat "$STEPS"
  [[ -f "$D/compare.log" ]] && grep -E "comparisons passed" "$D/compare.log"
  [[ -f "$D/bench.log" ]] && grep -E "^ceiling|^targets" "$D/bench.log"
  for x in "$D"/test_*.xml; do
    [[ -f "$x" ]] && echo "$(basename "$x" .xml): $(grep -o 'tests="[0-9]*" failures="[0-9]*"' "$x" | head -n 1) $(grep -c '<skipped' "$x") skipped"
  done
} > "$D/summary.txt"
cat "$D/summary.txt"
