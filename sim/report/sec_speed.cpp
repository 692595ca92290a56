// Speed section: fp8sim speed's step time per recipe and per op, measured on this GPU or
// modelled from a calibration file measured on one; unavailable (with how to get it) when
// neither exists.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "sim/report/sections.hpp"
#include "sim/report/util.hpp"
#include "sim/speed/plan.hpp"
#include "sim/speed/speed.hpp"

namespace fp8sim::report {

namespace {

bool gpu_available(const Context& ctx) { return ctx.device.available; }

// The memory section's largest micro-batch that fits for `recipe`: -1 when the memory section has
// no document for it (no memory model, or the section did not run).
int64_t memory_max_batch(const Context& ctx, const std::string& recipe) {
  const Json* mem = ctx.data.find("memory");
  const Json* d = mem && mem->is_object() ? mem->find(recipe) : nullptr;
  const Json* mb = d && d->is_object() ? d->find("max_batch") : nullptr;
  return mb && mb->is_number() ? mb->as_int() : -1;
}

// The summary's comparison: every recipe at its largest micro-batch that fits (the memory model's),
// as COAT's Table 7 compares methods, rather than at --batch. Adds the table to `s`, the summary
// cells, and the speed document to data.speed_at_max_batch. Recipes without a memory document, or
// that fit at no micro-batch, are named instead.
void max_batch_comparison(Context& ctx, Section& s, const speed::SpeedOptions& at_batch, bool measure, bool modelled) {
  speed::SpeedOptions so = at_batch;
  so.recipes.clear();
  so.recipe_batch.clear();
  so.fig4b = false;
  const char* col = modelled ? "tokens/s/GPU at max batch (modelled)" : "tokens/s/GPU at max batch (measured)";
  std::vector<std::string> no_memory, no_fit;
  for (const speed::PlanRecipe& r : at_batch.recipes) {
    const int64_t b = memory_max_batch(ctx, r.name);
    if (b < 0) {
      no_memory.push_back(r.name);
    } else if (b == 0) {
      no_fit.push_back(r.name);
      ctx.add_summary(r.name, col, "OOM");
    } else {
      so.recipes.push_back(r);
      so.recipe_batch[r.name] = b;
    }
  }
  if (so.recipes.empty()) {
    s.para(
        "No recipe of the speed replay has a memory model that fits it at some micro-batch: the comparison at "
        "each recipe's largest micro-batch is left out.");
    return;
  }
  // On a GPU these shapes are timed too (one more measuring run).
  const speed::SpeedResult res = speed::speed_report(so, measure ? &ctx.gpu : nullptr);
  std::vector<Row> rows;
  for (const speed::RecipeSpeed& r : res.recipes) {
    const double tps = r.tokens_per_s_per_gpu, speedup = r.speedup_vs_bf16.value();
    rows.push_back({r.recipe, fmt::format("{}", r.batch), fmt_num(r.step_ms, 4), fmt::format("{:.0f}", tps),
                    fmt::format("{:.2f}x", speedup)});
    ctx.add_summary(r.recipe, col, fmt::format("{:.0f}", tps));
    ctx.add_summary(r.recipe, "speedup vs bf16 at max batch", fmt::format("{:.2f}x", speedup));
    ctx.add_figure(r.recipe, "tokens_per_s_at_max_batch", tps, fmt::format("{:.0f}", tps), "speed");
    ctx.add_figure(r.recipe, "speedup_at_max_batch", speedup, fmt::format("{:.2f}x", speedup), "speed");
  }
  const bool bf16_listed = std::any_of(so.recipes.begin(), so.recipes.end(),
                                       [](const speed::PlanRecipe& r) { return r.plan == speed::Plan::BF16; });
  std::string caption = fmt::format(
      "Each recipe at the largest micro-batch whose peak fits in the memory section's model (its `max batch`), "
      "as COAT's Table 7 compares methods; the summary's throughput and speedup are these. The speedup is against "
      "{}.",
      bf16_listed
          ? "BF16 at its own largest micro-batch"
          : fmt::format("the BF16 plan at micro-batch {} (no recipe running it has a memory model here)", so.batch));
  if (!no_fit.empty())
    caption += fmt::format(" {} fit{} at no micro-batch.", join_prose(no_fit, "and"), no_fit.size() == 1 ? "s" : "");
  if (!no_memory.empty())
    caption += fmt::format(" {} {} no memory model, so no largest micro-batch.", join_prose(no_memory, "and"),
                           no_memory.size() == 1 ? "has" : "have");
  s.table("At each recipe's largest micro-batch (memory model)",
          {"recipe", "micro-batch", "step ms", "tokens/s/GPU", "speedup vs bf16"}, rows, caption);
  ctx.data["speed_at_max_batch"] = res.to_json();
}

// The kind of work an op does, for the rows that gather the smaller ops (by the plan's kernel kind).
std::string op_group(const std::string& kind) {
  if (kind == "gemm") return "GEMM";
  if (kind == "attention") return "attention";
  if (kind.starts_with("rmsnorm") || kind.starts_with("layernorm")) return "norms";
  if (kind == "add" || kind.starts_with("silu_mul") || kind.starts_with("rope")) return "elementwise";
  if (kind == "cast_transpose" || kind == "transpose" || kind.starts_with("quantize") || kind == "group_max" ||
      kind == "reduce_max" || kind == "amax")
    return "quantize/cast";
  if (kind.starts_with("embedding") || kind == "cross_entropy") return "embedding and loss";
  if (kind == "optimizer") return "optimizer";
  return "other";
}

// The paragraphs that say where the times come from, what is stale and what one step is.
void describe_timing(Section& s, const speed::SpeedTiming& timing, const ReportOptions& o) {
  s.para(fmt::format("**{}.**", timing.statement));
  if (!timing.stale_kernels.empty()) {
    std::vector<std::string> families;
    for (const speed::StaleKernels& f : timing.stale_kernels) {
      std::string versions;
      // Appended piecewise: `"/" + std::string` trips GCC 12's false -Wrestrict positive.
      for (int v : f.calibration_versions) {
        if (!versions.empty()) versions += '/';
        versions += v ? std::to_string(v) : std::string("unrecorded");
      }
      families.push_back(fmt::format("{} ({} kernels at version {}, this build's {})", f.family, f.kernels, versions,
                                     f.build_version));
    }
    s.para(fmt::format(
        "**Warning: the calibration is older than the kernels it models.** It times these kernel families at "
        "another version than this build's: {}. Re-measure with `fp8sim calibrate` "
        "(`scripts/device/calibrate.sh`).",
        join_prose(families, "and")));
  }
  s.para(fmt::format(
      "One optimizer step of **{}** at micro-batch {} x sequence {} per GPU, {} GPU{} (FSDP; the optimizer step is "
      "sharded; communication {}). Each op of one transformer layer (forward and backward), the embedding, head "
      "and loss, the FP8 weight casts and the optimizer step are timed as the recipe runs them; the step time is "
      "their sum. Tokens/s/GPU = micro-batch x sequence / step time.",
      o.model, o.batch, o.seq, o.gpus, o.gpus == 1 ? "" : "s",
      timing.fsdp_comm != "none" ? timing.fsdp_comm : std::string("not modelled")));
}

void recipe_table(Section& s, const std::vector<speed::RecipeSpeed>& recs) {
  std::vector<Row> rows;
  for (const speed::RecipeSpeed& r : recs)
    rows.push_back({r.recipe, fmt_num(r.step_ms, 4), fmt_num(r.layer_fwd_ms, 3), fmt_num(r.layer_bwd_ms, 3),
                    fmt_num(r.optimizer_ms, 3), fmt::format("{:.0f}", r.tokens_per_s_per_gpu),
                    fmt::format("{:.2f}x", r.speedup_vs_bf16.value()),
                    fmt::format("{:.0f}%", 100 * r.measured_fraction)});
  s.table("Per recipe",
          {"recipe", "step ms", "layer fwd ms", "layer bwd ms", "optimizer ms", "tokens/s/GPU", "speedup vs bf16",
           "time from exact-shape measurements"},
          rows,
          "The last column is the share of the step whose kernels were measured at exactly this shape (the rest "
          "is fitted from the nearest measured shape of the same kernel).");
}

void category_table(Section& s, const std::vector<speed::RecipeSpeed>& recs) {
  // Time per category, then per op (summed over its occurrences in the step).
  std::vector<Row> crows;
  const auto cats = speed::SpeedBreakdown{}.items();
  for (size_t i = 0; i < cats.size(); ++i) {
    Row row{cats[i].first};
    for (const speed::RecipeSpeed& r : recs) row.push_back(fmt_num(r.breakdown_ms.items()[i].second, 4));
    crows.push_back(std::move(row));
  }
  Row cheader{"ms per step"};
  for (const speed::RecipeSpeed& r : recs) cheader.push_back(r.recipe);
  s.table("Step time by category", cheader, crows);
}

// The largest ops one by one, the rest summed by kind, communication and the total; and the plot's data.
void op_table(Context& ctx, Section& s, const std::vector<speed::RecipeSpeed>& recs, bool modelled) {
  const auto& o = ctx.opts;
  // Per op: the op's contribution to the step (`step_ms` of each op entry), summed by name and phase.
  std::map<std::string, std::map<std::string, double>> per_op;  // op -> recipe -> ms
  std::map<std::string, std::string> group_of;                  // op -> op_group of its kind
  std::vector<std::string> op_order;
  for (const speed::RecipeSpeed& r : recs)
    for (const speed::SpeedOp& op : r.ops.value()) {
      const std::string key = op.name + " (" + op.phase + ")";
      if (!per_op.count(key)) op_order.push_back(key);
      per_op[key][r.recipe] += op.step_ms;
      group_of[key] = op_group(op.kind);
    }
  // The ops that matter: largest first; the rest are summed by kind below.
  std::sort(op_order.begin(), op_order.end(), [&](const std::string& a, const std::string& b) {
    auto mx = [&](const std::string& k) {
      double m = 0;
      for (const auto& [_, v] : per_op[k]) m = std::max(m, v);
      return m;
    };
    return mx(a) > mx(b);
  });
  const size_t shown = std::min<size_t>(op_order.size(), 16);
  std::vector<Row> orows;
  Json pd;
  pd["file"] = "speed.png";
  pd["title"] = fmt::format("Time per op in one step ({}), {}", o.model, modelled ? "modelled" : "measured");
  pd["unit"] = "ms per step";
  pd["modelled"] = modelled;
  Json ops_j = Json::array();
  Json per_recipe = Json::object();
  for (const speed::RecipeSpeed& r : recs) per_recipe[r.recipe] = Json::array();
  auto add_row = [&](const std::string& label, const std::map<std::string, double>& v) {
    Row row{label};
    ops_j.push_back(label);
    for (const speed::RecipeSpeed& r : recs) {
      const std::string& n = r.recipe;
      const auto it = v.find(n);
      const double ms = it == v.end() ? 0.0 : it->second;
      row.push_back(it == v.end() ? "-" : fmt_num(ms, 3));
      per_recipe[n].push_back(ms);
    }
    orows.push_back(std::move(row));
  };
  for (size_t i = 0; i < shown; ++i) add_row(op_order[i], per_op[op_order[i]]);
  // The smaller ops, gathered by the kind of work they do (largest group first).
  std::map<std::string, std::map<std::string, double>> rest;
  std::map<std::string, int> rest_ops;
  for (size_t i = shown; i < op_order.size(); ++i) {
    const std::string& g = group_of[op_order[i]];
    rest_ops[g] += 1;
    for (const auto& [k, v] : per_op[op_order[i]]) rest[g][k] += v;
  }
  std::vector<std::string> groups;
  for (const auto& [g, _] : rest) groups.push_back(g);
  auto total_of = [&](const std::string& g) {
    double t = 0;
    for (const auto& [_, v] : rest[g]) t = std::max(t, v);
    return t;
  };
  std::stable_sort(groups.begin(), groups.end(),
                   [&](const std::string& a, const std::string& b) { return total_of(a) > total_of(b); });
  for (const auto& g : groups)
    add_row(fmt::format("other {} ({} op{})", g, rest_ops[g], rest_ops[g] == 1 ? "" : "s"), rest[g]);
  // Communication the compute does not hide (FSDP gathers and reduce-scatters), when modelled.
  bool any_comm = false;
  std::map<std::string, double> comm, total;
  for (const speed::RecipeSpeed& r : recs) {
    const double c = r.comm_ms;  // the part of the step the compute does not hide
    if (std::isfinite(c) && c > 0) any_comm = true;
    comm[r.recipe] = std::isfinite(c) ? c : 0.0;
    total[r.recipe] = r.step_ms;
  }
  if (any_comm) add_row("communication (not overlapped)", comm);
  if (!orows.empty()) {
    Row oheader{"op (phase)"};
    for (const speed::RecipeSpeed& r : recs) oheader.push_back(r.recipe + " ms");
    Row total_row{"**total step**"};
    Json totals = Json::object();
    for (const speed::RecipeSpeed& r : recs) {
      total_row.push_back("**" + fmt_num(total[r.recipe], 4) + "**");
      totals[r.recipe] = total[r.recipe];
    }
    orows.push_back(std::move(total_row));
    s.table("Largest ops, the rest by kind, and the total (time per step: per-layer ops x layers)", oheader, orows,
            fmt::format("`-`: the recipe does not run this op. The {} largest ops are listed one by one; the others "
                        "are summed by kind (quantize/cast: FP8 casts, transposes and the scale reductions; norms; "
                        "elementwise: residual adds, SwiGLU, RoPE; attention; embedding and loss; optimizer){}. "
                        "The rows add up to the total step. Every op with its shape, kernel, TFLOP/s or GB/s and "
                        "source (measured or fitted) is in `data.speed.recipes[].ops`.",
                        shown,
                        any_comm ? "; communication is the part of FSDP's traffic the compute does not hide"
                                 : "; communication is not modelled in this run"));
    pd["ops"] = std::move(ops_j);
    pd["recipes"] = std::move(per_recipe);
    pd["totals"] = std::move(totals);
    ctx.plot_data["speed"] = std::move(pd);
    s.plot("speed.png", fmt::format("Total step time (top) and time per op, the smaller ops by kind (bottom), per "
                                    "recipe ({}).",
                                    modelled ? "modelled from the calibration" : "measured on this GPU"));
  }
}

void fig4b_table(Section& s, const speed::SpeedResult& res) {
  if (res.fig4b && !res.fig4b->empty()) {
    std::vector<Row> frows;
    for (const speed::Fig4bRow& r : *res.fig4b)
      frows.push_back({fmt::format("{}x{}", r.rows, r.cols), fmt_num(r.jit_amax_ms, 3), fmt_num(r.group_scaling_ms, 3),
                       fmt::format("{:.1f}x", r.speedup),
                       fmt::format("{} -> {}", fmt_num(r.paper_h100_jit_ms, 3), fmt_num(r.paper_h100_group_ms, 3)),
                       r.source});
    s.table("COAT Figure 4(b): per-tensor max, just-in-time vs Group Scaling",
            {"bf16 tensor", "just-in-time ms", "group scaling ms", "speedup", "paper (H100) ms", "source"}, frows,
            "Group scaling's cost is the extra work of computing per-group maxima in the producing kernel plus the "
            "second-stage reduce over them.");
  }
}

}  // namespace

Json section_speed(Context& ctx) {
  const char* id = "speed";
  const char* title = "Step time and throughput";
  return guarded(id, title, [&] {
    Section s(id, title);
    const auto& o = ctx.opts;
    speed::SpeedOptions so;
    so.model = o.model;
    so.batch = o.batch;
    so.seq = o.seq;
    so.gpus = o.gpus;
    so.command_line = o.command_line;
    so.drop_unmodelled = true;  // a recipe the calibration has no kernels for is named, not fatal
    so.recipes.clear();
    std::vector<std::string> skipped;
    for (const auto& r : o.recipes) {
      const recipe::TrainingRecipe& rec = recipe_of(r);
      if (rec.speed_plan) so.recipes.push_back({rec.name, *rec.speed_plan});
      else skipped.push_back(rec.name);
    }
    const std::vector<std::string> replayed = recipe::speed_names();
    if (so.recipes.empty()) {
      s.unavailable(
          fmt::format("the speed replay models {} only, and none of them is in --recipes", join_prose(replayed, "and")),
          fmt::format("add {} to --recipes", join_prose(replayed, "or")));
      return s.take();
    }
    const bool measure = gpu_available(ctx);
    if (!measure) {
      const std::filesystem::path cal = speed::default_calibration_path();
      std::error_code ec;
      if (!std::filesystem::exists(cal, ec)) {
        s.unavailable(
            fmt::format("no GPU here ({}) and no calibration file at `{}`", ctx.device.reason(), display_path(cal)),
            "run `fp8sim report` on a GPU machine (it measures the kernels there), or measure a calibration "
            "once on a GPU (`scripts/device/calibrate.sh` writes `reports/h200/calibration.json`) and point "
            "`FP8SIM_CALIBRATION` at it; the report then models the step from it.");
        return s.take();
      }
    }
    speed::SpeedResult res = speed::speed_report(so, measure ? &ctx.gpu : nullptr);
    const speed::SpeedTiming& timing = res.timing;
    const bool modelled = timing.modelled;
    describe_timing(s, timing, o);
    const std::vector<speed::RecipeSpeed>& recs = res.recipes;
    recipe_table(s, recs);
    max_batch_comparison(ctx, s, so, measure, modelled);

    category_table(s, recs);
    op_table(ctx, s, recs, modelled);
    fig4b_table(s, res);
    if (!skipped.empty()) {
      std::string l;
      for (const auto& r : skipped) l += (l.empty() ? "" : ", ") + r;
      s.para(fmt::format("Not in the speed replay (it models {}): {}.", join_prose(replayed, "and"), l));
    }
    for (const speed::SkippedRecipe& r : res.skipped_recipes)
      s.para(fmt::format("Left out of the speed replay: {}: {}.", r.recipe, r.why));
    ctx.data["speed"] = res.to_json();
    return s.take();
  });
}

}  // namespace fp8sim::report
