// AdamW step throughput on the CPU, in parameters per second, per state recipe (Google
// Benchmark).
//   build/tests/bench/bench_optim [--benchmark_filter=coat] [--benchmark_format=json]
// Arguments: (parameters, threads). One iteration = one optimizer step of one flattened
// parameter of that many elements: dequantize m and v, update p, m, v in fp32, requantize.
// Bytes counted per parameter: p read + written (8), g read (4), m and v read + written
// (2 x 2 x bytes per stored element; metadata ignored), the traffic a fused kernel needs.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/optim/lowp_adamw.hpp"

namespace {

using namespace fp8sim;
using namespace fp8sim::optim;

struct Data {
  std::vector<float> p, g, m, v;
};

const Data& data(size_t n) {
  static Data d;
  if (d.p.size() == n) return d;
  d = Data{};
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto uni = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return ((s >> 11) + 0.5) * 0x1p-53;
  };
  for (size_t i = 0; i < n; ++i) {
    // |g| log-uniform over 6 decades, m ~ g, v ~ g^2: the spread DE exists for.
    const double mag = std::pow(10.0, -8 + 6 * uni());
    const double sign = uni() < 0.5 ? -1 : 1;
    d.p.push_back(static_cast<float>(0.05 * (uni() - 0.5)));
    d.g.push_back(static_cast<float>(sign * mag));
    d.m.push_back(static_cast<float>(-0.3 * sign * mag * uni()));
    d.v.push_back(static_cast<float>(mag * mag * (0.2 + uni())));
  }
  return d;
}

AdamwHyper hyper() {
  AdamwHyper h;
  h.lr = 3e-4;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  return h;
}

double state_bytes_per_param(const StateRecipe& r) {
  auto b = [](const MomentSpec& ms) { return ms.is_fp32() ? 4.0 : ms.spec->code_bytes_per_element(); };
  return 12.0 + 2.0 * (b(r.m) + b(r.v));
}

// path: 0 = lowp_adamw_step (three phases), 1 = lowp_adamw_step_grouped (fused per group),
// 2 = adamw_step_fp32 directly (fp32 recipe only).
void run(benchmark::State& state, const char* recipe, int path, UpdateRule rule) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const Data& d = data(static_cast<size_t>(n));
  const StateRecipe r = StateRecipe::parse(recipe);
  ParamOptimState st = make_param_state(r, d.m.data(), d.v.data(), n, 0, 100, threads);
  std::vector<float> p = d.p, m = d.m, v = d.v;
  LowpScratch scratch;
  int64_t step = 100;
  for (auto _ : state) {
    ++step;
    const auto c = make_step_consts(hyper(), step, rule);
    if (path == 2) adamw_step_fp32(p.data(), d.g.data(), m.data(), v.data(), static_cast<size_t>(n), c, threads);
    else if (path == 1) lowp_adamw_step_grouped(p.data(), d.g.data(), st, c, 0, static_cast<uint64_t>(step), threads);
    else lowp_adamw_step(p.data(), d.g.data(), st, c, 0, static_cast<uint64_t>(step), scratch, threads);
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations() * n) * state_bytes_per_param(r)));
  state.counters["omp_threads"] = threads;
}

void args(benchmark::internal::Benchmark* b) {
  const int all = omp_get_num_procs();
  b->Args({1 << 22, 1});
  if (all > 1) b->Args({1 << 22, all});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5)->Repetitions(3)->ReportAggregatesOnly(true);
}

#define FP8SIM_BENCH(name, recipe, path, rule)                   \
  void name(benchmark::State& s) { run(s, recipe, path, rule); } \
  BENCHMARK(name)->Apply(args)

FP8SIM_BENCH(BM_adamw_fp32_torch_rule, "fp32", 2, UpdateRule::Torch);
FP8SIM_BENCH(BM_adamw_fp32_coat_rule, "fp32", 2, UpdateRule::Coat);
FP8SIM_BENCH(BM_adamw_bf16, "bf16", 0, UpdateRule::Coat);
FP8SIM_BENCH(BM_adamw_coat_three_phase, "coat", 0, UpdateRule::Coat);
FP8SIM_BENCH(BM_adamw_coat_grouped, "coat", 1, UpdateRule::Coat);
FP8SIM_BENCH(BM_adamw_coat_noexpand_grouped, "coat-noexpand", 1, UpdateRule::Coat);
FP8SIM_BENCH(BM_adamw_te_fp8, "te-fp8", 0, UpdateRule::Coat);
FP8SIM_BENCH(BM_adamw_fp8lm, "fp8lm", 0, UpdateRule::Coat);

}  // namespace

BENCHMARK_MAIN();
