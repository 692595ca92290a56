// fp8sim optim: optimizer-state replay over a trace's grad window (COAT's Table 1, multi-step
// drift of low-precision moments, fp32 replay against the captured weights, state memory).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/optim/replay.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;
using optim::StateRecipe;

std::string num(const Json& v, const char* fmtspec = "{:.4g}") {
  if (!v.is_number()) return "-";
  const double x = v.as_number();
  if (std::isnan(x)) return "nan";
  return fmt::format(fmt::runtime(fmtspec), x);
}

void print_table1(const Json& doc) {
  const auto& labels = optim::table1_formats();
  const Json& ours = doc.at("table1");
  const Json& paper = doc.at("table1_paper");
  const Json& ro = doc.at("table1_ratio_to_e4m3");
  const Json& rp = doc.at("table1_paper_ratio_to_e4m3");
  std::vector<std::string> header{"m \\ v"};
  for (const auto& f : labels) header.push_back(f.label);
  auto block = [&](const Json& t, const char* fmtspec) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& a : labels) {
      std::vector<std::string> row{a.label};
      for (const auto& b : labels) row.push_back(num(t.at(a.label).at(b.label), fmtspec));
      rows.push_back(row);
    }
    return rows;
  };
  const Json& snap = doc.at("moments");
  fmt::print(
      "\nTable 1: MSE of the AdamW direction r = m_hat/(sqrt(v_hat)+eps) on this trace's moments ({} parameters, "
      "{} elements, AdamW step {})\n",
      snap.at("params").as_int(), snap.at("elements").as_int(), num(snap.at("adamw_step"), "{:.0f}"));
  cli::print_table(header, block(ours, "{:.4g}"));
  fmt::print("\nThe same over the elements whose nonzero v did not flush to 0 (see 'v flushed' below)\n");
  cli::print_table(header, block(doc.at("table1_details").at("mse_without_flushed_v"), "{:.4g}"));
  fmt::print("\nCOAT paper, Table 1 (its own states and units)\n");
  cli::print_table(header, block(paper, "{:.2f}"));
  // Shapes, not units: each matrix divided by its own E4M3/E4M3 cell.
  const Json& nf = doc.at("table1_details").at("mse_without_flushed_v");
  auto ratio_block = [&](const Json& ours_ratio_src, bool from_ratio) {
    std::vector<std::vector<std::string>> rows;
    const double base = from_ratio ? 1.0 : ours_ratio_src.at("E4M3").at("E4M3").as_number();
    for (const auto& a : labels) {
      std::vector<std::string> row{a.label};
      for (const auto& b : labels) {
        const Json& o = ours_ratio_src.at(a.label).at(b.label);
        const std::string ours_s = o.is_number() ? fmt::format("{:.3g}", o.as_number() / base) : "-";
        row.push_back(ours_s + " / " + num(rp.at(a.label).at(b.label), "{:.3g}"));
      }
      rows.push_back(row);
    }
    return rows;
  };
  fmt::print("\nRelative to E4M3/E4M3: this trace / paper\n");
  cli::print_table(header, ratio_block(ro, true));
  fmt::print("\nRelative to E4M3/E4M3, elements whose v did not flush: this trace / paper\n");
  cli::print_table(header, ratio_block(nf, false));
  const Json& det = doc.at("table1_details");
  std::vector<std::vector<std::string>> frows;
  for (const auto& f : labels)
    frows.push_back({f.label, det.at("specs").at(f.label).as_string(), num(det.at("m_nmse").at(f.label)),
                     num(det.at("v_nmse").at(f.label)), num(det.at("m_flushed_frac").at(f.label)),
                     num(det.at("v_flushed_frac").at(f.label))});
  fmt::print("\nPer-format state error (window-start moments)\n");
  cli::print_table({"format", "spec", "m nmse", "v nmse", "m flushed", "v flushed"}, frows);
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
      "no-table1", "skip COAT's Table 1")("table1-step", po::value(&table1_step),
                                          "trace step whose moments feed Table 1 and the memory table "
                                          "(default: the step with the most captured moments)")(
      "no-drift", "skip the multi-step drift runs")("threads", po::value(&threads)->default_value(0),
                                                    "OpenMP threads (0 = all)")(
      "list-recipes", "list the state recipe presets and exit")("trace", po::value(&trace),
                                                                "HDF5 trace with a grad window (positional)");
  po::positional_options_description pos;
  pos.add("trace", 1);
  po::variables_map vm;
  if (!cli::parse("optim", args, opts, pos, vm, "TRACE [--recipe R ...] [--steps N] [--json OUT]",
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
                  "  fp8sim optim traces/tiny-llama-s300.h5 --recipe coat --rounding stochastic --seed 7"))
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
  if (threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", threads));
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
  o.drift = vm.count("no-drift") == 0;
  o.threads = threads;
  if (vm.count("table1-step")) o.table1_step = table1_step;
  Progress progress("optim", 1.0);
  o.progress = [&](double done, double total) { progress.update(total > 0 ? done / total : 1.0); };
  const Json doc = optim::optim_replay(trace, o);
  progress.finish();
  if (json_id >= 0) files.write(json_id, doc.dump(2) + "\n");
  if (const Json* dropped = doc.at("window").find("dropped_params"); dropped && dropped->size() > 0) {
    std::string names;
    const auto& arr = dropped->as_array();
    for (size_t i = 0; i < arr.size() && i < 3; ++i)
      names += fmt::format("{}'{}' (no grad at step {})", i ? ", " : "", arr[i].at("name").as_string(),
                           arr[i].at("missing_grad_step").as_int());
    fmt::print(stderr,
               "fp8sim optim: warning: {} parameter(s) left out of the grad-window replay because a grad is missing: "
               "{}{}\n",
               arr.size(), names, arr.size() > 3 ? ", ..." : "");
  }

  const Json& win = doc.at("window");
  fmt::print("{}: grad window of {} steps from step {}, {} parameters, {} elements; drift over {} steps, {} rule\n",
             trace, win.at("steps").as_int(), win.at("step0").as_int(), win.at("params").as_int(),
             win.at("elements").as_int(), win.at("drift_steps").as_int(), doc.at("update_rule").as_string());
  if (doc.at("table1").is_object()) print_table1(doc);
  else fmt::print("\nTable 1 skipped: {}\n", doc.at("table1_skipped").as_string());

  const Json& rp = doc.at("fp32_replay");
  if (rp.contains("max_rel_err"))
    fmt::print(
        "\nfp32 replay (torch's rule) vs the captured end-of-window weights: max rel err {}, max abs err {} "
        "({} of the largest weight change), {} of elements differ (torch's CPU sqrt is not correctly rounded)\n",
        num(rp.at("max_rel_err")), num(rp.at("max_abs_err")), num(rp.at("max_abs_err_over_max_move")),
        num(rp.at("mismatch_frac")));
  else fmt::print("\nfp32 replay skipped: {}\n", rp.at("skipped").as_string());

  std::vector<std::vector<std::string>> mrows;
  for (const Json& e : doc.at("memory").as_array())
    mrows.push_back({e.at("recipe").as_string(), e.at("spec").as_string(), num(e.at("bytes_per_param"), "{:.4f}")});
  fmt::print("\nOptimizer state memory (m + v, codes + metadata)\n");
  cli::print_table({"recipe", "m, v", "B/param"}, mrows);

  if (doc.at("drift").is_object()) {
    std::vector<std::vector<std::string>> drows;
    std::vector<std::string> notes;
    for (const auto& [name, e] : doc.at("drift").as_object()) {
      const auto& st = e.at("steps").as_array();
      const Json& last = st.back();
      double min_cos = 1.0;
      for (const Json& s : st)
        if (s.at("update_cosine").is_number()) min_cos = std::min(min_cos, s.at("update_cosine").as_number());
      drows.push_back({name, num(last.at("param_rel_l2")), num(last.at("displacement_rel_err")),
                       fmt::format("{:.6f}", min_cos), num(last.at("m_nmse")), num(last.at("v_nmse"))});
      if (e.contains("note")) notes.push_back(fmt::format("* {}: {}", name, e.at("note").as_string()));
    }
    fmt::print("\nDrift from the fp32 run after {} steps\n", win.at("drift_steps").as_int());
    cli::print_table({"recipe", "|p-p32|/|p32|", "|p-p32|/|p32-p0|", "min cos(update)", "m nmse", "v nmse"}, drows);
    for (const auto& n : notes) fmt::print("{}\n", n);
  }
  std::fflush(stdout);  // the tables before any stderr line
  files.commit();
  if (json_id >= 0 && json_out != "-") cli::note(fmt::format("wrote {}", json_out));
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("optim", "AdamW with FP8 / low-precision moments on a trace's grad window: COAT Table 1, drift, memory",
               fp8sim::run_optim);
