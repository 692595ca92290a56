// Bulk cast throughput (Google Benchmark). Run through scripts/bench_cast.py, which times
// ml_dtypes' astype on the same data in the same run and prints the ratio.
//   build/tests/bench/bench_cast --benchmark_filter=... [--benchmark_format=json]
// Arguments: (elements, threads). Bytes counted: 4 read + 1 written per element (fp32 -> fp8).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "sim/formats/cast.hpp"

namespace {

std::vector<float> make_input(size_t n) {
  // Same distribution as scripts/bench_cast.py: normal(0, 1) * 10^uniform(-3, 3), deterministic.
  std::vector<float> x(n);
  uint64_t s = 0x1234567;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u1 = ((s >> 11) + 0.5) * 0x1p-53;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u2 = ((s >> 11) + 0.5) * 0x1p-53;
    x[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2) *
                              std::pow(10.0, 6 * u2 - 3));
  }
  return x;
}

void run(benchmark::State& state, fp8sim::Format f, fp8sim::Rounding r) {
  const size_t n = static_cast<size_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  static std::vector<float> x;
  if (x.size() != n) x = make_input(n);
  std::vector<uint8_t> out(n);
  fp8sim::CastOptions o;
  o.format = f;
  o.rounding = r;
  o.threads = threads;
  for (auto _ : state) {
    fp8sim::cast_f32_to_fp8(x.data(), out.data(), n, o);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * 5));
  state.counters["threads"] = threads;
}

void BM_cast_e4m3_rne(benchmark::State& s) { run(s, fp8sim::Format::E4M3, fp8sim::Rounding::Nearest); }
void BM_cast_e5m2_rne(benchmark::State& s) { run(s, fp8sim::Format::E5M2, fp8sim::Rounding::Nearest); }
void BM_cast_e4m3_sr(benchmark::State& s) { run(s, fp8sim::Format::E4M3, fp8sim::Rounding::Stochastic); }

void args(benchmark::internal::Benchmark* b) {
  const int all = omp_get_num_procs();
  b->Args({1 << 24, 1});
  if (all > 1) b->Args({1 << 24, all});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5)->ReportAggregatesOnly(true);
}

BENCHMARK(BM_cast_e4m3_rne)->Apply(args);
BENCHMARK(BM_cast_e5m2_rne)->Apply(args);
BENCHMARK(BM_cast_e4m3_sr)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
