#include "sim/optim/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "sim/common/check.hpp"

namespace fp8sim::optim {

void validate_hyper(const AdamwHyper& h) {
  FP8SIM_REQUIRE(std::isfinite(h.lr) && h.lr >= 0, "AdamW lr must be finite and >= 0, got {}", h.lr);
  FP8SIM_REQUIRE(std::isfinite(h.beta1) && h.beta1 >= 0 && h.beta1 < 1, "AdamW beta1 must be in [0, 1), got {}",
                 h.beta1);
  FP8SIM_REQUIRE(std::isfinite(h.beta2) && h.beta2 >= 0 && h.beta2 < 1, "AdamW beta2 must be in [0, 1), got {}",
                 h.beta2);
  FP8SIM_REQUIRE(std::isfinite(h.eps) && h.eps >= 0, "AdamW eps must be finite and >= 0, got {}", h.eps);
  FP8SIM_REQUIRE(std::isfinite(h.weight_decay) && h.weight_decay >= 0,
                 "AdamW weight_decay must be finite and >= 0, got {}", h.weight_decay);
}

AdamwStepConsts make_step_consts(const AdamwHyper& h, int64_t step, UpdateRule rule) {
  FP8SIM_REQUIRE(step >= 1, "AdamW step count must be >= 1 (the first step is 1), got {}", step);
  validate_hyper(h);
  AdamwStepConsts c{};
  c.rule = rule;
  c.eps = static_cast<float>(h.eps);
  c.beta1 = static_cast<float>(h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.lr = static_cast<float>(h.lr);
  c.wd = static_cast<float>(h.weight_decay);
  const double t = static_cast<double>(step);
  if (rule == UpdateRule::Torch) {
    // torch: Python doubles, each handed to a float kernel as one scalar (rounded once).
    // bias_correction2 ** 0.5 is Python's pow(x, 0.5), not sqrt: keep it.
    const double bc1 = 1.0 - std::pow(h.beta1, t);
    const double bc2 = 1.0 - std::pow(h.beta2, t);
    c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
    c.neg_step_size = static_cast<float>(-(h.lr / bc1));
    c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
    c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
    c.bc2_sqrt = static_cast<float>(std::pow(bc2, 0.5));
    c.bc1 = static_cast<float>(bc1);  // informational under this rule
  } else {
    // COAT: fp32 throughout; powf(beta, step) taken as the correctly rounded fp32 power of the
    // fp32 beta (the double result rounded once), since libdevice's powf cannot be reproduced.
    c.one_minus_beta1 = 1.0f - c.beta1;
    c.one_minus_beta2 = 1.0f - c.beta2;
    c.bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(c.beta1), t));
    c.bc2_sqrt = std::sqrt(1.0f - static_cast<float>(std::pow(static_cast<double>(c.beta2), t)));
    c.decay = 1.0f;       // unused under this rule
    c.neg_step_size = 0;  // unused under this rule
  }
  return c;
}

UpdateRule parse_update_rule(std::string_view s) {
  if (s == "torch") return UpdateRule::Torch;
  if (s == "coat") return UpdateRule::Coat;
  throw UsageError(fmt::format("unknown AdamW update rule '{}' (valid: torch, coat)", s));
}

std::string_view update_rule_name(UpdateRule r) { return r == UpdateRule::Torch ? "torch" : "coat"; }

namespace {

// The element loop, one instantiation per rule so the loop has no branch. target_clones builds
// a Haswell copy (AVX2 + FMA: fma_rn becomes one vfmadd, still a single rounding) beside the
// baseline one; both give the same bits.
template <UpdateRule R>
__attribute__((target_clones("arch=haswell", "default"))) void step_range(float* p, const float* g, float* m, float* v,
                                                                          int64_t i0, int64_t i1,
                                                                          const AdamwStepConsts& c) {
  for (int64_t i = i0; i < i1; ++i) {
    if constexpr (R == UpdateRule::Torch) adamw_element_torch(p[i], g[i], m[i], v[i], c);
    else adamw_element_coat(p[i], g[i], m[i], v[i], c);
  }
}

void step_range_rule(float* p, const float* g, float* m, float* v, int64_t i0, int64_t i1, const AdamwStepConsts& c) {
  if (c.rule == UpdateRule::Torch) step_range<UpdateRule::Torch>(p, g, m, v, i0, i1, c);
  else step_range<UpdateRule::Coat>(p, g, m, v, i0, i1, c);
}

}  // namespace

void adamw_step_fp32(float* p, const float* g, float* m, float* v, size_t n, const AdamwStepConsts& c, int threads) {
  const int64_t count = static_cast<int64_t>(n);
  // Small tensors: the OpenMP fork costs more than the work.
  if (n < (size_t{1} << 15)) {
    step_range_rule(p, g, m, v, 0, count, c);
    return;
  }
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t ch = 0; ch < chunks; ++ch)
    step_range_rule(p, g, m, v, ch * kChunk, std::min(count, (ch + 1) * kChunk), c);
}

}  // namespace fp8sim::optim
