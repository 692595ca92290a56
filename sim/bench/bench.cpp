#include "sim/bench/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "sim/common/check.hpp"

namespace fp8sim::bench {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "x" : "") + std::to_string(s[i]);
  return t;
}

BenchItem quant_item(const std::string& op, const std::string& spec, const std::string& dtype,
                     const std::vector<int64_t>& shape, const std::string& variant = "") {
  BenchItem it;
  it.op = op;
  it.spec = spec;
  it.dtype = dtype;
  it.shape = shape;
  it.variant = variant;
  it.key = fmt::format("{}|{}|{}|{}{}", op, spec, dtype, shape_text(shape), variant.empty() ? "" : "|" + variant);
  it.label =
      fmt::format("{} {} {} {}{}", op, spec, dtype, shape_text(shape), variant.empty() ? "" : " (" + variant + ")");
  return it;
}

BenchItem gemm_item(int64_t m, int64_t n, int64_t k, const std::string& xf, const std::string& wf,
                    const std::string& scaling, const std::string& accum) {
  BenchItem it;
  it.op = "gemm";
  it.m = m;
  it.gn = n;
  it.k = k;
  it.x_format = xf;
  it.w_format = wf;
  it.scaling = scaling;
  it.accum = accum;
  it.dtype = xf;
  const std::string cfg = xf == "bf16" ? std::string("bf16") : fmt::format("{}x{} {} {}", xf, wf, scaling, accum);
  it.key = fmt::format("gemm|{}|{}x{}x{}", cfg, m, n, k);
  it.label = fmt::format("gemm {} M={} N={} K={}", cfg, m, n, k);
  return it;
}

BenchItem adamw_item(const std::string& recipe, int64_t n) {
  BenchItem it;
  it.op = "adamw";
  it.spec = recipe;
  it.dtype = "f32";
  it.n = n;
  it.key = fmt::format("adamw|{}|{}", recipe, n);
  it.label = fmt::format("adamw step, {} states, {}M params", recipe, n >> 20);
  // Every recipe is compared with torch's fused fp32 AdamW (timed once under the fp32 key); the
  // COAT recipes also with COAT's own kernels (timed under their own key).
  if (recipe != "fp32") it.extra_peer_keys.push_back(fmt::format("adamw|fp32|{}", n));
  it.peers = recipe == "fp32" || recipe == "coat" || recipe == "coat-noexpand";
  return it;
}

bool wanted(const BenchOptions& o, const std::string& op) {
  return o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end();
}

}  // namespace

Json BenchItem::to_json() const {
  Json j = Json::object();
  j["key"] = key;
  j["op"] = op;
  j["label"] = label;
  if (!spec.empty()) j["spec"] = spec;
  j["dtype"] = dtype;
  if (!variant.empty()) j["variant"] = variant;
  if (!shape.empty()) {
    Json s = Json::array();
    for (auto d : shape) s.push_back(d);
    j["shape"] = std::move(s);
  }
  if (op == "adamw") {
    j["n"] = n;
    j["recipe"] = spec;
  }
  if (op == "copy") j["bytes"] = n;
  if (op == "gemm") {
    j["m"] = m;
    j["n"] = gn;
    j["k"] = k;
    j["x_format"] = x_format;
    j["w_format"] = w_format;
    j["scaling"] = scaling;
    j["accum"] = accum;
  }
  j["peers"] = peers;
  j["compile"] = compile;
  return j;
}

const std::vector<std::string>& known_ops() {
  static const std::vector<std::string> ops = {"copy", "cast", "quantize", "dequantize", "amax", "adamw", "gemm"};
  return ops;
}

void validate_ops(const std::vector<std::string>& ops) {
  for (const auto& o : ops) {
    const auto& k = known_ops();
    if (std::find(k.begin(), k.end(), o) == k.end()) {
      std::string list;
      for (const auto& x : k) list += (list.empty() ? "" : ", ") + x;
      throw UsageError(fmt::format("unknown op '{}' (valid: {})", o, list));
    }
  }
}

std::vector<BenchItem> make_plan(const BenchOptions& o) {
  validate_ops(o.ops);
  std::vector<BenchItem> plan;
  const bool s = o.smoke;
  // The ceiling is measured in every run (the other ops' fractions refer to it).
  {
    BenchItem c;
    c.op = "copy";
    c.n = s ? (int64_t{256} << 20) : (int64_t{1} << 30);
    c.key = fmt::format("copy|{}", c.n);
    c.label = fmt::format("device-to-device copy {} MiB", c.n >> 20);
    plan.push_back(c);
  }
  // Sizes of several hundred MB, and Llama-2-7B shapes (hidden 4096, MLP 11008, 8192 tokens).
  const std::vector<int64_t> big = s ? std::vector<int64_t>{4096, 4096} : std::vector<int64_t>{16384, 11008};
  const std::vector<int64_t> act = s ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{8192, 4096};
  if (wanted(o, "cast")) {
    const std::vector<int64_t> cs = s ? std::vector<int64_t>{4096, 4096} : std::vector<int64_t>{16384, 16384};
    plan.push_back(quant_item("cast", "e4m3", "f32", cs));
    plan.push_back(quant_item("cast", "e4m3", "bf16", cs));
    if (!s) plan.push_back(quant_item("cast", "e5m2", "bf16", cs));
    // The bf16 cast at the Llama activation shape too: what a kernel with no group arithmetic
    // reaches on 96 MiB of traffic, the reference for the quantizers timed at that shape.
    if (!s) plan.push_back(quant_item("cast", "e4m3", "bf16", act));
    auto dec = quant_item("cast", "e4m3", "e4m3", cs, "decode");  // codes -> fp32
    dec.label = fmt::format("cast e4m3 -> f32 {}", shape_text(cs));
    dec.peers = false;
    plan.push_back(dec);
  }
  if (wanted(o, "quantize")) {
    std::vector<std::pair<std::string, std::string>> specs = {
        {"e4m3:g128", ""}, {"e4m3:tensor", "jit"}, {"e4m3:tensor", "group-scaling"}};
    if (!s) {
      specs.insert(specs.end(), {{"e4m3:tensor:delayed=1024,max", "delayed"},
                                 {"e4m3:row", ""},
                                 {"e4m3:g16:scale=bf16:eps=1e-10", ""},
                                 {"e4m3:g32:scale=e8m0", ""},
                                 {"e4m3:b128x128", ""},
                                 {"e5m2:tensor", "jit"}});
    }
    for (const auto& shape : s ? std::vector<std::vector<int64_t>>{big} : std::vector<std::vector<int64_t>>{big, act}) {
      for (const auto& [spec, variant] : specs) {
        auto it = quant_item("quantize", spec, "bf16", shape, variant);
        // torch.compile costs seconds per variant on the device: compile the peers of the large
        // shape and of the two recipes that matter most at the Llama activation shape.
        it.compile = shape == big || spec == "e4m3:g128" || (spec == "e4m3:tensor" && variant == "jit");
        // group-scaling and delayed have no separate torch formulation: compare with the same
        // spec's JIT peers.
        if (variant == "group-scaling" || variant == "delayed") {
          it.peers = false;
          it.extra_peer_keys.push_back(
              fmt::format("quantize|{}|bf16|{}|jit", spec.substr(0, spec.find(":delayed")), shape_text(shape)));
        }
        plan.push_back(it);
      }
    }
    // Dynamic range expansion on fp32 optimizer-state-like data (COAT's optimizer groups).
    const std::vector<int64_t> de = s ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{4096, 11008};
    plan.push_back(quant_item("quantize", "e4m3:g128:de=coat", "f32", de));
    if (!s) plan.push_back(quant_item("quantize", "e4m3:g128:de=robust", "f32", de));
  }
  if (wanted(o, "dequantize")) {
    for (const char* spec : {"e4m3:g128", "e4m3:tensor"}) {
      auto it = quant_item("dequantize", spec, "bf16", big);
      it.peers = false;
      plan.push_back(it);
    }
    const std::vector<int64_t> de = s ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{4096, 11008};
    auto it = quant_item("dequantize", "e4m3:g128:de=coat", "f32", de);
    it.peers = false;
    plan.push_back(it);
  }
  if (wanted(o, "amax")) {
    // COAT Figure 4(b): the per-tensor max of 11008x16384 bf16, just-in-time vs group scaling.
    const std::vector<int64_t> fig = s ? std::vector<int64_t>{4096, 4096} : std::vector<int64_t>{11008, 16384};
    auto jit = quant_item("amax", "max-abs", "bf16", fig, "jit");
    plan.push_back(jit);
    auto st2 = quant_item("amax", "max-abs", "bf16", fig, "stage2");
    st2.peers = false;
    st2.extra_peer_keys.push_back(jit.key);
    plan.push_back(st2);
  }
  if (wanted(o, "adamw")) {
    const int64_t n = s ? (int64_t{16} << 20) : (int64_t{256} << 20);
    std::vector<std::string> recipes = {"fp32", "coat"};
    // NOT-RECIPES: optimizer-state presets (sim/optim/state_recipe.hpp), not training recipes.
    if (!s) recipes.insert(recipes.end(), {"coat-noexpand", "te-fp8", "fp8lm", "bf16"});
    for (const auto& r : recipes) plan.push_back(adamw_item(r, n));
  }
  if (wanted(o, "gemm")) {
    std::vector<std::array<int64_t, 3>> shapes;
    if (s) shapes = {{4096, 4096, 4096}};
    else shapes = {{8192, 11008, 4096}, {8192, 4096, 11008}, {8192, 12288, 4096}, {8192, 4096, 4096}};
    for (const auto& sh : shapes) {
      plan.push_back(gemm_item(sh[0], sh[1], sh[2], "bf16", "bf16", "none", "fp32"));
      plan.push_back(gemm_item(sh[0], sh[1], sh[2], "e4m3", "e4m3", "tensor", "fast"));
      plan.push_back(gemm_item(sh[0], sh[1], sh[2], "e4m3", "e4m3", "tensor", "split"));
      if (!s) {
        plan.push_back(gemm_item(sh[0], sh[1], sh[2], "e4m3", "e4m3", "row", "split"));
        plan.push_back(gemm_item(sh[0], sh[1], sh[2], "e4m3", "e4m3", "block", "split"));
        plan.push_back(gemm_item(sh[0], sh[1], sh[2], "e5m2", "e4m3", "tensor", "split"));
      }
    }
  }
  return plan;
}

Json plan_json(const BenchOptions& o) {
  Json j = Json::object();
  j["warmup"] = o.warmup;
  j["reps"] = o.reps;
  j["smoke"] = o.smoke;
  j["no_compile"] = o.smoke;                 // torch.compile takes seconds per variant: not in the smoke run
  j["gemm_cooldown_s"] = o.gemm_cooldown_s;  // bench_peers.py idles as long before each GEMM peer
  j["launch_lead_us"] = o.launch_lead_us;    // and keeps the GPU as long busy before each timed launch
  Json ks = Json::array();
  for (const auto& it : make_plan(o)) ks.push_back(it.to_json());
  j["kernels"] = std::move(ks);
  return j;
}

int merge_peers(Json& doc, const Json& peers_doc) {
  const Json* entries = peers_doc.find("entries");
  FP8SIM_REQUIRE(entries && entries->is_array(), "peers file has no 'entries' list (not written by bench_peers.py?)");
  Json* kernels = doc.is_object() ? const_cast<Json*>(doc.find("kernels")) : nullptr;
  if (!kernels || !kernels->is_array()) return 0;
  int merged = 0;
  for (auto& k : kernels->as_array()) {
    std::vector<std::string> keys;
    if (const Json* kk = k.find("key")) keys.push_back(kk->as_string());
    if (const Json* ex = k.find("extra_peer_keys"))
      for (const auto& e : ex->as_array()) keys.push_back(e.as_string());
    Json list = Json::array();
    const Json* best = nullptr;
    for (const auto& e : entries->as_array()) {
      const Json* ek = e.find("key");
      if (!ek || std::find(keys.begin(), keys.end(), ek->as_string()) == keys.end()) continue;
      Json p = Json::object();
      p["peer"] = e.find("peer") ? e.at("peer") : Json("?");
      p["status"] = e.find("status") ? e.at("status") : Json("?");
      if (const Json* m = e.find("median_ms")) p["median_ms"] = *m;
      if (const Json* m = e.find("min_ms")) p["min_ms"] = *m;
      if (const Json* m = e.find("max_ms")) p["max_ms"] = *m;
      list.push_back(p);
      const bool ok = e.find("status") && e.at("status").as_string() == "ok" && e.find("median_ms") &&
                      e.at("median_ms").is_number();
      if (ok && (!best || e.at("median_ms").as_number() < best->at("median_ms").as_number())) best = &e;
    }
    if (list.size() == 0) continue;
    k["peers"] = std::move(list);
    if (best) {
      k["peer"] = best->at("peer");
      k["peer_median_ms"] = best->at("median_ms");
      if (const Json* ours = k.find("median_ms"); ours && ours->is_number() && ours->as_number() > 0)
        k["speedup_vs_peer"] = best->at("median_ms").as_number() / ours->as_number();
      ++merged;
    }
  }
  return merged;
}

namespace {

// The median of the named peer among a kernel's peers, or NaN.
double peer_ms(const Json& k, const std::string& prefix) {
  const Json* ps = k.find("peers");
  if (!ps) return NAN;
  double best = NAN;
  for (const auto& p : ps->as_array()) {
    if (!p.find("status") || p.at("status").as_string() != "ok" || !p.find("median_ms")) continue;
    if (p.at("peer").as_string().rfind(prefix, 0) != 0) continue;
    const double v = p.at("median_ms").as_number();
    if (std::isnan(best) || v < best) best = v;
  }
  return best;
}

Json target(double value, double threshold, const std::string& what) {
  Json t = Json::object();
  t["what"] = what;
  t["target"] = threshold;
  if (std::isnan(value)) {
    t["value"] = nullptr;
    t["met"] = nullptr;  // unmeasured (the peer did not run)
  } else {
    t["value"] = value;
    t["met"] = value >= threshold;
  }
  return t;
}

bool same_bytes_ceiling(const Json& k) {
  const Json* kind = k.find("ceiling_kind");
  return kind && kind->is_string() && kind->as_string() == kSameBytesCeiling;
}

}  // namespace

void evaluate_targets(Json& doc) {
  Json* kernels = const_cast<Json*>(doc.find("kernels"));
  int met = 0, missed = 0, unmeasured = 0;
  auto count = [&](const Json& t) {
    const Json& m = t.at("met");
    if (m.is_null()) ++unmeasured;
    else if (m.as_bool()) ++met;
    else ++missed;
  };
  if (kernels && kernels->is_array()) {
    for (auto& k : kernels->as_array()) {
      if (!k.find("status") || k.at("status").as_string() != "ok") continue;
      const std::string op = k.at("op").as_string();
      const double ours = k.at("median_ms").as_number();
      Json ts = Json::object();
      if (op == "quantize") {
        const Json* f = k.find("fraction_of_ceiling");
        ts["copy_bandwidth"] =
            target(f && f->is_number() ? f->as_number() : NAN, 0.90,
                   same_bytes_ceiling(k) ? "bytes moved / time >= 90% of a same-run device copy of as many bytes"
                                         : "bytes moved / time >= 90% of the same-run device copy bandwidth");
        const double pm = peer_ms(k, "torch.compile");
        ts["vs_torch_compile"] = target(pm / ours, 1.25, "speedup over torch.compile >= 1.25x");
        // How fast the peer's time says we would have to be, as a fraction of the same-run copy
        // bandwidth (this kernel's bytes in peer_ms / 1.25): above 1 the target is out of reach
        // for any kernel that moves these bytes, whatever it computes.
        const Json* bytes = k.find("bytes");
        const Json* ceil = k.find("ceiling_gbps");
        if (bytes && bytes->is_number() && ceil && ceil->is_number() && ceil->as_number() > 0 && !std::isnan(pm) &&
            pm > 0) {
          const double need = bytes->as_number() / (pm / 1.25 * 1e-3) / 1e9 / ceil->as_number();
          Json& t = ts["vs_torch_compile"];
          t["needs_fraction_of_ceiling"] = need;
          t["reachable"] = need <= 1.0;
        }
      } else if (op == "adamw" && (k.at("spec").as_string() == "coat")) {
        ts["vs_torch_fused"] = target(peer_ms(k, "torch.optim.AdamW") / ours, 1.8,
                                      "params/s >= 1.8x torch.optim.AdamW(fused=True) with fp32 states");
        ts["vs_coat_kernel"] =
            target(peer_ms(k, "coat-kernel") / ours, 2.0, "params/s >= 2x COAT's fp8_adamw_expand_step");
      } else if (op == "gemm" && k.at("x_format").as_string() != "bf16") {
        ts["vs_scaled_mm"] = target(peer_ms(k, "torch._scaled_mm") / ours, 0.98, "TFLOP/s >= 0.98x torch._scaled_mm");
      }
      if (ts.as_object().empty()) continue;
      for (const auto& [name, t] : ts.as_object()) count(t);
      k["targets"] = std::move(ts);
    }
  }
  if (const Json* a = doc.find("coat_agreement"); a && a->find("target")) count(a->at("target"));
  Json s = Json::object();
  s["met"] = met;
  s["missed"] = missed;
  s["unmeasured"] = unmeasured;
  doc["targets_summary"] = std::move(s);
}

namespace {

std::string num(const Json* v, const char* f = "{:.4g}") { return num_or_dash(v, f); }

std::vector<std::string> row_of(const Json& k) {
  const bool ok = k.find("status") && k.at("status").as_string() == "ok";
  std::string rate = "-";
  if (const Json* g = k.find("gbps"); g && g->is_number()) rate = fmt::format("{:.0f} GB/s", g->as_number());
  if (const Json* t = k.find("tflops"); t && t->is_number()) rate = fmt::format("{:.0f} TFLOP/s", t->as_number());
  if (const Json* p = k.find("gparams_per_s"); p && p->is_number())
    rate = fmt::format("{:.1f} Gparam/s", p->as_number());
  std::string targets;
  if (const Json* ts = k.find("targets")) {
    for (const auto& [name, t] : ts->as_object()) {
      const Json& m = t.at("met");
      targets += fmt::format("{}{} {}", targets.empty() ? "" : "; ", name,
                             m.is_null() ? "n/a" : (m.as_bool() ? "met" : "MISSED"));
      if (const Json* need = t.find("needs_fraction_of_ceiling"); need && need->is_number() && need->as_number() > 1.0)
        targets += fmt::format(" (needs {:.0f}% of copy)", 100.0 * need->as_number());
    }
  }
  // Runs before the same-bytes ceiling held every kernel to the large copy: their fraction goes in
  // the large-copy column.
  auto pct = [&](const char* key) {
    const Json* f = ok ? k.find(key) : nullptr;
    return f && f->is_number() ? fmt::format("{:.0f}%", 100.0 * f->as_number()) : std::string("-");
  };
  const bool same = same_bytes_ceiling(k) || k.at("op").as_string() == "copy";
  return {k.at("kernel").as_string(),
          ok ? num(k.find("median_ms")) : "-",
          ok ? num(k.find("min_ms")) : "-",
          ok ? num(k.find("max_ms")) : "-",
          ok                 ? rate
          : k.find("status") ? k.at("status").as_string()
                             : "?",
          same ? pct("fraction_of_ceiling") : "-",
          same ? pct("fraction_of_large_copy") : pct("fraction_of_ceiling"),
          k.find("peer") ? k.at("peer").as_string() : "-",
          num(k.find("peer_median_ms")),
          num(k.find("speedup_vs_peer"), "{:.2f}x"),
          targets.empty() ? "-" : targets};
}

const std::vector<std::string> kHeader = {
    "kernel",        "median ms", "min ms",  "max ms",  "rate",   "of same-bytes copy",
    "of large copy", "best peer", "peer ms", "speedup", "targets"};

}  // namespace

const std::vector<std::string>& table_header() { return kHeader; }

std::vector<std::vector<std::string>> table_rows(const Json& doc) {
  std::vector<std::vector<std::string>> rows;
  if (const Json* ks = doc.find("kernels"))
    for (const auto& k : ks->as_array()) rows.push_back(row_of(k));
  return rows;
}

std::string render_markdown(const Json& doc) {
  std::string md = "# fp8sim bench\n\n";
  auto field = [&](const char* key) {
    return doc.find(key) && doc.at(key).is_string() ? doc.at(key).as_string() : std::string("-");
  };
  md += fmt::format("- command: `{}`\n- date: {}\n", field("command"), field("date"));
  if (doc.find("rerendered"))
    md += fmt::format("- targets re-evaluated from this run's JSON by: `{}`\n", field("rerendered"));
  if (const Json* m = doc.find("machine")) {
    for (const auto& [key, v] : m->as_object())
      md += fmt::format("- {}: {}\n", key, v.is_string() ? v.as_string() : v.dump(-1));
  }
  if (const Json* c = doc.find("ceiling"))
    md += fmt::format("- large copy (same run): device-to-device copy {} GB/s (bytes read + written)\n",
                      num(c->find("gbps"), "{:.0f}"));
  md +=
      "- ceiling of each memory-bound kernel: a device-to-device copy moving the same number of bytes, timed in "
      "the same run the same way (older runs, whose JSON has no ceiling_kind, held every kernel to the large "
      "copy: their fractions appear under \"of large copy\")\n";
  if (const Json* t = doc.find("targets_summary"))
    md += fmt::format("- targets: {} met, {} missed, {} unmeasured (peer absent)\n", t->at("met").dump(-1),
                      t->at("missed").dump(-1), t->at("unmeasured").dump(-1));
  if (doc.find("l2_flush")) md += fmt::format("- L2 flush before each timed launch: {}\n", field("l2_flush"));
  // A timing setting as the peers' file recorded it.
  auto peers_value = [&](const char* key) {
    const Json* v = doc.find(key);
    return v ? v->dump(-1) : std::string("no peers");
  };
  if (const Json* ll = doc.find("launch_lead_us")) {
    const std::string peer = peers_value("peers_launch_lead_us");
    if (const Json* lf = doc.find("launch_lead_flushes"))
      md += fmt::format(
          "- launch lead: the L2 flush runs {} times before each timed launch, at least {} us of GPU "
          "work (the peers' file: {}): the host enqueues the launch meanwhile, so host-side launch "
          "work (argument set-up, Python, torch.compile's guards and launchers) is not timed, and "
          "the GPU is busy up to the launch as in training\n",
          lf->dump(-1), ll->dump(-1), peer);
    else  // a document measured with an idle GPU-side wait instead of repeated flushes
      md += fmt::format(
          "- launch lead: a {} us GPU-side wait after the flush, before each timed launch (the peers' "
          "file: {}): the host enqueues the launch meanwhile, so host-side launch work is not timed\n",
          ll->dump(-1), peer);
  } else if (doc.find("l2_flush")) {
    md +=
        "- launch lead: none (a document measured without one): host-side launch work that outlasted the L2 flush "
        "was timed with the kernel\n";
  }
  if (const Json* gc = doc.find("gemm_cooldown_s")) {
    const std::string peer = peers_value("peers_gemm_cooldown_s");
    if (gc->is_number() && gc->as_number() > 0)
      md += fmt::format(
          "- GEMM timing: each GEMM starts after {} s idle (the peers' file: {}), so that every one "
          "starts from a similar thermal state instead of after whatever ran before it\n",
          gc->dump(-1), peer);
    else md += fmt::format("- GEMM timing: no idle before each GEMM (the peers' file: {})\n", peer);
  }
  if (const Json* gs = doc.find("gemm_search")) {
    if (gs->is_number() && gs->as_number() == 0)
      md += "- GEMM algorithm: the fastest of cuBLASLt's 8 heuristic candidates, each timed unflushed\n";
    else
      md += fmt::format(
          "- GEMM algorithm: the fastest of cuBLASLt's 8 heuristic candidates and of up to {} more "
          "configurations it accepts (bench --gemm-search), each timed unflushed\n",
          gs->dump(-1));
  }
  md +=
      "\nTimes are CUDA-event medians over warm, L2-flushed repeats. Rates count each input byte once "
      "and each output byte once. speedup = peer time / fp8sim time (> 1: fp8sim is faster).\n\n";
  md += "|";
  for (const auto& h : kHeader) md += " " + h + " |";
  md += "\n|";
  for (size_t i = 0; i < kHeader.size(); ++i) md += i == 0 ? "---|" : "---:|";
  md += "\n";
  if (const Json* ks = doc.find("kernels")) {
    for (const auto& k : ks->as_array()) {
      md += "|";
      for (const auto& c : row_of(k)) md += " " + c + " |";
      md += "\n";
    }
  }
  if (const Json* a = doc.find("coat_agreement"))
    md += "\n## Agreement with COAT's kernel\n\n```\n" + a->dump(2) + "\n```\n";
  return md;
}

}  // namespace fp8sim::bench
