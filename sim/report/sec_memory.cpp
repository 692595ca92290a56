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
    std::vector<memory::MemoryResult> results;  // one per recipe, in order; their names are distinct
    for (const auto& r : recipes) {
      mo.recipe = r;
      results.push_back(memory::memory_breakdown(o.model, mo));
    }
    auto result_of = [&](const std::string& name) -> const memory::MemoryResult* {
      const auto it =
          std::find_if(results.begin(), results.end(), [&](const memory::MemoryResult& m) { return m.recipe == name; });
      return it == results.end() ? nullptr : &*it;
    };
    const memory::Footprint& first = results.front().footprint;
    const std::string& model_name = first.model.display_name;
    s.para(fmt::format(
        "Per-GPU memory of one training step of **{}** ({:.3f} B parameters) at micro-batch {} x sequence {}, "
        "{}, computed by `fp8sim memory` from the model's tensor list and each recipe's storage (every term "
        "is named and explained in `data.memory.<recipe>.components`). The peak is the largest phase of the step "
        "(`torch.cuda.max_memory_allocated` semantics: no CUDA context, no fragmentation). Capacity: {:.2f} GiB, "
        "an H100 80GB as the COAT paper's GPU reports it. GiB = 2^30 bytes (the paper's \"GB\").",
        model_name, static_cast<double>(first.params) / 1e9, o.batch, o.seq, results.front().sharding,
        first.opts.gpu_mem_gib));

    const memory::MemoryResult* bf16 = result_of("bf16");
    const double bf16_peak = bf16 ? memory::gib(bf16->footprint.peak) : std::nan("");
    std::vector<Row> rows;
    for (const auto& d : results) {
      const std::string& r = d.recipe;
      const memory::Footprint& f = d.footprint;
      const double peak = memory::gib(f.peak);
      const int64_t max_batch = d.max_batch.value();
      ctx.add_figure(r, "peak_gib", peak, fmt_fixed(peak, 2), id);
      ctx.add_figure(r, "max_batch", static_cast<double>(max_batch), fmt::format("{}", max_batch), id);
      if (std::isfinite(bf16_peak))
        ctx.add_figure(r, "memory_saving_vs_bf16", bf16_peak / peak, fmt::format("{:.2f}x", bf16_peak / peak), id);
      rows.push_back({r, fmt_fixed(memory::gib(f.weights), 2), fmt_fixed(memory::gib(f.gradients), 2),
                      fmt_fixed(memory::gib(f.optimizer()), 2), fmt_fixed(memory::gib(f.activations_total), 2),
                      fmt_fixed(memory::gib(f.temporaries_at_peak()), 2), fmt_fixed(memory::gib(f.other_persistent), 2),
                      fmt_fixed(peak, 2), f.fits() ? "yes" : "**OOM**", fmt::format("{}", max_batch),
                      std::isfinite(bf16_peak) ? fmt::format("{:.2f}x", bf16_peak / peak) : "n/a"});
      ctx.add_summary(r, "peak GiB/GPU", fmt_fixed(peak, 1));
      ctx.add_summary(r, "optimizer GiB/GPU", fmt_fixed(memory::gib(f.optimizer()), 2));
      ctx.add_summary(r, "max batch", fmt::format("{}", max_batch));
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
      const memory::MemoryResult* d = result_of(e.recipe);
      if (!d) continue;
      const memory::Footprint& f = d->footprint;
      auto pair = [](double ours, double paper) {
        return std::isfinite(paper) ? fmt::format("{:.1f} / {:.1f}", ours, paper) : fmt::format("{:.1f} / -", ours);
      };
      paper_rows.push_back(
          {e.recipe, pair(memory::gib(f.optimizer()), e.optimizer_gib),
           pair(memory::gib(f.activations_total), e.activations_gib),
           e.oom ? fmt::format("{:.1f} / OOM", memory::gib(f.peak)) : pair(memory::gib(f.peak), e.peak_gib),
           fmt::format("{} / {}", d->max_batch_pow2.value(), e.max_batch)});
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
    const char* names[] = {"weights",     "gradients",           "optimizer states",  "optimizer metadata",
                           "activations", "temporaries at peak", "other (workspaces)"};
    Json comps = Json::array();
    for (const char* n : names) comps.push_back(n);
    pd["components"] = std::move(comps);
    Json per = Json::object(), peaks = Json::object();
    for (const auto& d : results) {
      const memory::Footprint& f = d.footprint;
      Json v = Json::array();
      for (int64_t b : {f.weights, f.gradients, f.optimizer_states, f.optimizer_metadata, f.activations_total,
                        f.temporaries_at_peak(), f.other_persistent})
        v.push_back(memory::gib(b));
      per[d.recipe] = std::move(v);
      peaks[d.recipe] = memory::gib(f.peak);
    }
    pd["recipes"] = std::move(per);
    pd["peak"] = std::move(peaks);
    pd["capacity_gib"] = first.opts.gpu_mem_gib;
    ctx.plot_data["memory"] = std::move(pd);
    s.plot("memory.png", "Per-GPU memory by component for each recipe (the label on each bar is the peak).");
    if (recipes.size() < o.recipes.size())
      s.para(fmt::format("Recipes without a memory model are not shown: memory covers {}.",
                         join_prose(memory::recipe_names(), "and")));
    Json docs = Json::object();
    for (const auto& d : results) docs[d.recipe] = d.to_json();
    ctx.data["memory"] = std::move(docs);
    return s.take();
  });
}

}  // namespace fp8sim::report
