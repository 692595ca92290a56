#!/bin/bash
# optim --device cuda: GPU tests, then CPU (16 threads) vs GPU on a synthetic windowed trace.
set -u
R=$OUT/r1; mkdir -p $R
rm -rf .bundle; tar -xJf .bundle.tar.xz && tar -C .bundle -xJf .bundle/tests.tar.xz
export FP8SIM_TEST_BINARY=$PWD/.bundle/fp8sim FP8SIM_TEST_SOURCE_DIR=$PWD FP8SIM_MODELS_DIR=$PWD/models FP8SIM_RECIPES_DIR=$PWD/recipes
export LD_LIBRARY_PATH=$PWD/.bundle/lib:${LD_LIBRARY_PATH:-}
F=.bundle/fp8sim
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > $R/gpu.txt
nproc >> $R/gpu.txt
(time .bundle/run .bundle/tests/test_optim_gpu --gtest_brief=1) > $R/test_optim_gpu.txt 2>&1
tail -5 $R/test_optim_gpu.txt
T=/tmp/win.h5
(time $F synth --model tinyllama-1.1b --layers 4 --window 4 --tokens 1024 --out $T) > $R/synth.txt 2>&1
cat $R/synth.txt | tail -4
for i in 1 2; do
  /usr/bin/time -f "cpu_drift wall %e s rss %M KB" $F optim $T --no-table1 -q --json /tmp/cpu.json 2>> $R/times.txt
  /usr/bin/time -f "gpu_drift wall %e s rss %M KB" $F optim $T --no-table1 --device cuda --json /tmp/gpu.json > /dev/null 2>> $R/times.txt
  cmp /tmp/cpu.json /tmp/gpu.json && echo "drift json identical (run $i)" >> $R/times.txt
done
/usr/bin/time -f "cpu_full wall %e s rss %M KB" $F optim $T -q --json /tmp/cpu_full.json 2>> $R/times.txt
/usr/bin/time -f "gpu_full wall %e s rss %M KB" $F optim $T --device cuda --json /tmp/gpu_full.json > /dev/null 2>> $R/times.txt
cmp /tmp/cpu_full.json /tmp/gpu_full.json && echo "full json identical" >> $R/times.txt
/usr/bin/time -f "read_only (--no-drift --no-table1) wall %e s" $F optim $T --no-drift --no-table1 -q 2>> $R/times.txt || true
cp /tmp/gpu.json $R/
cat $R/times.txt
tar -C $OUT -czf $OUT/r1.tgz r1
