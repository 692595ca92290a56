// optim_replay: feeds a trace (sim/trace/trace.hpp, schema in traces/FORMAT.md) to OptimReplay.
#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <map>

#include "sim/common/buffer.hpp"
#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/interrupt.hpp"
#include "sim/optim/replay.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::optim {

namespace {

double require_hyper(const std::optional<double>& v, const char* what, const std::string& path) {
  FP8SIM_REQUIRE(v.has_value(), "'{}' does not record the optimizer's {} (root attribute '{}')", path, what, what);
  return *v;
}

// The step whose moments feed Table 1: the one with the most exp_avg elements (ties: latest).
int64_t pick_moments_step(const trace::TraceReader& r) {
  std::map<int64_t, int64_t> elements;
  for (const auto& t : r.tensors())
    if (t.role == trace::Role::ExpAvg && r.find(t.step, trace::Role::ExpAvgSq, t.name)) elements[t.step] += t.numel();
  int64_t best = -1, best_n = 0;
  for (const auto& [step, n] : elements)
    if (n >= best_n) {
      best = step;
      best_n = n;
    }
  return best;
}

}  // namespace

OptimResult optim_replay(const std::string& path, const OptimOptions& opts) {
  for (const StateRecipe& rec : opts.recipes) rec.check_supported();  // before the trace is opened
  return optim_replay(trace::TraceReader(path), opts);
}

OptimResult optim_replay(const trace::TraceReader& r, const OptimOptions& opts) {
  const buffer_pool::ReleaseAtExit release_buffers;  // the tensors' large buffers, pooled meanwhile
  for (const StateRecipe& rec : opts.recipes) rec.check_supported();
  const std::string path = r.path().string();
  const trace::TraceHeader& H = r.header();
  const trace::OptimizerInfo& oi = H.optimizer;
  FP8SIM_REQUIRE(oi.name.empty() || oi.name.find("AdamW") != std::string::npos,
                 "'{}' was trained with '{}', not AdamW: the optimizer replay needs AdamW moments", path, oi.name);
  if (oi.options.is_object()) {
    for (const char* flag : {"amsgrad", "maximize"}) {
      const Json* v = oi.options.find(flag);
      FP8SIM_REQUIRE(!v || !v->is_bool() || !v->as_bool(), "'{}': AdamW ran with {}=True, which fp8sim does not model",
                     path, flag);
    }
  }
  AdamwHyper hyper;
  hyper.beta1 = require_hyper(oi.beta1, "beta1", path);
  hyper.beta2 = require_hyper(oi.beta2, "beta2", path);
  hyper.eps = require_hyper(oi.eps, "eps", path);
  hyper.weight_decay = require_hyper(oi.weight_decay, "weight_decay", path);

  WindowMeta meta;
  meta.source = path;
  if (oi.options.is_object() && oi.options.contains("implementation") && oi.options.at("implementation").is_string())
    meta.implementation = oi.options.at("implementation").as_string();
  int64_t first = 0, last = -1;
  if (H.grad_window) {
    std::tie(first, last) = *H.grad_window;
    FP8SIM_REQUIRE(last >= first, "'{}': grad_window [{}, {}] is empty", path, first, last);
    const trace::StepInfo* s0 = r.find_step(first);
    FP8SIM_REQUIRE(s0 != nullptr, "'{}': grad_window starts at step {}, which the trace does not hold", path, first);
    FP8SIM_REQUIRE(s0->adamw_step.has_value(), "'{}': step {} lacks the attribute adamw_step (AdamW's step count)",
                   path, first);
    meta.step0 = *s0->adamw_step;
    meta.steps = last - first + 1;
  } else {
    FP8SIM_REQUIRE(!opts.drift,
                   "'{}' has no grad window (root attribute grad_window): capture one with "
                   "scripts/capture_trace.py --window FIRST:COUNT, or pass --no-drift for Table 1 and memory only",
                   path);
  }

  // Which tensors to read, so progress can count them up front.
  const int64_t mstep = opts.table1_step ? *opts.table1_step : pick_moments_step(r);
  std::vector<const trace::TensorInfo*> moment_tensors;
  if (opts.table1_step)
    FP8SIM_REQUIRE(r.find_step(mstep) != nullptr, "'{}' holds no step {} (--table1-step)", path, mstep);
  if (mstep >= 0) {
    trace::Filter f;
    f.step = mstep;
    f.role = trace::Role::ExpAvg;
    moment_tensors = r.select(f);
  }
  std::vector<const trace::TensorInfo*> window_weights;
  std::vector<DroppedParam> dropped;  // window parameters whose grad is missing at some window step
  if (H.grad_window) {
    trace::Filter f;
    f.step = first;
    f.role = trace::Role::Weight;
    // The window's parameters: those with a grad at every window step (a "full" first step also
    // holds parameters outside the window).
    for (const auto* t : r.select(f)) {
      int64_t missing = -1, later = 0;
      for (int64_t s = first; s <= last; ++s) {
        if (r.find(s, trace::Role::Grad, t->name) != nullptr) later += s > first;
        else if (missing < 0) missing = s;
      }
      if (missing < 0) {
        window_weights.push_back(t);
      } else if (later > 0) {
        // Captured in the window (it has grads after the first step) but incomplete: left out of
        // the replay, and said so (the document lists it, the command warns). A parameter without
        // grads after the first step is outside the window by the capture's choice (the first,
        // "full" step holds every parameter's grad) and is left out silently.
        dropped.push_back({t->name, missing});
      }
    }
    FP8SIM_REQUIRE(!window_weights.empty(), "'{}': no parameter has weights at step {} and grads at every step {}..{}",
                   path, first, first, last);
  }
  double total = 0, done = 0;
  for (const auto* t : moment_tensors) total += static_cast<double>(t->numel());
  for (const auto* t : window_weights) total += static_cast<double>(t->numel());

  FP8SIM_REQUIRE(!moment_tensors.empty() || !window_weights.empty(),
                 "'{}' holds neither AdamW moments (exp_avg / exp_avg_sq) nor a grad window: nothing to replay", path);
  OptimReplay replay(meta, opts);
  const trace::StepInfo* st = nullptr;
  if (mstep >= 0) {
    st = r.find_step(mstep);
    FP8SIM_REQUIRE(st && st->adamw_step.has_value(), "'{}': step {} lacks the attribute adamw_step", path, mstep);
    FP8SIM_REQUIRE(!moment_tensors.empty(), "'{}': step {} holds no exp_avg tensors", path, mstep);
  }
  // The items: each moment pair, then each window parameter. Ranks split them by the elements
  // they read (dist::partition), compute their parts, and every rank applies all parts in item
  // order: the same result for any number of ranks.
  const size_t n_moments = moment_tensors.size(), n_items = n_moments + window_weights.size();
  std::vector<uint64_t> cost(n_items);
  for (size_t i = 0; i < n_moments; ++i) cost[i] = 2 * static_cast<uint64_t>(moment_tensors[i]->numel());
  for (size_t i = 0; i < window_weights.size(); ++i)
    cost[n_moments + i] = static_cast<uint64_t>(window_weights[i]->numel()) * static_cast<uint64_t>(4 + meta.steps);
  const std::vector<int> owner = dist::partition(cost, dist::size());
  const int me = dist::rank();
  for (size_t i = 0; i < n_items; ++i)
    if (owner[i] != me)
      total -= static_cast<double>(i < n_moments ? moment_tensors[i]->numel() : window_weights[i - n_moments]->numel());

  // One item's values as read: a moment pair (m, v) or a window parameter (w).
  struct Loaded {
    Buffer<float> m, v;
    ParamWindow w;
  };
  auto load = [&](size_t i) {
    Loaded L;
    if (i < n_moments) {
      const trace::TensorInfo* t = moment_tensors[i];
      const trace::TensorInfo* tv = r.find(mstep, trace::Role::ExpAvgSq, t->name);
      FP8SIM_REQUIRE(tv != nullptr, "'{}': step {} has exp_avg but no exp_avg_sq for '{}'", path, mstep, t->name);
      L.m = r.read_f32(*t);
      L.v = r.read_f32(*tv);
      return L;
    }
    const trace::TensorInfo* wt = window_weights[i - n_moments];
    ParamWindow& w = L.w;
    w.name = wt->name;
    w.shape = wt->shape;
    w.hyper = hyper;
    w.p0 = r.read_f32(*wt);
    auto need = [&](int64_t step, trace::Role role) -> const trace::TensorInfo& {
      const trace::TensorInfo* t = r.find(step, role, wt->name);
      FP8SIM_REQUIRE(t != nullptr, "'{}': the grad window lacks the {} of '{}' at step {}", path,
                     trace::role_name(role), wt->name, step);
      return *t;
    };
    w.m0 = r.read_f32(need(first, trace::Role::ExpAvg));
    w.v0 = r.read_f32(need(first, trace::Role::ExpAvgSq));
    for (int64_t s = first; s <= last; ++s) {
      w.grads.push_back(r.read_f32(need(s, trace::Role::Grad)));
      const trace::StepInfo* si = r.find_step(s);
      FP8SIM_REQUIRE(si && si->lr.has_value(), "'{}': step {} lacks the attribute lr (the update's learning rate)",
                     path, s);
      w.lr.push_back(*si->lr);
    }
    if (const trace::TensorInfo* end = r.find(last + 1, trace::Role::Weight, wt->name)) w.p_end = r.read_f32(*end);
    return L;
  };
  const std::vector<std::string> parts = dist::exchange([&] {
    dist::ByteWriter out;
    std::vector<size_t> mine;
    for (size_t i = 0; i < n_items; ++i)
      if (owner[i] == me) mine.push_back(i);
    // Reads run one item ahead of the work, on another thread; only that thread calls the reader
    // meanwhile (the work takes the values it is given), so reads never overlap each other, and
    // the buffers are freed here, on the thread that computes (and uploads them, on a GPU).
    std::future<Loaded> next;
    if (!mine.empty()) next = std::async(std::launch::async, load, mine[0]);
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t i = mine[k];
      Loaded L = next.get();
      if (k + 1 < mine.size()) next = std::async(std::launch::async, load, mine[k + 1]);
      const bool moment = i < n_moments;
      if (moment) {
        const trace::TensorInfo* t = moment_tensors[i];
        out.str(replay.state_part(t->name, L.m, L.v, hyper, *st->adamw_step));
      } else {
        out.str(replay.param_part(L.w, i - n_moments));
      }
      done += static_cast<double>(moment ? moment_tensors[i]->numel() : window_weights[i - n_moments]->numel());
      if (opts.progress) opts.progress(done, total);
      check_interrupt();
    }
    return out.take();
  });
  std::vector<dist::ByteReader> from;
  for (const std::string& p : parts) from.emplace_back(p);
  for (size_t i = 0; i < n_items; ++i) replay.apply_part(from[static_cast<size_t>(owner[i])].str());
  for (const dist::ByteReader& f : from) FP8SIM_CHECK(f.done(), "a rank sent more optimizer parts than it owns");
  OptimResult doc = replay.finish();
  if (H.grad_window) doc.window.dropped_params = std::move(dropped);
  return doc;
}

}  // namespace fp8sim::optim
