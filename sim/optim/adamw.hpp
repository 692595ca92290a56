#pragma once
// AdamW with fp32 states: the reference every low-precision recipe is compared against, and
// the replay that must reproduce torch.optim.AdamW's captured weights (adamw_math.hpp says
// operation by operation how).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/optim/adamw_math.hpp"

namespace fp8sim::optim {

// Hyper-parameters of one parameter group at one step, as the user gave them to torch (doubles,
// because torch computes its per-step scalars in Python doubles).
struct AdamwHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Throws fp8sim::Error naming the bad field (lr < 0, betas outside [0, 1), eps < 0, wd < 0,
// anything non-finite).
void validate_hyper(const AdamwHyper& h);

// The fp32 constants of step `step` (the optimizer's step count AFTER incrementing it, so the
// first step is 1) under `rule`. Host only: uses libm pow in double (see adamw_math.hpp).
AdamwStepConsts make_step_consts(const AdamwHyper& h, int64_t step, UpdateRule rule);

UpdateRule parse_update_rule(std::string_view s);  // torch|coat; UsageError otherwise
std::string_view update_rule_name(UpdateRule r);

// One AdamW step with fp32 states over n elements, in place. OpenMP over chunks of elements
// (the result does not depend on the thread count: every element is independent).
void adamw_step_fp32(float* p, const float* g, float* m, float* v, size_t n, const AdamwStepConsts& c, int threads = 0);

}  // namespace fp8sim::optim
