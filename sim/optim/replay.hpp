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
// (chunks of 4096 elements, combined sequentially), so the result does not depend on threads.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/common/buffer.hpp"
#include "sim/common/json.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/direction.hpp"
#include "sim/optim/drift.hpp"
#include "sim/optim/state_recipe.hpp"

namespace fp8sim::trace {
class TraceReader;  // sim/trace/trace.hpp
}

namespace fp8sim::optim {

// One parameter's window: everything the replay needs, flattened (numel = product of shape).
struct ParamWindow {
  std::string name;
  std::vector<int64_t> shape;
  Buffer<float> p0;                  // weights before the first window step
  Buffer<float> m0, v0;              // exp_avg, exp_avg_sq before the first window step
  std::vector<Buffer<float>> grads;  // grads of the window steps, in order
  Buffer<float> p_end;               // weights after the last window step (empty: unknown)
  AdamwHyper hyper;                  // betas, eps, weight_decay (lr: see `lr`)
  std::vector<double> lr;            // lr of each window step
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
  // Also Table 1's direction MSE with both moments in the 4- and 6-bit formats (table1_lowbit).
  bool table1_lowbit = false;
  std::optional<int64_t> table1_step;  // trace step whose moments feed Table 1 (default: see optim_replay)
  bool drift = true;
  int threads = 0;  // 0 = OpenMP default
  // Called after each parameter with (elements done, elements total).
  std::function<void(double, double)> progress;
  // Where set, each window parameter's drift runs go to this device (`optim --device cuda`), which
  // returns the sums the CPU would; a parameter it throws UsageError for runs on the CPU.
  std::function<DriftResult(const DriftRequest&)> drift_device;
  // The same for Table 1's sums of each captured moment pair (and table1_lowbit's): the device
  // returns direction_cpu's sums or throws UsageError.
  std::function<std::vector<double>(const DirectionRequest&)> direction_device;
};

// coat, coat-noexpand, te-fp8, fp8lm, bf16 (fp32 is the baseline, always run).
std::vector<StateRecipe> default_state_recipes();

// Table 1 row/column labels in the paper's order and the QuantSpec each stands for.
struct Table1Format {
  const char* label;  // "E4M3", "E4M3+Expand", "E5M2", "E5M2+Expand"
  const char* spec;   // "e4m3:g128", "e4m3:g128:de=coat", ...
};
const std::vector<Table1Format>& table1_formats();
// A Table 1 matrix: [first moment's format][second moment's format], both in table1_formats()
// order; written as {row label: {column label: value}}.
using Table1Matrix = std::array<std::array<double, 4>, 4>;
// A value per format of table1_formats(); written as {label: value}.
using Table1Row = std::array<double, 4>;
Json table1_json(const Table1Matrix& m);
// COAT's published Table 1 (Xi et al., ICLR 2025), laid out like our `table1`.
Table1Matrix paper_table1();

struct DroppedParam {
  std::string name;
  int64_t missing_grad_step = 0;  // the first window step without its grad
  Json to_json() const;
};

// The grad window the drift and the fp32 replay ran over.
struct WindowSummary {
  int64_t step0 = 0;
  int64_t steps = 0;        // 0 without a grad window
  int64_t drift_steps = 0;  // 0 without a grad window
  int64_t params = 0;
  int64_t elements = 0;
  std::string implementation;
  // Window parameters left out because a grad is missing (optim_replay only, on a trace with
  // a grad window).
  std::optional<std::vector<DroppedParam>> dropped_params;
  Json to_json() const;
};

// The moments snapshot Table 1 and the memory table are about.
struct MomentsSummary {
  int64_t params = 0;
  int64_t elements = 0;
  std::optional<int64_t> adamw_step;  // none when the parameters' step counts differ
  Json to_json() const;
};

// What each metric of the document means (constant texts).
struct OptimDefinitions {
  std::string table1 =
      "MSE over all elements of all parameters of r = (m/bc1)/(sqrt(v/bc2)+eps), bc1 = 1-b1^t, bc2 = 1-b2^t with t "
      "the moments' AdamW step count, between the captured fp32 moments and the same moments quantized (1x128 groups "
      "of the flattened parameter; +Expand = DE coat mode), computed in double; eps = the trace's AdamW eps, so v = 0 "
      "needs no special case (a v flushed to 0 under a nonzero m gives m/(bc1*eps), what AdamW would apply)";
  std::string param_rel_l2 = "||p_recipe - p_fp32|| / ||p_fp32|| over all parameters after the step";
  std::string displacement_rel_err = "||p_recipe - p_fp32|| / ||p_fp32 - p_window_start||";
  std::string update_cosine =
      "cosine between this step's update (p_t - p_{t-1}) of the recipe's run and of the fp32 run";
  std::string m_nmse =
      "||m_stored - m_fp32||^2 / ||m_fp32||^2, m_stored = the recipe's dequantized state after the step";
  std::string v_nmse = "as m_nmse for the second moment";
  std::string m_quant_nmse = "||m_stored - m_new||^2 / ||m_new||^2: this step's requantization error alone";
  std::string v_quant_nmse = "as m_quant_nmse for the second moment";
  std::string fp32_replay_max_rel_err =
      "max over elements of |p_replay - p_captured| / |p_captured| after the whole window, fp32 moments, torch's rule";
  std::string bytes_per_param = "exact bytes of m and v (codes + scales + DE k, c) divided by the parameter count";
  Json to_json() const;
};

struct Table1Details {
  std::optional<int64_t> adamw_step;  // none when the parameters' step counts differ
  int64_t params = 0;
  int64_t elements = 0;
  double mean_r2 = 0;  // mean of r^2 with the fp32 moments
  std::array<std::string, 4> specs;
  Table1Row m_nmse{}, v_nmse{};
  Table1Row m_flushed_frac{}, v_flushed_frac{};  // nonzero moments whose quantized value is 0
  // Table 1 over the elements whose nonzero v did not flush to 0.
  Table1Matrix mse_without_flushed_v{}, mse_without_flushed_v_ratio_to_e4m3{};
  Json to_json() const;
};

// COAT's Table 1 on the trace's moments beside the paper's (each written under its key with the
// prefix "table1": table1, table1_ratio_to_e4m3, table1_paper, ...).
struct Table1 {
  Table1Matrix mse{};
  Table1Matrix ratio_to_e4m3{};
  Table1Matrix paper{};
  Table1Matrix paper_ratio_to_e4m3{};
  Table1Details details;
};

// Table 1's measure with the moments in the OCP MX 4- and 6-bit element formats (E2M1, E2M3,
// E3M2), each in 1x128 groups with an fp32 scale as Table 1's FP8 formats, with and without DE
// (COAT's coat mode, its ratio bound fmax^2/2 of the storage format): rows the first moment's
// format, columns the second's, over the same elements as Table 1.
struct LowBitFormat {
  const char* label;
  const char* spec;
};
const std::vector<LowBitFormat>& table1_lowbit_formats();

struct Table1LowBit {
  std::vector<std::vector<double>> mse;                                // [m format][v format]
  std::vector<std::vector<double>> ratio_to_e4m3;                      // mse / Table 1's E4M3 x E4M3 cell
  std::vector<double> m_nmse, v_nmse, m_flushed_frac, v_flushed_frac;  // per format
  Json to_json() const;
};

// torch's AdamW replayed with fp32 moments against the captured end-of-window weights.
struct Fp32Replay {
  std::string rule = "torch";
  int64_t steps = 0;
  double max_rel_err = 0, max_abs_err = 0, max_ulp = 0, max_abs_err_over_max_move = 0, mismatch_frac = 0;
  double coat_rule_max_rel_err = 0;
  std::string note =
      "torch's CPU sqrt (MKL vsSqrt, VML_HA) is not correctly rounded; the replay's is. That 1-ulp difference is the "
      "only source of mismatch (tests/test_optim_adamw.cpp bounds it per element)";
  Json to_json() const;
};

// Exact bytes of both moments under one state recipe.
struct StateMemory {
  std::string recipe;
  std::string spec;
  double m_bytes = 0, v_bytes = 0, state_bytes = 0;
  double bytes_per_param = 0;
  Json to_json() const;
};

// One drift step of a recipe's run against the fp32 run (OptimDefinitions says what each is).
struct DriftStep {
  int64_t step = 0;  // AdamW's step count after the update
  double param_rel_l2 = 0, displacement_rel_err = 0, update_cosine = 0;
  double m_nmse = 0, v_nmse = 0, m_quant_nmse = 0, v_quant_nmse = 0;
  Json to_json() const;
};

// A state recipe's drift run; written under its name.
struct DriftRun {
  std::string name;
  std::string spec;
  std::optional<std::string> note;  // the recipe's note, when it has one
  std::vector<DriftStep> steps;
  Json to_json() const;
};

// The whole result (to_json: what `fp8sim optim --json` writes). A part that did not run says why
// in its *_skipped text.
struct OptimResult {
  std::string source;
  WindowSummary window;
  MomentsSummary moments;
  std::string update_rule;
  std::string rounding;
  uint64_t seed = 0;
  OptimDefinitions definitions;
  std::optional<Table1> table1;
  std::string table1_skipped;
  std::optional<Table1LowBit> table1_lowbit;  // with OptimOptions::table1_lowbit
  std::optional<Fp32Replay> fp32_replay;      // its max_rel_err is also fp32_replay_max_rel_err
  std::string fp32_replay_skipped;
  std::vector<StateMemory> memory;
  std::string memory_params;  // the parameters the memory table counts
  std::optional<std::vector<DriftRun>> drift;
  std::string drift_skipped;
  Json to_json() const;
};

class OptimReplay {
 public:
  OptimReplay(const WindowMeta& meta, const OptimOptions& opts);
  ~OptimReplay();
  OptimReplay(const OptimReplay&) = delete;
  OptimReplay& operator=(const OptimReplay&) = delete;

  // Table 1 and the memory table: the fp32 moments of one parameter after `adamw_step` updates
  // (the step count that sets the bias corrections), with the AdamW hyper-parameters (lr unused).
  // Call it for every parameter of the snapshot the table is about (all of the model's).
  void add_state(const std::string& name, std::span<const float> m, std::span<const float> v, const AdamwHyper& hyper,
                 int64_t adamw_step);
  // Drift and the fp32 replay: one parameter of the grad window. Validates (throws
  // fp8sim::Error naming the parameter when a shape or length does not match, or values are not
  // finite). Without any add_state call, the memory table counts the window's parameters.
  void add_param(const ParamWindow& w);
  // The same in two halves, for runs split among processes (sim/common/dist.hpp): one parameter's
  // contribution as bytes, computed without changing this replay (`index`: the parameter's place
  // among the window's, which keys stochastic rounding), then added by apply_part in parameter
  // order, moments before window parameters: the same sums in the same order as add_state /
  // add_param, so the same result whichever process computed each part.
  std::string state_part(const std::string& name, std::span<const float> m, std::span<const float> v,
                         const AdamwHyper& hyper, int64_t adamw_step) const;
  std::string param_part(const ParamWindow& w, uint64_t index) const;
  void apply_part(const std::string& bytes);
  // The whole result.
  OptimResult finish() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the trace and runs OptimReplay over it (sim/optim/replay_trace.cpp): Table 1 and memory
// on the step with the most captured moments (ties: the latest; or opts.table1_step), drift and
// the fp32 replay on the grad window (root attribute grad_window = [a, b]: weights and moments
// at step a, grads of steps a..b, weights after update b at step b+1). Throws fp8sim::Error with
// one line for a trace without a grad window or without the hyper-parameters.
OptimResult optim_replay(const std::string& trace_path, const OptimOptions& opts);
// The same over a trace already open (a file, or tensors in memory with the optimizer's
// hyper-parameters in the header); messages and `source` name reader.path().
OptimResult optim_replay(const trace::TraceReader& reader, const OptimOptions& opts);

}  // namespace fp8sim::optim
