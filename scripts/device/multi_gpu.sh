#!/usr/bin/env bash
# Multi-GPU validation on one host of 2-8 GPUs: with the bundle (scripts/package_gpu.sh, carried as
# .bundle or .bundle.tar.xz) the sharded-optimizer GPU test (shard k stepped on GPU k % GPUs,
# gathered against one GPU's step); the FP8-vs-BF16 all-gather and reduce-scatter bench
# (scripts/bench_allgather.py) on every GPU; then data-parallel training steps
# (scripts/measure_matrix.py plan multi-gpu: DDP and FSDP2 of the torch reference and of
# transformers' Llama, each a torchrun of scripts/measure_step.py --dist) until the deadline.
# NVLink multicast stays off. Leaves $OUT/allgather.{json,md} and $OUT/multi_gpu.tgz (every step's
# JSON and log, index.json, sharded_optim.log), packed every 20 s so that a killed call keeps what
# finished; judge the steps with `fp8sim memory --validate DIR` where they are unpacked.
#   usage: OUT=DIR bash scripts/device/multi_gpu.sh [DEADLINE_S [MEASURE_MATRIX_ARGS...]]
#   (default deadline 420 s after the bench; the plan runs at 2 GPUs and at all of them unless
#   MEASURE_MATRIX_ARGS has --gpus N,...; --only SUBSTR,... picks entries, as measure_matrix.py does)
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
deadline=${1:-420}
shift $(( $# < 1 ? $# : 1 ))
n=$(nvidia-smi -L 2>/dev/null | wc -l)
if (( n < 2 )); then
  echo "multi_gpu.sh: needs 2 or more GPUs on this host, found $n" >&2
  exit 1
fi
gpus="2"
(( n > 2 )) && gpus="2,$n"
[[ " $* " == *" --gpus "* ]] && gpus=""
mkdir -p /tmp/multi_gpu
pack() { tar czf "$OUT/multi_gpu.tgz.part" -C /tmp/multi_gpu . && mv -f "$OUT/multi_gpu.tgz.part" "$OUT/multi_gpu.tgz"; }
( while sleep 20; do pack; done ) &
packer=$!
trap 'kill $packer 2>/dev/null; pack' EXIT
trap 'exit 124' TERM INT
t0=$(date +%s)
if [[ ! -d .bundle && -f .bundle.tar.xz ]]; then tar -xJf .bundle.tar.xz; fi
if [[ -x .bundle/run ]]; then
  timeout 120 .bundle/run test_optim_gpu --gtest_filter='AdamwGpu.ShardsOnEachGpuGatherToTheOneGpuStep' \
    > /tmp/multi_gpu/sharded_optim.log 2>&1
  echo "multi_gpu.sh: sharded optimizer test exit $? ($(grep -c '^\[       OK' /tmp/multi_gpu/sharded_optim.log) passed)"
else
  echo "multi_gpu.sh: no bundle (.bundle): the sharded optimizer test is skipped"
fi
timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" scripts/bench_allgather.py \
  --model llama2-7b,llama3-8b --json "$OUT/allgather.json" --md "$OUT/allgather.md" > /tmp/multi_gpu/allgather.log 2>&1
echo "multi_gpu.sh: all-gather bench exit $? in $(( $(date +%s) - t0 )) s"
python3 scripts/measure_matrix.py --plan multi-gpu ${gpus:+--gpus "$gpus"} --out /tmp/multi_gpu \
  --deadline "$deadline" --per-entry "${FP8SIM_PER_ENTRY:-150}" "$@"
echo "multi_gpu.sh: $(( $(date +%s) - t0 )) s"
