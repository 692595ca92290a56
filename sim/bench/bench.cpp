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
  static const std::vector<std::string> ops = {"copy",       "cast", "quantize", "cast-transpose",
                                               "dequantize", "amax", "adamw",    "gemm"};
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
    // The large shape, then the activations of Llama-2-7B (8192 tokens x 4096 and x 11008) and
    // Llama-2-13B (x 5120 and x 13824), each with its torch.compile peer.
    std::vector<std::vector<int64_t>> qshapes = {big};
    if (!s) qshapes.insert(qshapes.end(), {act, {8192, 5120}, {8192, 11008}, {8192, 13824}});
    for (const auto& shape : qshapes) {
      for (const auto& [spec, variant] : specs) {
        auto it = quant_item("quantize", spec, "bf16", shape, variant);
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
    // The 4- and 6-bit quantizers at the Llama activation shape: NVFP4 with its tensor amax just
    // in time (two passes) and from a producer's maxima (one pass), with the RHT of the
    // weight-gradient operands, in 16x16 weight blocks; MXFP4 and MXFP6.
    // NOT-RECIPES: spec aliases (the quantizers of those names), not training recipes.
    std::vector<std::pair<std::string, std::string>> lowbit = {{"nvfp4", "jit"}, {"mxfp4", ""}};
    if (!s)
      lowbit.insert(lowbit.end(),
                    {{"nvfp4", "group-scaling"}, {"nvfp4:rht=16", "jit"}, {"nvfp4-w", "jit"}, {"mxfp6-e2m3", ""}});
    for (const auto& [spec, variant] : lowbit) {
      auto it = quant_item("quantize", spec, "bf16", act, variant);
      if (variant == "group-scaling") {
        it.peers = false;
        it.extra_peer_keys.push_back(fmt::format("quantize|{}|bf16|{}|jit", spec, shape_text(act)));
      }
      plan.push_back(it);
    }
    // Dynamic range expansion on fp32 optimizer-state-like data (COAT's optimizer groups).
    const std::vector<int64_t> de = s ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{4096, 11008};
    plan.push_back(quant_item("quantize", "e4m3:g128:de=coat", "f32", de));
    if (!s) plan.push_back(quant_item("quantize", "e4m3:g128:de=robust", "f32", de));
  }
  if (wanted(o, "cast-transpose")) {
    // TransformerEngine's cast_transpose: per-tensor FP8 codes in both layouts from one read (the
    // backward's weight-gradient GEMM reads the activation transposed), with the scale from the amax
    // history (one pass) or just in time (an amax pass first), at Llama-2-7B activation shapes.
    std::vector<std::pair<std::vector<int64_t>, std::string>> cts = {{act, "delayed"}, {act, "jit"}};
    if (!s) cts.push_back({{8192, 11008}, "delayed"});
    for (const auto& [shape, variant] : cts) {
      const std::string spec = variant == "delayed" ? "e4m3:tensor:delayed=1024,max" : "e4m3:tensor";
      plan.push_back(quant_item("cast-transpose", spec, "bf16", shape, variant));
    }
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

namespace {

// ---- reading and writing the document's members -------------------------------------------------

void read(const Json& v, std::string& out) { out = v.as_string(); }
void read(const Json& v, double& out) { out = v.is_null() ? NAN : v.as_number(); }
void read(const Json& v, int64_t& out) { out = v.as_int(); }
void read(const Json& v, bool& out) { out = v.as_bool(); }
void read(const Json& v, Json& out) { out = v; }
template <class T>
requires requires(const Json& j) { T::from_json(j); }
void read(const Json& v, T& out) { out = T::from_json(v); }
template <class T>
void read(const Json& v, std::vector<T>& out) {
  out.clear();
  for (const auto& e : v.as_array()) read(e, out.emplace_back());
}

Json json_of(const Json& v) { return v; }
template <class T>
requires requires(const T& t) { t.to_json(); }
Json json_of(const T& v) { return v.to_json(); }
template <class T>
Json json_of(const std::vector<T>& v) {
  Json a = Json::array();
  for (const auto& e : v) a.push_back(json_of(e));
  return a;
}

// A number the document holds: present and not NaN (null).
bool is_num(const std::optional<double>& x) { return x && !std::isnan(*x); }

// Visitors of (key, member) pairs: Reader fills the members from an object (a plain member must
// be there, an optional one may be absent), Writer puts them into one (an absent optional is left out).
struct Reader {
  const Json& j;
  template <class T>
  void operator()(const char* key, T& field) const {
    read(j.at(key), field);
  }
  template <class T>
  void operator()(const char* key, std::optional<T>& field) const {
    if (const Json* v = j.find(key)) read(*v, field.emplace());
  }
};

struct Writer {
  Json& j;
  template <class T>
  void operator()(const char* key, const T& field) const {
    j[key] = json_of(field);
  }
  template <class T>
  void operator()(const char* key, const std::optional<T>& field) const {
    if (field) j[key] = json_of(*field);
  }
};

// The members of each struct as (key, member) pairs in the document's order, for a Reader or a Writer.
void target_fields(auto& t, auto&& f) {
  f("copy_bandwidth", t.copy_bandwidth);
  f("vs_torch_compile", t.vs_torch_compile);
  f("vs_torch_fused", t.vs_torch_fused);
  f("vs_coat_kernel", t.vs_coat_kernel);
  f("vs_scaled_mm", t.vs_scaled_mm);
}

void kernel_fields(auto& k, auto&& f) {
  f("kernel", k.kernel);
  f("key", k.key);
  f("op", k.op);
  f("spec", k.spec);
  f("dtype", k.dtype);
  f("variant", k.variant);
  f("shape", k.shape);
  f("m", k.m);
  f("n", k.n);
  f("k", k.k);
  f("x_format", k.x_format);
  f("w_format", k.w_format);
  f("scaling", k.scaling);
  f("accum", k.accum);
  f("extra_peer_keys", k.extra_peer_keys);
  f("status", k.status);
  const bool note_after_timing = k.op == "amax";
  if (!note_after_timing) f("note", k.note);
  f("kernel_path", k.kernel_path);
  f("gemm", k.gemm);
  f("median_ms", k.median_ms);
  f("min_ms", k.min_ms);
  f("max_ms", k.max_ms);
  f("reps", k.reps);
  f("bytes", k.bytes);
  f("gbps", k.gbps);
  f("ceiling_gbps", k.ceiling_gbps);
  f("ceiling_kind", k.ceiling_kind);
  f("fraction_of_ceiling", k.fraction_of_ceiling);
  f("large_copy_gbps", k.large_copy_gbps);
  f("fraction_of_large_copy", k.fraction_of_large_copy);
  if (note_after_timing) f("note", k.note);
  f("params", k.params);
  f("gparams_per_s", k.gparams_per_s);
  f("state_bytes_per_param", k.state_bytes_per_param);
  f("flops", k.flops);
  f("tflops", k.tflops);
  f("peers", k.peers);
  f("peer", k.peer);
  f("peer_median_ms", k.peer_median_ms);
  f("speedup_vs_peer", k.speedup_vs_peer);
  f("targets", k.targets);
}

void ceiling_fields(auto& c, auto&& f) {
  f("what", c.what);
  f("bytes", c.bytes);
  f("median_ms", c.median_ms);
  f("gbps", c.gbps);
}

void summary_fields(auto& t, auto&& f) {
  f("met", t.met);
  f("missed", t.missed);
  f("unmeasured", t.unmeasured);
}

void doc_fields(auto& d, auto&& f) {
  f("command", d.command);
  f("date", d.date);
  f("machine", d.machine);
  f("warmup", d.warmup);
  f("reps", d.reps);
  f("l2_flush", d.l2_flush);
  f("gemm_search", d.gemm_search);
  f("gemm_cooldown_s", d.gemm_cooldown_s);
  f("launch_lead_us", d.launch_lead_us);
  f("launch_lead_flushes", d.launch_lead_flushes);
  f("smoke", d.smoke);
  f("kernels", d.kernels);
  f("ceiling", d.ceiling);
  f("peers_file", d.peers_file);
  f("peers_torch", d.peers_torch);
  f("peers_gemm_cooldown_s", d.peers_gemm_cooldown_s);
  f("peers_launch_lead_us", d.peers_launch_lead_us);
  f("coat_agreement", d.coat_agreement);
  f("targets_summary", d.targets_summary);
  f("rerendered", d.rerendered);
}

}  // namespace

PeerTiming PeerTiming::from_json(const Json& j) {
  PeerTiming p;
  const Json* peer = j.find("peer");
  const Json* status = j.find("status");
  p.peer = peer ? peer->as_string() : "?";
  p.status = status ? status->as_string() : "?";
  const Reader r{j};
  r("median_ms", p.median_ms);
  r("min_ms", p.min_ms);
  r("max_ms", p.max_ms);
  return p;
}

Json PeerTiming::to_json() const {
  Json j = Json::object();
  const Writer w{j};
  w("peer", peer);
  w("status", status);
  w("median_ms", median_ms);
  w("min_ms", min_ms);
  w("max_ms", max_ms);
  return j;
}

Peers Peers::from_json(const Json& j) {
  const Json* entries = j.find("entries");
  FP8SIM_REQUIRE(entries && entries->is_array(), "peers file has no 'entries' list (not written by bench_peers.py?)");
  Peers p;
  for (const auto& e : entries->as_array())
    if (const Json* key = e.find("key")) p.entries.push_back({key->as_string(), PeerTiming::from_json(e)});
  Reader{j}("torch", p.torch);
  for (auto [key, field] : {std::pair{"gemm_cooldown_s", &p.gemm_cooldown_s}, {"launch_lead_us", &p.launch_lead_us}})
    if (const Json* v = j.find(key); v && v->is_number()) *field = v->as_number();
  return p;
}

Target Target::from_json(const Json& j) {
  Target t;
  const Reader r{j};
  r("what", t.what);
  r("target", t.target);
  r("value", t.value);
  if (const Json& met = j.at("met"); !met.is_null()) t.met = met.as_bool();
  r("needs_fraction_of_ceiling", t.needs_fraction_of_ceiling);
  r("reachable", t.reachable);
  return t;
}

Json Target::to_json() const {
  Json j = Json::object();
  const Writer w{j};
  w("what", what);
  w("target", target);
  w("value", value);
  j["met"] = met ? Json(*met) : Json(nullptr);
  w("needs_fraction_of_ceiling", needs_fraction_of_ceiling);
  w("reachable", reachable);
  return j;
}

KernelTargets KernelTargets::from_json(const Json& j) {
  KernelTargets t;
  target_fields(t, Reader{j});
  return t;
}

Json KernelTargets::to_json() const {
  Json j = Json::object();
  target_fields(*this, Writer{j});
  return j;
}

BenchKernel BenchKernel::from_json(const Json& j) {
  BenchKernel k;
  kernel_fields(k, Reader{j});
  return k;
}

Json BenchKernel::to_json() const {
  Json j = Json::object();
  kernel_fields(*this, Writer{j});
  return j;
}

Ceiling Ceiling::from_json(const Json& j) {
  Ceiling c;
  ceiling_fields(c, Reader{j});
  return c;
}

Json Ceiling::to_json() const {
  Json j = Json::object();
  ceiling_fields(*this, Writer{j});
  return j;
}

CoatAgreement CoatAgreement::from_json(const Json& j) {
  CoatAgreement a;
  for (const auto& [key, v] : j.as_object()) {
    if (key == "target") a.target = Target::from_json(v);
    else a.detail[key] = v;
  }
  return a;
}

Json CoatAgreement::to_json() const {
  Json j = detail;
  Writer{j}("target", target);
  return j;
}

TargetsSummary TargetsSummary::from_json(const Json& j) {
  TargetsSummary t;
  summary_fields(t, Reader{j});
  return t;
}

Json TargetsSummary::to_json() const {
  Json j = Json::object();
  summary_fields(*this, Writer{j});
  return j;
}

BenchDoc BenchDoc::from_json(const Json& j) {
  BenchDoc d;
  doc_fields(d, Reader{j});
  return d;
}

Json BenchDoc::to_json() const {
  Json j = Json::object();
  doc_fields(*this, Writer{j});
  return j;
}

int merge_peers(BenchDoc& doc, const Peers& peers) {
  int merged = 0;
  for (auto& k : doc.kernels) {
    std::vector<std::string> keys;
    if (k.key) keys.push_back(*k.key);
    if (k.extra_peer_keys) keys.insert(keys.end(), k.extra_peer_keys->begin(), k.extra_peer_keys->end());
    std::vector<PeerTiming> list;
    const PeerTiming* best = nullptr;
    for (const auto& e : peers.entries) {
      if (std::find(keys.begin(), keys.end(), e.key) == keys.end()) continue;
      list.push_back(e.timing);
      const bool ok = e.timing.status == "ok" && is_num(e.timing.median_ms);
      if (ok && (!best || *e.timing.median_ms < *best->median_ms)) best = &e.timing;
    }
    if (list.empty()) continue;
    k.peers = std::move(list);
    if (best) {
      k.peer = best->peer;
      k.peer_median_ms = best->median_ms;
      if (is_num(k.median_ms) && *k.median_ms > 0) k.speedup_vs_peer = *best->median_ms / *k.median_ms;
      ++merged;
    }
  }
  return merged;
}

int attach_peers(BenchDoc& doc, const Peers& peers, const std::string& path) {
  auto setting = [](const std::optional<double>& v) { return v ? Json(*v) : Json("not recorded"); };
  doc.peers_file = path;
  doc.peers_torch = peers.torch;
  // The peers' timing settings beside ours: the GEMM comparison is fair only if the peers idled as
  // long before each GEMM, and without the launch lead a peer's host-side launch work beyond one
  // flush is timed as GPU time.
  doc.peers_gemm_cooldown_s = setting(peers.gemm_cooldown_s);
  doc.peers_launch_lead_us = setting(peers.launch_lead_us);
  for (auto& k : doc.kernels) {  // one file's peers only: none kept from a document's earlier file
    k.peers.reset();
    k.peer.reset();
    k.peer_median_ms.reset();
    k.speedup_vs_peer.reset();
  }
  return merge_peers(doc, peers);
}

namespace {

// The median of the named peer among a kernel's peers, or NaN.
double peer_ms(const BenchKernel& k, const std::string& prefix) {
  if (!k.peers) return NAN;
  double best = NAN;
  for (const auto& p : *k.peers) {
    if (p.status != "ok" || !p.median_ms) continue;
    if (p.peer.rfind(prefix, 0) != 0) continue;
    const double v = *p.median_ms;
    if (std::isnan(best) || v < best) best = v;
  }
  return best;
}

Target target(double value, double threshold, const std::string& what) {
  Target t;
  t.what = what;
  t.target = threshold;
  t.value = value;
  if (!std::isnan(value)) t.met = value >= threshold;  // else unmeasured (the peer did not run)
  return t;
}

bool same_bytes_ceiling(const BenchKernel& k) { return k.ceiling_kind == kSameBytesCeiling; }

// A member that the targets need: a document without it is not usable (Json::at's message).
template <class T>
const T& member(const std::optional<T>& v, const char* key) {
  FP8SIM_REQUIRE(v, "json: missing key '{}'", key);
  return *v;
}

// The targets that apply to a kernel that ran (none set: no target applies).
KernelTargets targets_of(const BenchKernel& k) {
  const double ours = member(k.median_ms, "median_ms");
  KernelTargets ts;
  if (k.op == "quantize") {
    ts.copy_bandwidth =
        target(is_num(k.fraction_of_ceiling) ? *k.fraction_of_ceiling : NAN, 0.90,
               same_bytes_ceiling(k) ? "bytes moved / time >= 90% of a same-run device copy of as many bytes"
                                     : "bytes moved / time >= 90% of the same-run device copy bandwidth");
    const double pm = peer_ms(k, "torch.compile");
    Target& t = ts.vs_torch_compile.emplace(target(pm / ours, 1.25, "speedup over torch.compile >= 1.25x"));
    // How fast the peer's time says we would have to be, as a fraction of the same-run copy
    // bandwidth (this kernel's bytes in peer_ms / 1.25): above 1 the target is out of reach
    // for any kernel that moves these bytes, whatever it computes.
    if (is_num(k.bytes) && is_num(k.ceiling_gbps) && *k.ceiling_gbps > 0 && !std::isnan(pm) && pm > 0) {
      const double need = *k.bytes / (pm / 1.25 * 1e-3) / 1e9 / *k.ceiling_gbps;
      t.needs_fraction_of_ceiling = need;
      t.reachable = need <= 1.0;
    }
  } else if (k.op == "cast-transpose") {
    ts.copy_bandwidth =
        target(is_num(k.fraction_of_ceiling) ? *k.fraction_of_ceiling : NAN, 0.85,
               same_bytes_ceiling(k) ? "bytes moved / time >= 85% of a same-run device copy of as many bytes"
                                     : "bytes moved / time >= 85% of the same-run device copy bandwidth");
  } else if (k.op == "adamw" && member(k.spec, "spec") == "coat") {
    ts.vs_torch_fused = target(peer_ms(k, "torch.optim.AdamW") / ours, 1.8,
                               "params/s >= 1.8x torch.optim.AdamW(fused=True) with fp32 states");
    ts.vs_coat_kernel = target(peer_ms(k, "coat-kernel") / ours, 2.0, "params/s >= 2x COAT's fp8_adamw_expand_step");
  } else if (k.op == "gemm" && member(k.x_format, "x_format") != "bf16") {
    ts.vs_scaled_mm = target(peer_ms(k, "torch._scaled_mm") / ours, 0.98, "TFLOP/s >= 0.98x torch._scaled_mm");
  }
  return ts;
}

// A kernel's targets with their names, in the document's order.
std::vector<std::pair<std::string, const Target*>> named_targets(const KernelTargets& ts) {
  std::vector<std::pair<std::string, const Target*>> out;
  target_fields(ts, [&](const char* name, const std::optional<Target>& t) {
    if (t) out.emplace_back(name, &*t);
  });
  return out;
}

}  // namespace

void evaluate_targets(BenchDoc& doc) {
  TargetsSummary s;
  auto count = [&](const Target& t) {
    if (!t.met) ++s.unmeasured;
    else if (*t.met) ++s.met;
    else ++s.missed;
  };
  for (auto& k : doc.kernels) {
    if (k.status != "ok") continue;
    KernelTargets ts = targets_of(k);
    const auto named = named_targets(ts);
    if (named.empty()) continue;
    for (const auto& [name, t] : named) count(*t);
    k.targets = std::move(ts);
  }
  if (doc.coat_agreement && doc.coat_agreement->target) count(*doc.coat_agreement->target);
  doc.targets_summary = s;
}

namespace {

std::string num(const std::optional<double>& v, const char* f = "{:.4g}") {
  return is_num(v) ? fmt::format(fmt::runtime(f), *v) : "-";
}

std::vector<std::string> row_of(const BenchKernel& k) {
  const bool ok = k.status == "ok";
  std::string rate = "-";
  if (is_num(k.gbps)) rate = fmt::format("{:.0f} GB/s", *k.gbps);
  if (is_num(k.tflops)) rate = fmt::format("{:.0f} TFLOP/s", *k.tflops);
  if (is_num(k.gparams_per_s)) rate = fmt::format("{:.1f} Gparam/s", *k.gparams_per_s);
  std::string targets;
  if (k.targets) {
    for (const auto& [name, t] : named_targets(*k.targets)) {
      targets +=
          fmt::format("{}{} {}", targets.empty() ? "" : "; ", name, !t->met ? "n/a" : (*t->met ? "met" : "MISSED"));
      if (is_num(t->needs_fraction_of_ceiling) && *t->needs_fraction_of_ceiling > 1.0)
        targets += fmt::format(" (needs {:.0f}% of copy)", 100.0 * *t->needs_fraction_of_ceiling);
    }
  }
  // Runs before the same-bytes ceiling held every kernel to the large copy: their fraction goes in
  // the large-copy column.
  auto pct = [&](const std::optional<double>& f) {
    return ok && is_num(f) ? fmt::format("{:.0f}%", 100.0 * *f) : std::string("-");
  };
  const bool same = same_bytes_ceiling(k) || k.op == "copy";
  return {k.kernel,
          ok ? num(k.median_ms) : "-",
          ok ? num(k.min_ms) : "-",
          ok ? num(k.max_ms) : "-",
          ok ? rate : k.status.value_or("?"),
          same ? pct(k.fraction_of_ceiling) : "-",
          same ? pct(k.fraction_of_large_copy) : pct(k.fraction_of_ceiling),
          k.peer.value_or("-"),
          num(k.peer_median_ms),
          num(k.speedup_vs_peer, "{:.2f}x"),
          targets.empty() ? "-" : targets};
}

const std::vector<std::string> kHeader = {
    "kernel",        "median ms", "min ms",  "max ms",  "rate",   "of same-bytes copy",
    "of large copy", "best peer", "peer ms", "speedup", "targets"};

}  // namespace

const std::vector<std::string>& table_header() { return kHeader; }

std::vector<std::vector<std::string>> table_rows(const BenchDoc& doc) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : doc.kernels) rows.push_back(row_of(k));
  return rows;
}

std::string render_markdown(const BenchDoc& doc) {
  std::string md = "# fp8sim bench\n\n";
  md += fmt::format("- command: `{}`\n- date: {}\n", doc.command.value_or("-"), doc.date.value_or("-"));
  if (doc.rerendered) md += fmt::format("- targets re-evaluated from this run's JSON by: `{}`\n", *doc.rerendered);
  if (doc.machine) {
    for (const auto& [key, v] : doc.machine->as_object())
      md += fmt::format("- {}: {}\n", key, v.is_string() ? v.as_string() : v.dump(-1));
  }
  if (doc.ceiling)
    md += fmt::format("- large copy (same run): device-to-device copy {} GB/s (bytes read + written)\n",
                      num(doc.ceiling->gbps, "{:.0f}"));
  md +=
      "- ceiling of each memory-bound kernel: a device-to-device copy moving the same number of bytes, timed in "
      "the same run the same way (older runs, whose JSON has no ceiling_kind, held every kernel to the large "
      "copy: their fractions appear under \"of large copy\")\n";
  if (const auto& t = doc.targets_summary)
    md += fmt::format("- targets: {} met, {} missed, {} unmeasured (peer absent)\n", t->met, t->missed, t->unmeasured);
  if (doc.l2_flush) md += fmt::format("- L2 flush before each timed launch: {}\n", *doc.l2_flush);
  // A timing setting as the peers' file recorded it.
  auto peers_value = [](const std::optional<Json>& v) { return v ? v->dump(-1) : std::string("no peers"); };
  if (doc.launch_lead_us) {
    const std::string lead = Json(*doc.launch_lead_us).dump(-1), peer = peers_value(doc.peers_launch_lead_us);
    if (doc.launch_lead_flushes)
      md += fmt::format(
          "- launch lead: the L2 flush runs {} times before each timed launch, at least {} us of GPU "
          "work (the peers' file: {}): the host enqueues the launch meanwhile, so host-side launch "
          "work (argument set-up, Python, torch.compile's guards and launchers) is not timed, and "
          "the GPU is busy up to the launch as in training\n",
          *doc.launch_lead_flushes, lead, peer);
    else  // a document measured with an idle GPU-side wait instead of repeated flushes
      md += fmt::format(
          "- launch lead: a {} us GPU-side wait after the flush, before each timed launch (the peers' "
          "file: {}): the host enqueues the launch meanwhile, so host-side launch work is not timed\n",
          lead, peer);
  } else if (doc.l2_flush) {
    md +=
        "- launch lead: none (a document measured without one): host-side launch work that outlasted the L2 flush "
        "was timed with the kernel\n";
  }
  if (doc.gemm_cooldown_s) {
    const std::string peer = peers_value(doc.peers_gemm_cooldown_s);
    if (*doc.gemm_cooldown_s > 0)
      md += fmt::format(
          "- GEMM timing: each GEMM starts after {} s idle (the peers' file: {}), so that every one "
          "starts from a similar thermal state instead of after whatever ran before it\n",
          Json(*doc.gemm_cooldown_s).dump(-1), peer);
    else md += fmt::format("- GEMM timing: no idle before each GEMM (the peers' file: {})\n", peer);
  }
  if (doc.gemm_search) {
    if (*doc.gemm_search == 0)
      md += "- GEMM algorithm: the fastest of cuBLASLt's 8 heuristic candidates, each timed unflushed\n";
    else
      md += fmt::format(
          "- GEMM algorithm: the fastest of cuBLASLt's 8 heuristic candidates and of up to {} more "
          "configurations it accepts (bench --gemm-search), each timed unflushed\n",
          *doc.gemm_search);
  }
  md +=
      "\nTimes are CUDA-event medians over warm, L2-flushed repeats. Rates count each input byte once "
      "and each output byte once. speedup = peer time / fp8sim time (> 1: fp8sim is faster).\n\n";
  md += "|";
  for (const auto& h : kHeader) md += " " + h + " |";
  md += "\n|";
  for (size_t i = 0; i < kHeader.size(); ++i) md += i == 0 ? "---|" : "---:|";
  md += "\n";
  for (const auto& k : doc.kernels) {
    md += "|";
    for (const auto& c : row_of(k)) md += " " + c + " |";
    md += "\n";
  }
  if (doc.coat_agreement)
    md += "\n## Agreement with COAT's kernel\n\n```\n" + doc.coat_agreement->to_json().dump(2) + "\n```\n";
  return md;
}

}  // namespace fp8sim::bench
