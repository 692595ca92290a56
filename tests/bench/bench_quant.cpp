// Quantize throughput on the CPU: 1x128 groups (fp32 absmax scales) and COAT's DE (coat and
// robust), on one thread and on all cores, plus dequantize. Elements/s and input GB/s.
// scripts/bench_quant_numpy.py runs this beside a numpy implementation of the same specs and
// prints the ratio table (docs/benchmarks.md quotes it).
//   ./bench_quant --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "sim/quant/quantize.hpp"

namespace {

using namespace fp8sim;

constexpr int64_t kRows = 2048, kCols = 2048;  // 4M elements, 16 MB of fp32: beyond L2 and L3 slices

const std::vector<float>& data() {
  static const std::vector<float> x = [] {
    // Optimizer-state-like magnitudes: log-normal spanning ~10^6 with random signs.
    std::vector<float> v(static_cast<size_t>(kRows * kCols));
    std::mt19937_64 g(1);
    std::normal_distribution<double> nd(-6.0, 2.0);
    for (auto& e : v) e = static_cast<float>(std::exp(nd(g)) * ((g() & 1) ? 1 : -1));
    return v;
  }();
  return x;
}

void run_quantize(benchmark::State& state, const char* spec_text) {
  const QuantSpec spec = QuantSpec::parse(spec_text);
  const std::vector<float>& x = data();
  QuantizeOptions o;
  o.threads = static_cast<int>(state.range(0));  // 0 = all cores
  QuantizedTensor q;
  quantize_into(x.data(), Shape{kRows, kCols}, spec, q, o);  // warm-up: sizes the buffers
  for (auto _ : state) {
    quantize_into(x.data(), Shape{kRows, kCols}, spec, q, o);
    benchmark::DoNotOptimize(q.codes.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * kCols);
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 4);
  state.counters["threads"] = o.threads ? o.threads : omp_get_max_threads();
}

void run_dequantize(benchmark::State& state, const char* spec_text) {
  const QuantSpec spec = QuantSpec::parse(spec_text);
  const QuantizedTensor q = quantize(data().data(), Shape{kRows, kCols}, spec);
  std::vector<float> y(static_cast<size_t>(kRows * kCols));
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    dequantize(q, y.data(), threads);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRows * kCols);
  state.counters["threads"] = threads ? threads : omp_get_max_threads();
}

void BM_quantize_g128(benchmark::State& s) { run_quantize(s, "e4m3:g128"); }
void BM_quantize_g128_de_coat(benchmark::State& s) { run_quantize(s, "e4m3:g128:de=coat"); }
void BM_quantize_g128_de_robust(benchmark::State& s) { run_quantize(s, "e4m3:g128:de=robust"); }
void BM_quantize_tensor(benchmark::State& s) { run_quantize(s, "e4m3:tensor"); }
void BM_dequantize_g128(benchmark::State& s) { run_dequantize(s, "e4m3:g128"); }
void BM_dequantize_g128_de_coat(benchmark::State& s) { run_dequantize(s, "e4m3:g128:de=coat"); }

// Arg = threads (1 = one core, 0 = all cores). Real time: the work is multi-threaded.
BENCHMARK(BM_quantize_g128)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_quantize_g128_de_coat)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_quantize_g128_de_robust)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_quantize_tensor)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dequantize_g128)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dequantize_g128_de_coat)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
