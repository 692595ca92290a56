// The GPU sections: CPU-vs-GPU bit comparison (fp8sim compare) and kernel throughput
// (fp8sim bench). Both need a GPU; without one they say so and how to get them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/bench/bench.hpp"
#include "sim/compare/compare.hpp"
#include "sim/report/sections.hpp"

namespace fp8sim::report {

namespace {

std::string why_no_gpu(const Context& ctx) { return ctx.device.reason(); }

const char* kHowToGetGpu =
    "run `fp8sim report` on a machine with an NVIDIA Hopper GPU and an fp8sim built with CUDA "
    "(`cmake` finds nvcc; `CMAKE_CUDA_ARCHITECTURES=90a`). For a GPU host without the development "
    "packages, `scripts/device/report.sh` runs the packaged binary there and writes the report "
    "(the committed example is `reports/h200/`).";

std::string number_cell(double x, int sig = 4) {
  if (x == static_cast<double>(static_cast<long long>(x)) && std::fabs(x) < 1e15)
    return fmt::format("{}", static_cast<long long>(x));
  return fmt_num(x, sig);
}

std::string cell(const std::optional<double>& v) { return v ? number_cell(*v) : ""; }

// The cell of one member of a JSON object (compare's entries, whose columns are their members).
std::string cell(const Json& obj, const char* key, int sig = 4) {
  const Json* v = obj.find(key);
  if (!v || v->is_null()) return "";
  if (v->is_string()) return v->as_string();
  if (v->is_bool()) return v->as_bool() ? "yes" : "no";
  if (v->is_number()) return number_cell(v->as_number(), sig);
  if (v->is_array()) {
    std::string s;
    for (const auto& e : v->as_array()) s += (s.empty() ? "" : "x") + (e.is_number() ? fmt_num(e.as_number(), 6) : "?");
    return s;
  }
  return "";
}

}  // namespace

Json section_compare(Context& ctx) {
  const char* id = "compare";
  const char* title = "CPU emulator vs GPU kernels (bit comparison)";
  return guarded(id, title, [&] {
    Section s(id, title);
    s.para(
        "Every op runs on the CPU emulator and on the GPU over the trace's real tensors. Casts, quantizers, "
        "dynamic range expansion and the optimizer step must produce identical codes (0 differing); GEMMs "
        "are checked against the CPU reference GEMM within a tolerance derived from K and the formats.");
    if (!ctx.device.available) {
      s.unavailable("no GPU: " + why_no_gpu(ctx), kHowToGetGpu);
      return s.take();
    }
    // The quick variant, so the whole report stays within minutes: the full run is `fp8sim compare`
    // (reports/h200/compare.md).
    compare::CompareOptions co;
    co.trace_path = ctx.opts.trace.string();
    co.max_tensors = kCompareTensorsPerOp;
    co.command_line = ctx.opts.command_line;
    const compare::CompareResult res = compare::compare_trace(co, ctx.gpu);
    std::vector<Json> ops;
    for (const auto& e : res.ops) ops.push_back(compare::entry_json(e));
    // Columns: what ran, on what, and how far apart the two sides are: every entry's members of
    // these kinds, whichever op families ran.
    std::vector<std::string> keys = {"op"};
    for (const char* k : {"spec", "recipe", "config"})
      for (const auto& op : ops)
        if (op.contains(k) && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    for (const char* k : {"tensor", "elements", "differing_codes"}) keys.push_back(k);
    for (const auto& op : ops)
      for (const auto& [k, v] : op.as_object())
        if (std::find(keys.begin(), keys.end(), k) == keys.end() && (v.is_number() || v.is_bool()) &&
            (k.find("differ") != std::string::npos || k.find("ulp") != std::string::npos || k == "passed"))
          keys.push_back(k);
    std::vector<Row> rows;
    for (const auto& op : ops) {
      Row r;
      for (const auto& k : keys) r.push_back(cell(op, k.c_str()));
      rows.push_back(std::move(r));
    }
    Row header(keys.begin(), keys.end());
    s.para(
        fmt::format("{} op/tensor pairs compared ({} tensors per op family: the quick run; `fp8sim compare TRACE` "
                    "compares every tensor); {} failed.",
                    ops.size(), kCompareTensorsPerOp, res.summary.failed));
    s.table("CPU vs GPU, per op and tensor", header, rows);
    Json pd;
    pd["file"] = "compare.png";
    pd["title"] = "CPU emulator vs GPU: differing codes per op (green: identical)";
    pd["bad_column"] = "differing_codes";  // red where the two sides differ
    Json h = Json::array(), rs = Json::array();
    const size_t show = std::min<size_t>(keys.size(), 6);  // a readable image; the table has all columns
    for (size_t i = 0; i < show; ++i) h.push_back(keys[i]);
    for (const auto& r : rows) {
      Json row = Json::array();
      for (size_t i = 0; i < show; ++i) row.push_back(r[i]);
      rs.push_back(std::move(row));
    }
    pd["header"] = std::move(h);
    pd["rows"] = std::move(rs);
    ctx.plot_data["compare"] = std::move(pd);
    s.plot("compare.png", "CPU vs GPU compare table (red rows have differing codes).");
    ctx.data["compare"] = res.to_json();
    return s.take();
  });
}

Json section_bench(Context& ctx) {
  const char* id = "bench";
  const char* title = "Kernel throughput on the GPU";
  return guarded(id, title, [&] {
    Section s(id, title);
    s.para(
        "Each kernel's median time over warm, L2-flushed repeats, its bandwidth or FLOP rate, the device-to-device "
        "copy bandwidth measured in the same run as the ceiling, and the best peer (PyTorch eager, torch.compile, "
        "torch._scaled_mm, torch's fused AdamW, COAT's kernels) where one ran.");
    if (!ctx.device.available) {
      s.unavailable("no GPU: " + why_no_gpu(ctx), kHowToGetGpu);
      return s.take();
    }
    // The quick (smoke) variant: the full run is `fp8sim bench` (reports/h200/bench.md).
    bench::BenchOptions bo;
    bo.smoke = true;
    bo.command_line = ctx.opts.command_line;
    const bench::BenchDoc doc = ctx.gpu.run_bench(bo);
    s.para(
        "Quick (smoke) sizes and repetitions, so the report stays within minutes: the full measurement on large "
        "tensors and Llama-2-7B shapes, with PyTorch and COAT peers, is `fp8sim bench` (see `reports/h200/bench.md`).");
    std::vector<Row> rows;
    for (const auto& k : doc.kernels) {
      Row r{k.kernel,
            cell(k.median_ms),
            cell(k.gbps),
            cell(k.tflops),
            cell(k.ceiling_gbps),
            k.peer.value_or(""),
            cell(k.peer_median_ms)};
      r.push_back(k.peer_median_ms && k.median_ms && *k.median_ms > 0
                      ? fmt::format("{:.2f}x", *k.peer_median_ms / *k.median_ms)
                      : "");
      rows.push_back(std::move(r));
    }
    s.table("Kernels",
            {"kernel", "median ms", "GB/s", "TFLOP/s", "copy ceiling GB/s", "peer", "peer ms", "speedup vs peer"},
            rows);
    ctx.data["bench"] = doc.to_json();
    return s.take();
  });
}

}  // namespace fp8sim::report
