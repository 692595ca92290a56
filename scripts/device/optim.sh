#!/usr/bin/env bash
# CPU throughput of the optimizer-state replay (tests/bench/bench_optim.cpp) on the GPU host's
# otherwise idle CPU cores, beside torch.optim.AdamW on the CPU in the same run (the peer), and
#   $OUT/optim/bench_optim.json    Google Benchmark JSON (parameters/s = items_per_second)
#   $OUT/optim/torch_cpu_adamw.json torch's CPU AdamW, for-loop and foreach, same sizes and threads
#   $OUT/optim/summary.txt         one line per benchmark: name, threads, M params/s
# The development machine is shared (2 cores, load ~12), so its multi-threaded timings are not
# worth quoting; this script gives the numbers docs/optimizer.md quotes. Needs bench_optim in the
# bundle (.bundle/tests/bench_optim or .bundle/bench_optim: add it to scripts/package_gpu.sh's list,
# it links the same libraries as fp8sim). Takes about 2 minutes.
#   usage: OUT=/some/dir bash scripts/device/optim.sh
set -euo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUNDLE=${FP8SIM_BUNDLE:-$ROOT/.bundle}
PY=${FP8SIM_PYTHON:-python3}
mkdir -p "$OUT/optim"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
threads=$(nproc)

bench=""
for b in "$BUNDLE/tests/bench_optim" "$BUNDLE/bench_optim" "$ROOT/build/tests/bench/bench_optim"; do
  [[ -x "$b" ]] && { bench=$b; break; }
done
if [[ -n "$bench" ]]; then
  export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  OMP_PROC_BIND=close "$bench" --benchmark_format=json --benchmark_out="$OUT/optim/bench_optim.json" \
    --benchmark_out_format=json > "$OUT/optim/bench_optim.txt" 2>&1 || echo "bench_optim: exit $?"
  tail -n 40 "$OUT/optim/bench_optim.txt"
else
  echo "no bench_optim in $BUNDLE: add tests/bench/bench_optim to scripts/package_gpu.sh's binaries"
fi

# The peer: torch.optim.AdamW on the CPU, fp32 states, 2^22 parameters (as bench_optim), median
# of 5 timed steps after 2 warm-up steps, with 1 thread and with all threads.
"$PY" - "$OUT/optim/torch_cpu_adamw.json" "$threads" <<'PY' || echo "torch peer: exit $?"
import json, statistics, sys, time
import torch
out, all_threads = sys.argv[1], int(sys.argv[2])
n = 1 << 22
res = []
for threads in sorted({1, all_threads}):
    torch.set_num_threads(threads)
    for foreach in (False, True):
        g = torch.Generator().manual_seed(0)
        p = torch.nn.Parameter(torch.randn(n, generator=g) * 0.05)
        p.grad = torch.randn(n, generator=g) * 1e-4
        opt = torch.optim.AdamW([p], lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=foreach)
        for _ in range(2):
            opt.step()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        res.append({"threads": threads, "foreach": foreach, "params": n, "median_s": med,
                    "params_per_s": n / med})
        print(f"torch.optim.AdamW cpu threads={threads} foreach={foreach}: {n / med / 1e6:.1f} M params/s")
json.dump({"torch": torch.__version__, "results": res}, open(out, "w"), indent=1)
PY

if [[ -f "$OUT/optim/bench_optim.json" ]]; then
  "$PY" - "$OUT/optim/bench_optim.json" > "$OUT/optim/summary.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d["benchmarks"]:
    if b.get("aggregate_name") == "median":
        print(f'{b["run_name"]:60s} omp_threads={int(b.get("omp_threads", 0)):3d} {b["items_per_second"] / 1e6:8.2f} M params/s')
PY
  cat "$OUT/optim/summary.txt"
fi
