#pragma once
// One parameter's drift runs (`fp8sim optim`, replay.hpp): from the window start, the fp32 run and
// each state recipe's run take the same captured grads step after step, and per step fourteen
// sums over the parameter's elements say how far each recipe's weights and moments are from the
// fp32 run's. This header is what the CPU (replay.cpp) and a device (gpu/optim/drift.hpp) share:
// the request, the sums' layout and the terms one element adds, so both give the same bits.
//
// Order of the sums: the elements are cut into chunks of kDriftChunk, each chunk's terms are added
// in element order (starting from 0.0), and the chunks' sums are added in chunk order.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/common/hd.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/state_recipe.hpp"

namespace fp8sim::optim {

inline constexpr int64_t kDriftChunk = 4096;

// The sums of one recipe at one step (indices into DriftSums).
enum DriftSum : int {
  kDiff2,  // sum (p_r - p_fp32)^2
  kBase2,  // sum p_fp32^2
  kDisp2,  // sum (p_fp32 - p0)^2
  kDot,    // sum du_r * du_fp32 (this step's updates)
  kUr2,    // sum du_r^2
  kUb2,    // sum du_fp32^2
  kEm2,    // sum (m_r_stored - m_fp32)^2
  kMb2,    // sum m_fp32^2
  kEv2,    // sum (v_r_stored - v_fp32)^2
  kVb2,    // sum v_fp32^2
  kMq2,    // sum (m_r_stored - m_r_new)^2  (this step's quantization error of m)
  kMn2,    // sum m_r_new^2
  kVq2,    // sum (v_r_stored - v_r_new)^2
  kVn2,    // sum v_r_new^2
  kDriftSums
};
using DriftSums = std::array<double, kDriftSums>;

// One element's terms, in DriftSum order: p, p_prev the recipe's weight after and before the
// step, b, b_prev the fp32 run's, p0 the window start's; ms, vs the recipe's stored (dequantized)
// moments after the step, mn, vn its new moments before quantization; mb, vb the fp32 run's.
FP8SIM_HD void drift_terms(float p, float p_prev, float b, float b_prev, float p0, float ms, float vs, float mn,
                           float vn, float mb, float vb, double* t) {
  const double pd = p, bd = b;
  const double ur = pd - p_prev, ub = bd - b_prev, disp = bd - p0;
  const double msd = ms, vsd = vs;
  t[kDiff2] = (pd - bd) * (pd - bd);
  t[kBase2] = bd * bd;
  t[kDisp2] = disp * disp;
  t[kDot] = ur * ub;
  t[kUr2] = ur * ur;
  t[kUb2] = ub * ub;
  t[kEm2] = (msd - mb) * (msd - mb);
  t[kMb2] = static_cast<double>(mb) * mb;
  t[kEv2] = (vsd - vb) * (vsd - vb);
  t[kVb2] = static_cast<double>(vb) * vb;
  t[kMq2] = (msd - mn) * (msd - mn);
  t[kMn2] = static_cast<double>(mn) * mn;
  t[kVq2] = (vsd - vn) * (vsd - vn);
  t[kVn2] = static_cast<double>(vn) * vn;
}

// One parameter's drift: n elements, the window start's weights and moments, one grad and one lr
// per step (at least `steps` of each), the recipes (rounding already applied). Step k (0-based)
// updates with make_step_consts(hyper with lr[k], step0 + k + 1, rule); `index` is the parameter's
// place among the window's (stochastic rounding's keys).
struct DriftRequest {
  int64_t n = 0;
  const float* p0 = nullptr;
  const float* m0 = nullptr;
  const float* v0 = nullptr;
  std::vector<const float*> grads;
  std::span<const double> lr;
  AdamwHyper hyper;
  std::span<const StateRecipe> recipes;
  int steps = 0;
  int64_t step0 = 0;
  UpdateRule rule = UpdateRule::Coat;
  uint64_t index = 0;
  int threads = 0;  // host threads, where the device's implementation uses any
};

// The result: the sums of recipe r at step k at [r * steps + k].
using DriftResult = std::vector<DriftSums>;

// The drift on the CPU (OpenMP over chunks; the result does not depend on the thread count).
DriftResult drift_cpu(const DriftRequest& rq);

}  // namespace fp8sim::optim
