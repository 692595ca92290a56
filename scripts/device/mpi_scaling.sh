#!/usr/bin/env bash
# MPI scaling of `fp8sim analyze` on one host (docs/scale-out.md): writes a synthetic trace
# (`fp8sim synth`), measures a plain sequential read of it, then runs analyze under mpirun at each
# rank count (one OpenMP thread per rank, ranks bound to cores) and once as one process with all
# cores' threads, checking that every run's JSON is byte-identical to the first run's (the baseline
# of the speedups: list 1 first in --ranks). --cuda-ranks "1 4" also runs --device cuda (the GPU
# path, same JSON) as 1 and 4 processes sharing the GPU (the cores' OpenMP threads shared among them:
# they decode the trace's chunks); --no-threads leaves out the all-threads
# process. Every run's --timing notes (reading vs computing, work per rank) go to timing.txt.
# Run from the repository root with the bundle (scripts/package_gpu.sh) in .bundle/.
#
#   usage: [RECIPE=coat] OUT=DIR bash scripts/device/mpi_scaling.sh [--ranks "1 2 4 8 16"] [--cuda-ranks "1 4 16"]
#                                                     [--no-threads] [SYNTH OPTIONS...]
#     default synth options: --model tinyllama-1.1b --layers 6 --tokens 4096 (8.7 GiB)
#   outputs: $OUT/mpi/{scaling.tsv, summary.txt, timing.txt, synth.log, read.log, analyze_*.log of
#            failed runs}
set -u -o pipefail
: "${OUT:=$PWD/out}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${FP8SIM_BUNDLE:-$ROOT/.bundle}
F=$B/fp8sim
D="$OUT/mpi"
mkdir -p "$D"
ranks="1 2 4 8 16"
cuda_ranks=""
threads=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --cuda-ranks) cuda_ranks=$2; shift 2 ;;
    --no-threads) threads=0; shift ;;
    *) break ;;
  esac
done
synth=("$@")
[[ ${#synth[@]} -eq 0 ]] && synth=(--model tinyllama-1.1b --layers 6 --tokens 4096)
trace=${FP8SIM_SYNTH_TRACE:-/tmp/fp8sim_scaling.h5}
recipe=${RECIPE:-coat}
export FP8SIM_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }

t0=$(now)
"$F" synth "${synth[@]}" --out "$trace" > "$D/synth.log" 2>&1 || { echo "synth failed"; cat "$D/synth.log"; exit 1; }
echo "synth: $(cat "$D/synth.log") in $(calc "$(now) - $t0") s; analyze --recipe $recipe" | tee "$D/summary.txt"
bytes=$(stat -c %s "$trace")

# A plain sequential read of the file: cold when the page cache can be dropped, and cached.
{
  sync
  if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
    t0=$(now); dd if="$trace" of=/dev/null bs=64M 2>/dev/null; t1=$(now)
    echo "cold read: $(calc "$bytes / ($t1 - $t0) / 1e9") GB/s"
  else
    echo "cold read: not measured (the page cache cannot be dropped here)"
  fi
  t0=$(now); dd if="$trace" of=/dev/null bs=64M 2>/dev/null; t1=$(now)
  echo "cached read: $(calc "$bytes / ($t1 - $t0) / 1e9") GB/s"
} > "$D/read.log" 2>&1
cat "$D/read.log" | tee -a "$D/summary.txt"

printf 'run\tranks\tthreads_per_rank\tseconds\tspeedup\tefficiency\tsame_json\n' > "$D/scaling.tsv"
base=""
first=""  # the first run: the baseline of the times and of the byte-identity check
run() {  # run NAME RANKS THREADS CMD...
  local name=$1 n=$2 th=$3
  shift 3
  local t0 t1 s same=-
  t0=$(now)
  "$@" > "$D/analyze_$name.log" 2>&1
  local rc=$?
  t1=$(now)
  s=$(calc "$t1 - $t0")
  [[ -z "$base" ]] && base=$s
  if [[ -z "$first" ]]; then first=$name; elif [[ -f "$D/$first.json" && -f "$D/$name.json" ]]; then
    cmp -s "$D/$first.json" "$D/$name.json" && same=yes || same=NO
  fi
  printf '%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\n' "$name" "$n" "$th" "$s" "$(calc "$base / $s")" \
    "$(calc "$base / $s / $n / $th")" "$same" >> "$D/scaling.tsv"
  echo "$name: rc=$rc ${s}s same_json=$same"
  grep -E "^(rank 0|work per rank)" "$D/analyze_$name.log" | sed "s/^/$name: /" >> "$D/timing.txt"
  (( rc == 0 )) && rm -f "$D/analyze_$name.log"  # few files come back from a device run: keep failures' logs
  [[ "$name" != "$first" ]] && rm -f "$D/$name.json"
  return 0
}
cores=$(nproc)
for n in $ranks; do
  bind=(--bind-to core)
  (( n > cores )) && bind=(--bind-to none --oversubscribe)
  run "np$n" "$n" 1 mpirun --quiet -np "$n" "${bind[@]}" -x OMP_NUM_THREADS=1 -x FP8SIM_PROGRESS \
    "$F" analyze "$trace" --recipe "$recipe" --no-gemm --timing --json "$D/np$n.json"
done
if (( threads )); then
  run "threads$cores" 1 "$cores" env OMP_NUM_THREADS="$cores" "$F" analyze "$trace" --recipe "$recipe" --no-gemm --timing \
    --json "$D/threads$cores.json"
fi
for n in $cuda_ranks; do  # processes sharing the one GPU, the cores shared out for decoding the trace's chunks
  th=$(( cores / n > 0 ? cores / n : 1 ))
  run "cuda_np$n" "$n" "$th" mpirun --quiet -np "$n" --bind-to none -x OMP_NUM_THREADS="$th" -x FP8SIM_PROGRESS \
    "$F" analyze "$trace" --recipe "$recipe" --no-gemm --timing --device cuda --json "$D/cuda_np$n.json"
done
cat "$D/scaling.tsv" | tee -a "$D/summary.txt"
[[ -f "$D/timing.txt" ]] && tee -a "$D/summary.txt" < "$D/timing.txt"
rm -f "$D/$first.json"
