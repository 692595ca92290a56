#!/usr/bin/env bash
# Session device call 8: page-locked uploads from pooled blocks: GPU tests, A/B (FP8SIM_PIN=0) of
# analyze --device cuda's phases in one process and of 4 processes under mpirun, MPI coat scaling.
set -u
T0=$(date +%s); left() { echo $(( 330 - ($(date +%s) - T0) )); }
R=$OUT/r; mkdir -p $R
rm -rf .bundle; tar -xJf .bundle.tar.xz && tar -C .bundle -xJf .bundle/tests.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
head -3 .bundle/MANIFEST | tee -a $R/gpu.txt
export FP8SIM_TEST_BINARY=$PWD/.bundle/fp8sim FP8SIM_TEST_SOURCE_DIR=$PWD FP8SIM_MODELS_DIR=$PWD/models FP8SIM_RECIPES_DIR=$PWD/recipes FP8SIM_PROGRESS=0
export LD_LIBRARY_PATH=$PWD/.bundle/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for t in test_analyze_gpu test_quant_gpu; do
  timeout 150 .bundle/run .bundle/tests/$t --gtest_brief=1 > $R/$t.txt 2>&1; echo "$t rc=$? $(grep -E 'PASSED|FAILED' $R/$t.txt | tr '\n' ' ')"
done
grep -B3 -A10 "Failure" $R/test_analyze_gpu.txt | head -30
.bundle/run .bundle/fp8sim synth --model tinyllama-1.1b --layers 2 --tokens 2048 --out /tmp/s2.h5 > /dev/null 2>&1
for pin in 0 1 0 1; do
  for rec in coat te; do
    echo "pin=$pin $rec: $(FP8SIM_PIN=$pin FP8SIM_GPU_PHASES=1 OMP_NUM_THREADS=16 .bundle/run .bundle/fp8sim analyze /tmp/s2.h5 --recipe $rec --no-gemm --device cuda --timing --json /tmp/a_${rec}_$pin.json 2>&1 | grep -E "GPU phases|rank 0: [0-9.]+ s of work|GPU's calls" | sed 's/fp8sim: GPU phases: //; s/rank 0: //' | tr '\n' ' ')" | tee -a $R/phases.txt
  done
done
cmp /tmp/a_coat_0.json /tmp/a_coat_1.json && cmp /tmp/a_te_0.json /tmp/a_te_1.json && echo "JSON identical with and without pinning" | tee -a $R/phases.txt
echo "left $(left)"
RECIPE=coat OUT=$R/c FP8SIM_SYNTH_TRACE=/tmp/s.h5 timeout $(( $(left) - 60 )) bash scripts/device/mpi_scaling.sh --ranks "1 16" --cuda-ranks "1 4" --no-threads > $R/mpi_c.log 2>&1; echo "mpi coat rc=$?"
cat $R/c/mpi/scaling.tsv; grep -E "cuda" $R/c/mpi/timing.txt | head -8
for pin in 0 1 0 1; do
  (( $(left) > 25 )) || break
  t0=$(date +%s.%N)
  FP8SIM_PIN=$pin mpirun --quiet -np 4 --bind-to none -x OMP_NUM_THREADS=4 -x FP8SIM_PIN -x FP8SIM_PROGRESS .bundle/run .bundle/fp8sim analyze /tmp/s.h5 --recipe coat --no-gemm --device cuda --json /tmp/m_$pin.json > /dev/null 2>&1
  echo "cuda_np4 pin=$pin: $(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }") s" | tee -a $R/phases.txt
done
echo "left $(left)"
tar -C $OUT -czf $OUT/r8.tgz r
