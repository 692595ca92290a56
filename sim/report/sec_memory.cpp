// Memory section: fp8sim memory's per-GPU footprint for each recipe, side by side, as a table
// and stacked bars, with COAT's Table 7 row beside it when the configuration is one of the
// paper's.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/memory/memory.hpp"
#include "sim/memory/paper.hpp"
#include "sim/report/sections.hpp"

namespace fp8sim::report {

namespace {

double num(const Json& j, const char* key) {
  const Json* v = j.find(key);
  return v && v->is_number() ? v->as_number() : std::nan("");
}

// The --recipes entries whose recipe has a memory model, in order.
std::vector<std::string> memory_recipes(const std::vector<std::string>& wanted) {
  std::vector<std::string> out;
  for (const auto& r : wanted)
    if (recipe_of(r).memory) out.push_back(r);
  return out;
}

}  // namespace

Json section_memory(Context& ctx) {
  const char* id = "memory";
  const char* title = "Memory per GPU";
  return guarded(id, title, [&] {
    Section s(id, title);
    const auto& o = ctx.opts;
    memory::MemoryOptions mo;
    mo.gpus = o.gpus;
    mo.batch = o.batch;
    mo.seq = o.seq;
    mo.zero = 3;  // FSDP FULL_SHARD, the paper's setting
    const std::vector<std::string> recipes = memory_recipes(o.recipes);
    if (recipes.empty()) {
      s.unavailable(fmt::format("none of the recipes ({}) has a memory model",
                                [&] {
                                  std::string l;
                                  for (const auto& r : o.recipes) l += (l.empty() ? "" : ", ") + r;
                                  return l;
                                }()),
                    fmt::format("add one of {} to --recipes", recipe::join(memory::recipe_names())));
      return s.take();
    }
    Json docs = Json::object();
    std::vector<std::string> shown;  // the recipes' names, in order: the keys of `docs`
    for (const auto& r : recipes) {
      mo.recipe = r;
      shown.push_back(recipe_of(r).name);
      docs[shown.back()] = memory::memory_breakdown(o.model, mo);
    }
    const Json& first = docs.at(shown.front());
    const std::string model_name = first.at("model").is_object() && first.at("model").contains("display_name")
                                       ? first.at("model").at("display_name").as_string()
                                       : o.model;
    s.para(fmt::format(
        "Per-GPU memory of one training step of **{}** ({:.3f} B parameters) at micro-batch {} x sequence {}, "
        "{}, computed by `fp8sim memory` from the model's tensor list and each recipe's storage (every term "
        "is named and explained in `data.memory.<recipe>.components`). The peak is the largest phase of the step "
        "(`torch.cuda.max_memory_allocated` semantics: no CUDA context, no fragmentation). Capacity: {:.2f} GiB, "
        "an H100 80GB as the COAT paper's GPU reports it. GiB = 2^30 bytes (the paper's \"GB\").",
        model_name, num(first, "params") / 1e9, o.batch, o.seq,
        first.contains("sharding") ? first.at("sharding").as_string() : std::string("FSDP"),
        num(first, "gpu_mem_gib")));

    const double bf16_peak = docs.contains("bf16") ? num(docs.at("bf16"), "peak_gib") : std::nan("");
    std::vector<Row> rows;
    for (const auto& r : shown) {
      const Json& d = docs.at(r);
      const double peak = num(d, "peak_gib");
      const int64_t max_batch = d.at("max_batch").as_int();
      ctx.add_figure(r, "peak_gib", peak, fmt_fixed(peak, 2), id);
      ctx.add_figure(r, "max_batch", static_cast<double>(max_batch), fmt::format("{}", max_batch), id);
      if (std::isfinite(bf16_peak))
        ctx.add_figure(r, "memory_saving_vs_bf16", bf16_peak / peak, fmt::format("{:.2f}x", bf16_peak / peak), id);
      rows.push_back({r, fmt_fixed(num(d, "weights_gib"), 2), fmt_fixed(num(d, "gradients_gib"), 2),
                      fmt_fixed(num(d, "optimizer_gib"), 2), fmt_fixed(num(d, "activations_gib"), 2),
                      fmt_fixed(num(d, "temporaries_gib"), 2), fmt_fixed(num(d, "other_gib"), 2), fmt_fixed(peak, 2),
                      d.at("fits").as_bool() ? "yes" : "**OOM**", fmt::format("{}", d.at("max_batch").as_int()),
                      std::isfinite(bf16_peak) ? fmt::format("{:.2f}x", bf16_peak / peak) : "n/a"});
      ctx.add_summary(r, "peak GiB/GPU", fmt_fixed(peak, 1));
      ctx.add_summary(r, "optimizer GiB/GPU", fmt_fixed(num(d, "optimizer_gib"), 2));
      ctx.add_summary(r, "max batch", fmt::format("{}", d.at("max_batch").as_int()));
    }
    s.table("GiB per GPU",
            {"recipe", "weights", "gradients", "optimizer", "activations", "temporaries at peak", "other", "peak",
             "fits", "max batch", "memory saving vs bf16"},
            rows,
            "weights: master (+ working) copies; optimizer: AdamW moments with their scale / DE metadata; "
            "temporaries: what exists only in the peak phase (FSDP gathers, loss buffers, FP8 weight casts); "
            "max batch: the largest micro-batch whose peak fits.");

    // The paper's Table 7 row for this exact configuration, if it has one.
    std::vector<Row> paper_rows;
    for (const auto& e : memory::paper_table7()) {
      if (o.model != e.model || o.gpus != e.gpus || o.batch != e.batch || o.seq != e.seq) continue;
      if (!docs.contains(e.recipe)) continue;
      const Json& d = docs.at(e.recipe);
      auto pair = [](double ours, double paper) {
        return std::isfinite(paper) ? fmt::format("{:.1f} / {:.1f}", ours, paper) : fmt::format("{:.1f} / -", ours);
      };
      paper_rows.push_back(
          {e.recipe, pair(num(d, "optimizer_gib"), e.optimizer_gib), pair(num(d, "activations_gib"), e.activations_gib),
           e.oom ? fmt::format("{:.1f} / OOM", num(d, "peak_gib")) : pair(num(d, "peak_gib"), e.peak_gib),
           fmt::format("{} / {}", docs.at(e.recipe).at("max_batch_pow2").as_int(), e.max_batch)});
    }
    if (!paper_rows.empty())
      s.table("fp8sim / COAT paper Table 7 (H100 80 GB, same model, GPUs, batch and sequence)",
              {"recipe", "optimizer GiB", "activations GiB", "peak GiB", "max batch (powers of 2)"}, paper_rows,
              "The paper's max batch was searched over powers of two; fp8sim's column here does the same.");
    else
      s.para(
          "The COAT paper's Table 7 has no row for this model, GPU count, batch and sequence; "
          "`fp8sim memory --paper` prints every paper row beside fp8sim's prediction.");

    // Stacked bars: the groups that add up to the peak.
    Json pd;
    pd["file"] = "memory.png";
    pd["title"] = fmt::format("{} per GPU: {} GPU{}, micro-batch {} x {}", model_name, o.gpus, o.gpus == 1 ? "" : "s",
                              o.batch, o.seq);
    pd["unit"] = "GiB";
    const char* keys[] = {
        "weights_gib",     "gradients_gib", "optimizer_states_gib", "optimizer_metadata_gib", "activations_gib",
        "temporaries_gib", "other_gib"};
    const char* names[] = {"weights",     "gradients",           "optimizer states",  "optimizer metadata",
                           "activations", "temporaries at peak", "other (workspaces)"};
    Json comps = Json::array();
    for (const char* n : names) comps.push_back(n);
    pd["components"] = std::move(comps);
    Json per = Json::object(), peaks = Json::object();
    for (const auto& r : shown) {
      Json v = Json::array();
      for (const char* k : keys) v.push_back(num(docs.at(r), k));
      per[r] = std::move(v);
      peaks[r] = num(docs.at(r), "peak_gib");
    }
    pd["recipes"] = std::move(per);
    pd["peak"] = std::move(peaks);
    pd["capacity_gib"] = num(first, "gpu_mem_gib");
    ctx.plot_data["memory"] = std::move(pd);
    s.plot("memory.png", "Per-GPU memory by component for each recipe (the label on each bar is the peak).");
    if (recipes.size() < o.recipes.size())
      s.para(fmt::format("Recipes without a memory model are not shown: memory covers {}.",
                         join_prose(memory::recipe_names(), "and")));
    ctx.data["memory"] = std::move(docs);
    return s.take();
  });
}

}  // namespace fp8sim::report
