// Throughput of the tensor-core GEMM model (sim/gemm/tc_gemm.hpp) on one core and on all, with the
// ideal fp32 reference (Eigen, sim/gemm/gemm_ref.hpp) of the same shape as the peer in the same
// run. Counter GFLOP/s = 2 M N K / time.
//   build/tests/bench/bench_gemm_tc [--benchmark_filter=...] [--benchmark_format=json]
// Arguments: (K, threads); M = N = 256, the random family of sim/gemm/tc_cases.hpp.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "sim/gemm/gemm_ref.hpp"
#include "sim/gemm/tc_cases.hpp"
#include "sim/gemm/tc_gemm.hpp"

namespace {

using fp8sim::Format;
using namespace fp8sim::gemm;

TcGemmCase make_case(Format f, int scaling, bool fast, int64_t k) {
  TcGemmCase c;
  c.config.x_format = f;
  c.config.w_format = f;
  c.config.scaling = scaling;
  c.config.fast_accum = fast;
  c.m = c.n = 256;
  c.k = k;
  c.family = TcFamily::Random;
  c.seed = 5;
  return c;
}

void run(benchmark::State& state, Format f, int scaling, bool fast) {
  const TcGemmCase c = make_case(f, scaling, fast, state.range(0));
  const TcGemmOperands o = make_tc_gemm_operands(c);
  std::vector<float> y(static_cast<size_t>(c.m * c.n));
  omp_set_num_threads(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    tc_gemm(o.x.data(), o.w.data(), o.x_scales.data(), o.w_scales.data(), y.data(), c.m, c.n, c.k, c.config);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * c.m * c.n * c.k * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = static_cast<double>(state.range(1));
}

void BM_tc_e4m3_promote128(benchmark::State& s) { run(s, Format::E4M3, 1, false); }
void BM_tc_e4m3_fast(benchmark::State& s) { run(s, Format::E4M3, 1, true); }
void BM_tc_e4m3_block(benchmark::State& s) { run(s, Format::E4M3, 3, false); }
void BM_tc_bf16(benchmark::State& s) { run(s, Format::BF16, 0, false); }

void BM_ideal_fp32_eigen(benchmark::State& state) {
  const TcGemmCase c = make_case(Format::E4M3, 1, false, state.range(0));
  const TcGemmOperands o = make_tc_gemm_operands(c);
  std::vector<float> y(static_cast<size_t>(c.m * c.n));
  omp_set_num_threads(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    gemm_ref_f32(o.x_f32.data(), o.w_f32.data(), y.data(), c.m, c.n, c.k);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * c.m * c.n * c.k * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
  state.counters["threads"] = static_cast<double>(state.range(1));
}

void args(benchmark::internal::Benchmark* b) {
  const int all = omp_get_num_procs();
  b->Args({4096, 1});
  if (all > 1) b->Args({4096, all});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5)->ReportAggregatesOnly(true);
}

BENCHMARK(BM_tc_e4m3_promote128)->Apply(args);
BENCHMARK(BM_tc_e4m3_fast)->Apply(args);
BENCHMARK(BM_tc_e4m3_block)->Apply(args);
BENCHMARK(BM_tc_bf16)->Apply(args);
BENCHMARK(BM_ideal_fp32_eigen)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
