#pragma once
// Optimizer-state replay over a captured window of grads (`fp8sim optim`):
//
// * Table 1 (COAT, Xi et al., ICLR 2025): a snapshot of captured fp32 moments (every
//   parameter of the model at one step; add_state), quantized under {E4M3, E4M3+Expand, E5M2, E5M2+Expand} for each
//   moment (1x128 groups of the flattened parameter; +Expand = Dynamic Range Expansion in COAT's mode, ratio bound from
//   the storage format), and the MSE of the AdamW update direction
//       r = (m / bc1) / (sqrt(v / bc2) + eps)          bc1 = 1 - b1^t, bc2 = 1 - b2^t
//   between the quantized and the fp32 moments, over every element of every parameter (each
//   element counts once; computed in double from the fp32 / dequantized values). eps is the
//   trace's AdamW eps, so v = 0 needs no special case: r = 0 where m = 0, and where a quantized
//   v flushed to 0 under a nonzero m, r = m/(bc1*eps) -- what AdamW would apply (the flush
//   fractions are reported beside the matrix).
// * Drift: from the window start, N steps with fp32 moments and with each recipe, the same
//   captured grads fed to every run (teacher forcing: the grads are not recomputed at the
//   drifted weights), lockstep; per step the parameters' relative L2 distance from the fp32
//   run, the cosine between each run's update and the fp32 run's, and the state errors.
// * fp32 replay: torch's own rule (adamw_math.hpp) over the whole window against the captured
//   end-of-window weights (fp32_replay_max_rel_err).
// * Memory: exact bytes per parameter of both moments (codes + metadata) under each recipe.
//
// Everything is elementwise per parameter, so parameters are streamed one at a time
// (OptimReplay::add_param) and only sums are kept; sums are taken in double in a fixed order
// (chunks of 4096 elements, combined sequentially), so the JSON does not depend on threads.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/state_recipe.hpp"

namespace fp8sim::optim {

// One parameter's window: everything the replay needs, flattened (numel = product of shape).
struct ParamWindow {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> p0;                  // weights before the first window step
  std::vector<float> m0, v0;              // exp_avg, exp_avg_sq before the first window step
  std::vector<std::vector<float>> grads;  // grads of the window steps, in order
  std::vector<float> p_end;               // weights after the last window step (empty: unknown)
  AdamwHyper hyper;                       // betas, eps, weight_decay (lr: see `lr`)
  std::vector<double> lr;                 // lr of each window step
  int64_t numel() const { return static_cast<int64_t>(p0.size()); }
};

struct WindowMeta {
  std::string source;          // e.g. the trace path
  int64_t step0 = 0;           // optimizer step count at the window start (0: fresh moments)
  int64_t steps = 0;           // grads in the window
  std::string implementation;  // which torch implementation produced the trace, if known
};

struct OptimOptions {
  std::vector<StateRecipe> recipes;       // drift + memory; empty: default_state_recipes()
  int steps = 0;                          // drift steps; 0 = the whole window
  UpdateRule rule = UpdateRule::Coat;     // update rule of the drift runs (fp32 baseline included)
  Rounding rounding = Rounding::Nearest;  // FP8 moments of every recipe
  uint64_t seed = 0;                      // stochastic rounding seed
  bool table1 = true;
  std::optional<int64_t> table1_step;  // trace step whose moments feed Table 1 (default: see optim_replay)
  bool drift = true;
  int threads = 0;  // 0 = OpenMP default
  // Called after each parameter with (elements done, elements total).
  std::function<void(double, double)> progress;
};

// coat, coat-noexpand, te-fp8, fp8lm, bf16 (fp32 is the baseline, always run).
std::vector<StateRecipe> default_state_recipes();

// Table 1 row/column labels in the paper's order and the QuantSpec each stands for.
struct Table1Format {
  const char* label;  // "E4M3", "E4M3+Expand", "E5M2", "E5M2+Expand"
  const char* spec;   // "e4m3:g128", "e4m3:g128:de=coat", ...
};
const std::vector<Table1Format>& table1_formats();
// COAT's published Table 1 (Xi et al., ICLR 2025), keyed like our `table1`.
Json paper_table1();

class OptimReplay {
 public:
  OptimReplay(const WindowMeta& meta, const OptimOptions& opts);
  ~OptimReplay();
  OptimReplay(const OptimReplay&) = delete;
  OptimReplay& operator=(const OptimReplay&) = delete;

  // Table 1 and the memory table: the fp32 moments of one parameter after `adamw_step` updates
  // (the step count that sets the bias corrections), with the AdamW hyper-parameters (lr unused).
  // Call it for every parameter of the snapshot the table is about (all of the model's).
  void add_state(const std::string& name, const std::vector<float>& m, const std::vector<float>& v,
                 const AdamwHyper& hyper, int64_t adamw_step);
  // Drift and the fp32 replay: one parameter of the grad window. Validates (throws
  // fp8sim::Error naming the parameter when a shape or length does not match, or values are not
  // finite). Without any add_state call, the memory table counts the window's parameters.
  void add_param(const ParamWindow& w);
  // The whole document (what `fp8sim optim --json` writes).
  Json finish() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the trace and runs OptimReplay over it (sim/optim/replay_trace.cpp): Table 1 and memory
// on the step with the most captured moments (ties: the latest; or opts.table1_step), drift and
// the fp32 replay on the grad window (root attribute grad_window = [a, b]: weights and moments
// at step a, grads of steps a..b, weights after update b at step b+1). Throws fp8sim::Error with
// one line for a trace without a grad window or without the hyper-parameters.
Json optim_replay(const std::string& trace_path, const OptimOptions& opts);

}  // namespace fp8sim::optim
