#include "sim/optim/lowp_adamw.hpp"
#include "sim/common/mix.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "sim/common/check.hpp"
#include "sim/optim/lowp_group.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::optim {

uint64_t state_rounding_key(uint64_t user_seed, uint64_t param_index, uint64_t step, int moment) {
  uint64_t k = splitmix64_mix(user_seed + 0x9E3779B97F4A7C15ull);
  k = splitmix64_mix(k ^ (param_index * 0xD1B54A32D192ED03ull));
  k = splitmix64_mix(k ^ (step * 0xABC98388FB8FAC03ull));
  return splitmix64_mix(k ^ static_cast<uint64_t>(moment + 1));
}

void store_moment(MomentState& ms, const float* x, int64_t n, uint64_t rounding_key, int threads, uint64_t index_offset,
                  std::optional<float> tensor_amax) {
  ms.numel = n;
  if (ms.spec.is_fp32()) {
    ms.fp32.assign(x, x + n);
    return;
  }
  QuantSpec spec = *ms.spec.spec;
  if (spec.rounding == Rounding::Stochastic) spec.seed = rounding_key;
  const Shape shape{n};  // flattened: groups run along the whole parameter
  QuantizeOptions opts;
  opts.threads = threads;
  opts.index_offset = index_offset;
  opts.tensor_amax = tensor_amax;
  quantize_into(x, shape, spec, ms.q, opts);  // reuses the state's buffers step after step
  ms.q.spec.seed = ms.spec.spec->seed;        // keep the user's seed on record, not the derived key
}

void load_moment(const MomentState& ms, float* out, int threads) {
  if (ms.spec.is_fp32()) {
    if (ms.numel > 0) std::memcpy(out, ms.fp32.data(), static_cast<size_t>(ms.numel) * 4);  // an empty shard: nothing
    return;
  }
  dequantize(ms.q, out, threads);
}

ParamOptimState make_param_state(const StateRecipe& r, const float* m0, const float* v0, int64_t n,
                                 uint64_t param_index, uint64_t step, int threads) {
  FP8SIM_CHECK(n >= 0, "negative element count {}", n);
  ParamOptimState st;
  st.numel = n;
  st.m.spec = r.m;
  st.v.spec = r.v;
  const uint64_t seed_m = r.m.spec ? r.m.spec->seed : 0, seed_v = r.v.spec ? r.v.spec->seed : 0;
  store_moment(st.m, m0, n, state_rounding_key(seed_m, param_index, step, 0), threads);
  store_moment(st.v, v0, n, state_rounding_key(seed_v, param_index, step, 1), threads);
  return st;
}

void lowp_adamw_step(float* p, const float* g, ParamOptimState& st, const AdamwStepConsts& c, uint64_t param_index,
                     uint64_t step, LowpScratch& scratch, int threads, float* new_m, float* new_v) {
  const int64_t n = st.numel;
  scratch.m.resize(static_cast<size_t>(n));
  scratch.v.resize(static_cast<size_t>(n));
  // 1. dequantize
  load_moment(st.m, scratch.m.data(), threads);
  load_moment(st.v, scratch.v.data(), threads);
  // 2. update in fp32; p moves with the new unquantized moments
  adamw_step_fp32(p, g, scratch.m.data(), scratch.v.data(), static_cast<size_t>(n), c, threads);
  if (new_m) std::memcpy(new_m, scratch.m.data(), static_cast<size_t>(n) * 4);
  if (new_v) std::memcpy(new_v, scratch.v.data(), static_cast<size_t>(n) * 4);
  // 3. requantize (per-tensor specs take the amax of the whole new moment here)
  const uint64_t seed_m = st.m.spec.spec ? st.m.spec.spec->seed : 0, seed_v = st.v.spec.spec ? st.v.spec.spec->seed : 0;
  store_moment(st.m, scratch.m.data(), n, state_rounding_key(seed_m, param_index, step, 0), threads);
  store_moment(st.v, scratch.v.data(), n, state_rounding_key(seed_v, param_index, step, 1), threads);
}

namespace {

bool grouped_moment_ok(const MomentSpec& ms) {
  if (!ms.spec) return false;
  const QuantSpec& s = *ms.spec;
  return is_fp8(s.format) && s.granularity == Granularity::Group && !s.delayed.enabled() &&
         (s.expand == ExpandMode::None || s.expand == ExpandMode::Coat);
}

bool elementwise_moment(const MomentSpec& ms) {
  if (!ms.spec) return false;
  const QuantSpec& s = *ms.spec;
  if (s.is_passthrough()) return s.format == Format::BF16 || s.format == Format::FP16;
  return s.granularity == Granularity::Tensor && !s.delayed.enabled() && !s.has_expand() &&
         (is_fp8(s.format) || s.is_16bit());
}

}  // namespace

GroupMomentConsts group_moment_consts(const QuantSpec& s, uint64_t key) {
  GroupMomentConsts mc;
  mc.format = s.format == Format::E4M3 ? 0 : 1;
  mc.expand = s.expand == ExpandMode::Coat;
  mc.scale = scale_consts(s);
  mc.fmax_target = static_cast<float>(format_info(s.expand_target).max);
  mc.saturate = s.saturation == Saturation::Finite;
  mc.sat_bound = saturation_bound(s.format);
  mc.stochastic = s.rounding == Rounding::Stochastic;
  mc.key = mc.stochastic ? key : 0;
  return mc;
}

namespace {

// Bookkeeping totals of a range of groups (merged in any order: max and integer sums).
struct GroupRangeTotals {
  uint32_t amax_m = 0, amax_v = 0;
  int64_t sat_m = 0, sat_v = 0, under_m = 0, under_v = 0, nonf_m = 0, nonf_v = 0;
  void merge(const GroupRangeTotals& o) {
    amax_m = std::max(amax_m, o.amax_m);
    amax_v = std::max(amax_v, o.amax_v);
    sat_m += o.sat_m;
    sat_v += o.sat_v;
    under_m += o.under_m;
    under_v += o.under_v;
    nonf_m += o.nonf_m;
    nonf_v += o.nonf_v;
  }
};

// Groups [g0, g1) of the fused step. target_clones: an AVX2 copy of the element loops beside
// the baseline one, chosen at load time (same bits: no contraction, IEEE operations only).
__attribute__((target_clones("avx2", "default"))) void run_groups(int64_t g0, int64_t g1, int64_t G, int64_t n,
                                                                  float* p, const float* g, QuantizedTensor& qm,
                                                                  QuantizedTensor& qv, const AdamwStepConsts& c,
                                                                  const GroupMomentConsts& cm,
                                                                  const GroupMomentConsts& cv, float* m_buf,
                                                                  float* v_buf, GroupRangeTotals& t) {
  for (int64_t grp = g0; grp < g1; ++grp) {
    const int64_t i0 = grp * G;
    const int len = static_cast<int>(std::min(G, n - i0));
    GroupParams pm, pv;
    pm.e = cm.expand ? ExpandParams{qm.expand_k[grp], qm.expand_c[grp], qm.scales[grp]}
                     : ExpandParams{1.0f, 1.0f, qm.scales[grp]};
    pv.e = cv.expand ? ExpandParams{qv.expand_k[grp], qv.expand_c[grp], qv.scales[grp]}
                     : ExpandParams{1.0f, 1.0f, qv.scales[grp]};
    GroupCounts cnt_m, cnt_v;
    fp8_adamw_group_step(p + i0, g + i0, qm.codes.data() + i0, qv.codes.data() + i0, pm, pv, len,
                         static_cast<uint64_t>(i0), c, cm, cv, m_buf, v_buf, cnt_m, cnt_v);
    qm.scales[grp] = pm.e.s;
    qv.scales[grp] = pv.e.s;
    if (cm.expand) {
      qm.expand_k[grp] = pm.e.k;
      qm.expand_c[grp] = pm.e.c;
    }
    if (cv.expand) {
      qv.expand_k[grp] = pv.e.k;
      qv.expand_c[grp] = pv.e.c;
    }
    // quantize()'s bookkeeping: the tensor amax and the counts.
    for (int i = 0; i < len; ++i) {
      const uint32_t am = f32_bits(m_buf[i]) & 0x7FFFFFFFu;
      const uint32_t av = f32_bits(v_buf[i]) & 0x7FFFFFFFu;
      if (am < 0x7F800000u) t.amax_m = std::max(t.amax_m, am);
      if (av < 0x7F800000u) t.amax_v = std::max(t.amax_v, av);
      t.nonf_m += am >= 0x7F800000u ? 1 : 0;
      t.nonf_v += av >= 0x7F800000u ? 1 : 0;
    }
    t.sat_m += cnt_m.saturated;
    t.sat_v += cnt_v.saturated;
    t.under_m += cnt_m.underflow;
    t.under_v += cnt_v.underflow;
  }
}

}  // namespace

bool grouped_step_supported(const StateRecipe& r) {
  return grouped_moment_ok(r.m) && grouped_moment_ok(r.v) && r.m.spec->group_size == r.v.spec->group_size;
}

bool elementwise_step_supported(const StateRecipe& r) { return elementwise_moment(r.m) && elementwise_moment(r.v); }

void lowp_adamw_step_grouped(float* p, const float* g, ParamOptimState& st, const AdamwStepConsts& c,
                             uint64_t param_index, uint64_t step, int threads) {
  StateRecipe r;
  r.m = st.m.spec;
  r.v = st.v.spec;
  FP8SIM_CHECK(grouped_step_supported(r), "recipe {} cannot run the fused per-group step", r.to_string());
  const QuantSpec& sm = *st.m.spec.spec;
  const QuantSpec& sv = *st.v.spec.spec;
  const int64_t n = st.numel;
  const int64_t G = sm.group_size;
  const int64_t groups = (n + G - 1) / G;
  QuantizedTensor& qm = st.m.q;
  QuantizedTensor& qv = st.v.q;
  FP8SIM_CHECK(static_cast<int64_t>(qm.scales.size()) == groups && static_cast<int64_t>(qv.scales.size()) == groups,
               "state has {} / {} groups, expected {}", qm.scales.size(), qv.scales.size(), groups);
  const GroupMomentConsts cm = group_moment_consts(sm, state_rounding_key(sm.seed, param_index, step, 0));
  const GroupMomentConsts cv = group_moment_consts(sv, state_rounding_key(sv.seed, param_index, step, 1));
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  GroupRangeTotals tot;
  // Flatten the parameter, cut it into groups of G (the last one short), one group per task.
#pragma omp parallel num_threads(nt) if (groups > 64)
  {
    GroupRangeTotals mine;
    std::vector<float> m_buf(static_cast<size_t>(G)), v_buf(static_cast<size_t>(G));
    const int nthr = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t g0 = groups * me / nthr, g1 = groups * (me + 1) / nthr;
    run_groups(g0, g1, G, n, p, g, qm, qv, c, cm, cv, m_buf.data(), v_buf.data(), mine);
#pragma omp critical
    tot.merge(mine);
  }
  const uint32_t amax_m = tot.amax_m, amax_v = tot.amax_v;
  const int64_t sat_m = tot.sat_m, sat_v = tot.sat_v, under_m = tot.under_m, under_v = tot.under_v, nonf_m = tot.nonf_m,
                nonf_v = tot.nonf_v;
  qm.tensor_amax = f32_from_bits(amax_m);
  qv.tensor_amax = f32_from_bits(amax_v);
  qm.saturated_count = sat_m;
  qv.saturated_count = sat_v;
  qm.underflow_count = under_m;
  qv.underflow_count = under_v;
  qm.nonfinite_count = nonf_m;
  qv.nonfinite_count = nonf_v;
}

}  // namespace fp8sim::optim
