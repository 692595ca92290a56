// fp8sim optim: optimizer-state replay over a trace's grad window (COAT's Table 1, multi-step
// drift of low-precision moments, fp32 replay against the captured weights, state memory).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/app/cli.hpp"
#include "sim/app/gpu_api.hpp"
#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/io.hpp"
#include "sim/optim/replay.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;
using optim::StateRecipe;

std::string num(double x, const char* fmtspec = "{:.4g}") {
  if (std::isnan(x)) return "nan";
  return fmt::format(fmt::runtime(fmtspec), x);
}

// One row per format of a Table 1 format list: its spec, the moments' errors and flush fractions.
template <class Formats, class Row>
void print_state_errors(const Formats& f, const Row& m_nmse, const Row& v_nmse, const Row& m_flushed,
                        const Row& v_flushed) {
  std::vector<std::vector<std::string>> rows;
  for (size_t a = 0; a < std::size(m_nmse); ++a)
    rows.push_back({f[a].label, QuantSpec::parse(f[a].spec).to_string(), num(m_nmse[a]), num(v_nmse[a]),
                    num(m_flushed[a]), num(v_flushed[a])});
  cli::print_table({"format", "spec", "m nmse", "v nmse", "m flushed", "v flushed"}, rows);
}

void print_table1(const optim::OptimResult& doc) {
  const auto& labels = optim::table1_formats();
  const optim::Table1& t1 = *doc.table1;
  const optim::Table1Details& det = t1.details;
  std::vector<std::string> header{"m \\ v"};
  for (const auto& f : labels) header.push_back(f.label);
  auto block = [&](const optim::Table1Matrix& t, const char* fmtspec) {
    std::vector<std::vector<std::string>> rows;
    for (size_t a = 0; a < 4; ++a) {
      std::vector<std::string> row{labels[a].label};
      for (size_t b = 0; b < 4; ++b) row.push_back(num(t[a][b], fmtspec));
      rows.push_back(row);
    }
    return rows;
  };
  const optim::MomentsSummary& snap = doc.moments;
  fmt::print(
      "\nTable 1: MSE of the AdamW direction r = m_hat/(sqrt(v_hat)+eps) on this trace's moments ({} parameters, "
      "{} elements, AdamW step {})\n",
      snap.params, snap.elements, snap.adamw_step ? num(static_cast<double>(*snap.adamw_step), "{:.0f}") : "-");
  cli::print_table(header, block(t1.mse, "{:.4g}"));
  fmt::print("\nThe same over the elements whose nonzero v did not flush to 0 (see 'v flushed' below)\n");
  cli::print_table(header, block(det.mse_without_flushed_v, "{:.4g}"));
  fmt::print("\nCOAT paper, Table 1 (its own states and units)\n");
  cli::print_table(header, block(t1.paper, "{:.2f}"));
  // Shapes, not units: each matrix divided by its own E4M3/E4M3 cell.
  auto ratio_block = [&](const optim::Table1Matrix& ours, bool from_ratio) {
    std::vector<std::vector<std::string>> rows;
    const double base = from_ratio ? 1.0 : ours[0][0];
    for (size_t a = 0; a < 4; ++a) {
      std::vector<std::string> row{labels[a].label};
      for (size_t b = 0; b < 4; ++b)
        row.push_back(fmt::format("{:.3g}", ours[a][b] / base) + " / " + num(t1.paper_ratio_to_e4m3[a][b], "{:.3g}"));
      rows.push_back(row);
    }
    return rows;
  };
  fmt::print("\nRelative to E4M3/E4M3: this trace / paper\n");
  cli::print_table(header, ratio_block(t1.ratio_to_e4m3, true));
  fmt::print("\nRelative to E4M3/E4M3, elements whose v did not flush: this trace / paper\n");
  cli::print_table(header, ratio_block(det.mse_without_flushed_v, false));
  fmt::print("\nPer-format state error (window-start moments)\n");
  print_state_errors(labels, det.m_nmse, det.v_nmse, det.m_flushed_frac, det.v_flushed_frac);
  if (!doc.table1_lowbit) return;
  // The same measure with the 4- and 6-bit element formats.
  const auto& low = optim::table1_lowbit_formats();
  const optim::Table1LowBit& lb = *doc.table1_lowbit;
  std::vector<std::string> lheader{"m \\ v"};
  for (const auto& f : low) lheader.push_back(f.label);
  auto lblock = [&](const std::vector<std::vector<double>>& t) {
    std::vector<std::vector<std::string>> rows;
    for (size_t a = 0; a < t.size(); ++a) {
      std::vector<std::string> row{low[a].label};
      for (double x : t[a]) row.push_back(num(x));
      rows.push_back(row);
    }
    return rows;
  };
  fmt::print("\nTable 1 with 4- and 6-bit moments (OCP MX element formats, 1x128 groups, fp32 scales), MSE of r\n");
  cli::print_table(lheader, lblock(lb.mse));
  fmt::print("\nRelative to Table 1's E4M3/E4M3\n");
  cli::print_table(lheader, lblock(lb.ratio_to_e4m3));
  fmt::print("\nPer-format state error, 4- and 6-bit\n");
  print_state_errors(low, lb.m_nmse, lb.v_nmse, lb.m_flushed_frac, lb.v_flushed_frac);
}

int run_optim(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string trace, json_out, update = "coat", rounding = "nearest";
  std::vector<std::string> recipes;
  int steps = 0, threads = 0;
  int64_t table1_step = -1;
  std::string seed_text = "0";
  std::string presets, defaults;
  for (const auto& p : optim::state_recipe_presets()) presets += std::string(p.name) + ", ";
  for (const auto& r : optim::default_state_recipes()) defaults += (defaults.empty() ? "" : " ") + r.name;
  opts.add_options()("recipe,r", po::value(&recipes)->composing(),
                     ("state recipe for the drift and memory tables (repeatable): " + presets +
                      "or m=SPEC,v=SPEC with SPEC fp32 or a quantization spec. Default: " + defaults)
                         .c_str())("steps,n", po::value(&steps)->default_value(0),
                                   "drift steps from the window start (0 = the whole window)")(
      "json", po::value(&json_out), "write the full result as JSON (atomically; - : stdout)")(
      "update", po::value(&update)->default_value("coat"),
      "AdamW update rule of the drift runs: coat (COAT's kernel formula) or torch (torch.optim.AdamW's order)")(
      "rounding", po::value(&rounding)->default_value("nearest"), "FP8 moments: nearest or stochastic")(
      "seed", po::value(&seed_text)->default_value("0"), "Philox seed for --rounding stochastic")(
      "no-table1", "skip COAT's Table 1")(
      "table1-lowbit",
      "also Table 1's measure with both moments in E2M1 / E2M3 / E3M2 (1x128 groups, with and without DE)")(
      "table1-step", po::value(&table1_step),
      "trace step whose moments feed Table 1 and the memory table "
      "(default: the step with the most captured moments)")("no-drift", "skip the multi-step drift runs")(
      "threads", po::value(&threads)->default_value(0), "OpenMP threads (0 = all)")(
      "device", po::value<std::string>()->default_value("cpu"),
      "where Table 1's quantizers and sums and the drift runs' AdamW steps and sums run: cpu, or cuda (the GPU's "
      "kernels, the same bits; the fp32 replay stays on the CPU)")(
      "list-recipes", "list the state recipe presets and exit")("trace", po::value(&trace),
                                                                "HDF5 trace with a grad window (positional)");
  po::positional_options_description pos;
  pos.add("trace", 1);
  po::variables_map vm;
  if (!cli::parse(
          "optim", args, opts, pos, vm, "TRACE [--recipe R ...] [--steps N] [--json OUT]",
          "Replays AdamW over the trace's captured grad window with fp32 and with low-precision moments:\n"
          "  * COAT's Table 1: MSE of the update direction m_hat/(sqrt(v_hat)+eps) when the captured moments\n"
          "    of every parameter are stored as E4M3 / E5M2 (1x128 groups), with and without Dynamic Range\n"
          "    Expansion, beside the paper's matrix (and the same without elements whose v flushed to 0);\n"
          "  * drift: per step, how far each recipe's weights move from the fp32 run (relative L2), the\n"
          "    cosine of the updates and the state errors (the same captured grads feed every run);\n"
          "  * fp32_replay_max_rel_err: torch.optim.AdamW replayed against the captured end weights;\n"
          "  * memory: exact bytes per parameter of m and v (codes + scales + DE metadata).\n"
          "Examples:\n"
          "  fp8sim optim traces/tiny-llama-s300.h5\n"
          "  fp8sim optim traces/tiny-llama-s300.h5 --recipe coat --recipe te-fp8 --steps 4 --json optim.json\n"
          "  fp8sim optim traces/tiny-llama-s300.h5 --recipe m=e4m3:g128:de=coat,v=e5m2:g128 --no-table1\n"
          "  fp8sim optim traces/tiny-llama-s300.h5 --recipe coat --rounding stochastic --seed 7\n"
          "  fp8sim optim big.h5 --device cuda --json big.json   (Table 1 and the drift on the GPU; same JSON)\n"
          "  fp8sim optim traces/tiny-llama-s300.h5 --table1-lowbit --recipe m=e2m1:g128:de=coat,v=e2m1:g128:de=coat"))
    return 0;

  if (vm.count("list-recipes")) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : optim::state_recipe_presets()) {
      const StateRecipe r = StateRecipe::parse(p.name);
      rows.push_back({p.name, r.m.to_string(), r.v.to_string(), p.description});
    }
    cli::print_table({"recipe", "m", "v", "what"}, rows);
    return 0;
  }
  if (trace.empty()) throw UsageError("no TRACE given (see 'fp8sim optim --help')");
  if (steps < 0) throw UsageError(fmt::format("--steps must be >= 0, got {}", steps));
  cli::check_threads(threads);
  RunFiles files;
  files.input("TRACE", trace);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;

  optim::OptimOptions o;
  for (const auto& r : recipes) o.recipes.push_back(StateRecipe::parse(r));
  o.steps = steps;
  o.rule = optim::parse_update_rule(update);
  o.rounding = parse_rounding(rounding);
  o.seed = parse_seed(seed_text, "--seed");
  o.table1 = vm.count("no-table1") == 0;
  o.table1_lowbit = vm.count("table1-lowbit") > 0;
  if (o.table1_lowbit && !o.table1) throw UsageError("--table1-lowbit extends Table 1: drop --no-table1");
  o.drift = vm.count("no-drift") == 0;
  o.threads = threads;
  if (vm.count("table1-step")) o.table1_step = table1_step;
  const std::string device = vm["device"].as<std::string>();
  if (device != "cpu" && device != "cuda")
    throw UsageError(fmt::format("--device must be cpu or cuda, got '{}'", device));
  // Window parameters whose drift, and moment pairs whose Table 1 sums, the device ran / did not take.
  int64_t on_device = 0, on_cpu = 0, t1_on_device = 0, t1_on_cpu = 0;
  double device_seconds = 0;  // in the device's calls
  if (device == "cuda") {
    gpu::Backend& gpu = gpu_api::backend();
    gpu.require("--device cuda runs Table 1 and the drift on the GPU");
    // A device call, timed and counted; a UsageError (what the GPU does not take: 4- or 6-bit or
    // group-scaled 16-bit moments, a 4- or 6-bit format on a length not a multiple of 16, more
    // than the free memory) is counted and passed on, so the CPU runs that item.
    auto counted = [&device_seconds](auto call, int64_t& taken, int64_t& handed_back) {
      return [call, &taken, &handed_back, &device_seconds](const auto& rq) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          auto r = call(rq);
          device_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          ++taken;
          return r;
        } catch (const UsageError&) {
          ++handed_back;
          throw;
        }
      };
    };
    o.direction_device =
        counted([&gpu](const optim::DirectionRequest& rq) { return gpu.optim_direction(rq); }, t1_on_device, t1_on_cpu);
    o.drift_device = counted([&gpu](const optim::DriftRequest& rq) { return gpu.optim_drift(rq); }, on_device, on_cpu);
  }
  Progress progress("optim", 1.0);
  o.progress = [&](double done, double total) { progress.update(total > 0 ? done / total : 1.0); };
  const optim::OptimResult doc = optim::optim_replay(trace, o);
  progress.finish();
  if (json_id >= 0) files.write(json_id, doc.to_json().dump(2) + "\n");
  const optim::WindowSummary& win = doc.window;
  if (win.dropped_params && !win.dropped_params->empty()) {
    std::string names;
    const auto& arr = *win.dropped_params;
    for (size_t i = 0; i < arr.size() && i < 3; ++i)
      names += fmt::format("{}'{}' (no grad at step {})", i ? ", " : "", arr[i].name, arr[i].missing_grad_step);
    fp8sim::eprint(
        "fp8sim optim: warning: {} parameter(s) left out of the grad-window replay because a grad is missing: "
        "{}{}\n",
        arr.size(), names, arr.size() > 3 ? ", ..." : "");
  }

  fmt::print("{}: grad window of {} steps from step {}, {} parameters, {} elements; drift over {} steps, {} rule\n",
             trace, win.steps, win.step0, win.params, win.elements, win.drift_steps, doc.update_rule);
  if (doc.table1) print_table1(doc);
  else fmt::print("\nTable 1 skipped: {}\n", doc.table1_skipped);

  if (const auto& rp = doc.fp32_replay)
    fmt::print(
        "\nfp32 replay (torch's rule) vs the captured end-of-window weights: max rel err {}, max abs err {} "
        "({} of the largest weight change), {} of elements differ (torch's CPU sqrt is not correctly rounded)\n",
        num(rp->max_rel_err), num(rp->max_abs_err), num(rp->max_abs_err_over_max_move), num(rp->mismatch_frac));
  else fmt::print("\nfp32 replay skipped: {}\n", doc.fp32_replay_skipped);

  std::vector<std::vector<std::string>> mrows;
  for (const optim::StateMemory& e : doc.memory) mrows.push_back({e.recipe, e.spec, num(e.bytes_per_param, "{:.4f}")});
  fmt::print("\nOptimizer state memory (m + v, codes + metadata)\n");
  cli::print_table({"recipe", "m, v", "B/param"}, mrows);

  if (doc.drift) {
    std::vector<std::vector<std::string>> drows;
    std::vector<std::string> notes;
    for (const optim::DriftRun& run : *doc.drift) {
      const optim::DriftStep& last = run.steps.back();
      double min_cos = 1.0;
      for (const optim::DriftStep& s : run.steps) min_cos = std::min(min_cos, s.update_cosine);
      drows.push_back({run.name, num(last.param_rel_l2), num(last.displacement_rel_err), fmt::format("{:.6f}", min_cos),
                       num(last.m_nmse), num(last.v_nmse)});
      if (run.note) notes.push_back(fmt::format("* {}: {}", run.name, *run.note));
    }
    fmt::print("\nDrift from the fp32 run after {} steps\n", win.drift_steps);
    cli::print_table({"recipe", "|p-p32|/|p32|", "|p-p32|/|p32-p0|", "min cos(update)", "m nmse", "v nmse"}, drows);
    for (const auto& n : notes) fmt::print("{}\n", n);
  }
  std::fflush(stdout);  // the tables before any stderr line
  if (device == "cuda") {
    const std::string who = dist::size() > 1 ? "rank 0: " : "";
    cli::note(
        fmt::format("{}on the GPU ({:.2f} s in its calls): Table 1's sums {} time(s) (one per moment pair and "
                    "format list), the drift of {} window parameter(s){}",
                    who, device_seconds, t1_on_device, on_device,
                    on_cpu + t1_on_cpu ? fmt::format("; on the CPU: Table 1's sums {} time(s) and {} drift(s) "
                                                     "(4- or 6-bit moments, a 4- or 6-bit format on a length "
                                                     "not a multiple of 16, or larger than the GPU's free "
                                                     "memory)",
                                                     t1_on_cpu, on_cpu)
                                       : ""));
  }
  files.commit();
  if (json_id >= 0 && json_out != "-") cli::note(fmt::format("wrote {}", json_out));
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_DISTRIBUTED_COMMAND(
    "optim", "AdamW with FP8 / low-precision moments on a trace's grad window: COAT Table 1, drift, memory",
    fp8sim::run_optim);
