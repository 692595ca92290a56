// The error statistics of a quantized tensor (ErrorAccumulator::add: the sums of analyze, quantize
// and report) on one thread and on all cores, with the AVX2 lanes and with the portable loop.
// 8M elements (32 MB per operand), reference and approximation as analyze passes them.
//   build/tests/bench/bench_metrics [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <omp.h>

#include <array>
#include <random>
#include <utility>
#include <vector>

#include "sim/metrics/error_stats.hpp"

namespace {

using namespace fp8sim;

constexpr size_t kN = size_t{1} << 23;

const std::vector<float>& operand(int which) {
  static const std::array<std::vector<float>, 2> xy = [] {
    std::vector<float> x(kN), y(kN);
    std::mt19937 g(1);
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < kN; ++i) {
      x[i] = nd(g);
      y[i] = x[i] * (1.0f + 0.03f * nd(g));
    }
    return std::array<std::vector<float>, 2>{std::move(x), std::move(y)};
  }();
  return xy[which];
}

// state.range(0): threads (0 = all); `simd`: the AVX2 lanes where the CPU has them.
void error_stats(benchmark::State& state, bool simd) {
  const bool was = error_sums_simd();
  set_error_sums_simd(simd);
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(compute_error_stats(operand(0).data(), operand(1).data(), kN, threads));
  set_error_sums_simd(was);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kN));
  state.counters["threads"] = threads ? threads : omp_get_max_threads();
}

}  // namespace

BENCHMARK_CAPTURE(error_stats, avx2, true)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(error_stats, portable, false)->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
