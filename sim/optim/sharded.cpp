#include "sim/optim/sharded.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "sim/common/check.hpp"

namespace fp8sim::optim {

std::vector<ShardRange> fsdp2_shards(std::span<const int64_t> shape, int64_t ranks) {
  FP8SIM_REQUIRE(ranks >= 1, "shards need at least one rank, not {}", ranks);
  int64_t rows = shape.empty() ? 1 : shape[0], row = 1;
  for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
  FP8SIM_REQUIRE(rows >= 0 && row >= 0, "a parameter's dimensions must be >= 0");
  const int64_t chunk = (rows + ranks - 1) / ranks;
  std::vector<ShardRange> out;
  for (int64_t r = 0; r < ranks; ++r) {
    const int64_t r0 = std::min(rows, r * chunk), r1 = std::min(rows, (r + 1) * chunk);
    out.push_back({r0 * row, r1 * row});
  }
  return out;
}

namespace {

// The moment's scale depends on the whole tensor's amax (one scale per tensor, or NVFP4's
// per-tensor fp32 scale above its E4M3 group scales): the ranks must agree on it.
bool per_tensor(const MomentSpec& ms) {
  return ms.spec && !ms.spec->is_passthrough() &&
         (ms.spec->granularity == Granularity::Tensor || ms.spec->scale == ScaleMode::E4M3);
}

std::string moment_problem(const MomentSpec& ms, const char* name, const std::vector<ShardRange>& shards) {
  if (!ms.spec || ms.spec->is_passthrough()) return "";
  const QuantSpec& s = *ms.spec;
  if (s.delayed.enabled()) return fmt::format("{} uses delayed scaling, whose amax history is not sharded", name);
  if (s.rht > 0 && per_tensor(ms))
    return fmt::format(
        "{} applies a Hadamard transform before a per-tensor scale, which takes no all-reduced amax "
        "(not sharded)",
        name);
  if (s.granularity == Granularity::Tensor)
    return s.has_expand() ? fmt::format(
                                "{} expands its dynamic range per tensor, which needs the whole moment's "
                                "minimum beside its maximum (not sharded)",
                                name)
                          : "";
  if (s.granularity != Granularity::Group)
    return fmt::format("{} is quantized per {}, which is not sharded (per tensor or in 1xG groups)", name,
                       s.to_string());
  for (size_t k = 0; k < shards.size(); ++k)
    if (shards[k].size() > 0 && shards[k].begin % s.group_size != 0)
      return fmt::format(
          "rank {}'s shard starts at element {}, inside a group of {} of {} (groups must not straddle two ranks)", k,
          shards[k].begin, s.group_size, name);
  return "";
}

// The max |x| over the finite values of every shard: the all-reduce (max) of the ranks' amax.
float finite_amax(const std::vector<std::vector<float>>& shards) {
  float a = 0.0f;
  for (const auto& x : shards)
    for (const float v : x)
      if (std::isfinite(v)) a = std::max(a, std::fabs(v));
  return a;
}

void check_shards(const std::vector<ShardRange>& shards) {
  FP8SIM_REQUIRE(!shards.empty() && shards.front().begin == 0, "shards must start at element 0");
  for (size_t k = 0; k < shards.size(); ++k) {
    FP8SIM_REQUIRE(shards[k].end >= shards[k].begin, "shard {} ends before it begins", k);
    if (k)
      FP8SIM_REQUIRE(shards[k].begin == shards[k - 1].end, "shard {} does not start where shard {} ends", k, k - 1);
  }
}

// Every rank stores its shard of the new moments ms, vs: per-tensor moments with the amax
// all-reduced over the ranks, every code keyed on its global element index.
void store_shards(std::vector<ParamOptimState>& states, const std::vector<std::vector<float>>& ms,
                  const std::vector<std::vector<float>>& vs, const std::vector<ShardRange>& shards,
                  const StateRecipe& r, uint64_t param_index, uint64_t step, int threads) {
  const std::optional<float> am = per_tensor(r.m) ? std::optional<float>(finite_amax(ms)) : std::nullopt;
  const std::optional<float> av = per_tensor(r.v) ? std::optional<float>(finite_amax(vs)) : std::nullopt;
  const uint64_t seed_m = r.m.spec ? r.m.spec->seed : 0, seed_v = r.v.spec ? r.v.spec->seed : 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    const int64_t nk = shards[k].size();
    const uint64_t off = static_cast<uint64_t>(shards[k].begin);
    store_moment(states[k].m, ms[k].data(), nk, state_rounding_key(seed_m, param_index, step, 0), threads, off, am);
    store_moment(states[k].v, vs[k].data(), nk, state_rounding_key(seed_v, param_index, step, 1), threads, off, av);
  }
}

}  // namespace

std::string shard_step_problem(const StateRecipe& r, const std::vector<ShardRange>& shards) {
  std::string p = moment_problem(r.m, "exp_avg", shards);
  return p.empty() ? moment_problem(r.v, "exp_avg_sq", shards) : p;
}

std::vector<ParamOptimState> make_shard_states(const StateRecipe& r, const float* m0, const float* v0, int64_t n,
                                               const std::vector<ShardRange>& shards, uint64_t param_index,
                                               uint64_t step, int threads) {
  check_shards(shards);
  FP8SIM_REQUIRE(shards.back().end == n, "shards cover {} elements of {}", shards.back().end, n);
  const std::string problem = shard_step_problem(r, shards);
  FP8SIM_REQUIRE(problem.empty(), "{}", problem);
  std::vector<std::vector<float>> ms, vs;
  for (const auto& s : shards) {
    ms.emplace_back(m0 + s.begin, m0 + s.end);
    vs.emplace_back(v0 + s.begin, v0 + s.end);
  }
  std::vector<ParamOptimState> out(shards.size());
  for (size_t k = 0; k < shards.size(); ++k) {
    out[k].numel = shards[k].size();
    out[k].m.spec = r.m;
    out[k].v.spec = r.v;
  }
  store_shards(out, ms, vs, shards, r, param_index, step, threads);
  return out;
}

void sharded_lowp_adamw_step(float* p, const float* g, std::vector<ParamOptimState>& states,
                             const std::vector<ShardRange>& shards, const AdamwStepConsts& c, uint64_t param_index,
                             uint64_t step, int threads) {
  check_shards(shards);
  FP8SIM_REQUIRE(states.size() == shards.size(), "{} shard states for {} shards", states.size(), shards.size());
  StateRecipe r;
  r.m = states.front().m.spec;
  r.v = states.front().v.spec;
  const std::string problem = shard_step_problem(r, shards);
  FP8SIM_REQUIRE(problem.empty(), "{}", problem);
  // 1. every rank: dequantize its moments and update its range of p with the new unquantized ones
  std::vector<std::vector<float>> ms(shards.size()), vs(shards.size());
  for (size_t k = 0; k < shards.size(); ++k) {
    const int64_t nk = shards[k].size();
    FP8SIM_REQUIRE(states[k].numel == nk, "shard {} state holds {} elements, its range {}", k, states[k].numel, nk);
    ms[k].resize(static_cast<size_t>(nk));
    vs[k].resize(static_cast<size_t>(nk));
    load_moment(states[k].m, ms[k].data(), threads);
    load_moment(states[k].v, vs[k].data(), threads);
    adamw_step_fp32(p + shards[k].begin, g + shards[k].begin, ms[k].data(), vs[k].data(), static_cast<size_t>(nk), c,
                    threads);
  }
  // 2. every rank: requantize (per-tensor moments with the ranks' amax all-reduced)
  store_shards(states, ms, vs, shards, r, param_index, step, threads);
}

}  // namespace fp8sim::optim
