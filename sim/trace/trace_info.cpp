#include "sim/trace/trace_info.hpp"

#include <set>

namespace fp8sim::trace {

namespace {
Json opt_num(const std::optional<double>& v) { return v ? Json(*v) : Json(); }
Json opt_int(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(); }

Json string_array(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const auto& s : v) a.push_back(s);
  return a;
}

Json tensor_json(const TensorInfo& t) {
  Json j = Json::object();
  j["name"] = t.name;
  j["role"] = std::string(role_name(t.role));
  j["op"] = t.op;
  j["module"] = t.module;
  if (!t.modules.empty()) j["modules"] = string_array(t.modules);
  if (!t.aliases.empty()) j["aliases"] = string_array(t.aliases);
  j["layer"] = t.layer;
  j["dtype"] = std::string(dtype_name(t.dtype));
  Json shape = Json::array();
  for (int64_t d : t.shape) shape.push_back(d);
  j["shape"] = std::move(shape);
  j["numel"] = t.numel();
  j["bytes"] = t.bytes();
  j["stored_bytes"] = t.stored_bytes;
  return j;
}
}  // namespace

Json trace_info_json(const TraceReader& r, const Filter& filter, bool with_tensors) {
  const TraceHeader& h = r.header();
  Json j = Json::object();
  j["file"] = r.path().string();
  j["file_bytes"] = r.file_bytes();
  j["format"] = kFormatName;
  j["format_version"] = h.version;
  j["producer"] = h.producer;
  j["created"] = h.created;
  j["command"] = h.command;
  j["model_kind"] = h.model_kind;
  j["model_config"] = h.model_config;
  Json o = Json::object();
  o["name"] = h.optimizer.name;
  o["lr"] = opt_num(h.optimizer.lr);
  o["beta1"] = opt_num(h.optimizer.beta1);
  o["beta2"] = opt_num(h.optimizer.beta2);
  o["eps"] = opt_num(h.optimizer.eps);
  o["weight_decay"] = opt_num(h.optimizer.weight_decay);
  o["options"] = h.optimizer.options;
  j["optimizer"] = std::move(o);
  j["training"] = h.training;
  if (h.grad_window) {
    Json w = Json::array();
    w.push_back(h.grad_window->first);
    w.push_back(h.grad_window->second);
    j["grad_window"] = std::move(w);
  } else {
    j["grad_window"] = Json();
  }
  j["ignored"] = string_array(r.ignored());

  uint64_t tot_n = 0, tot_el = 0, tot_b = 0, tot_s = 0;
  Json steps = Json::array();
  for (const StepInfo& s : r.steps()) {
    if (filter.step && *filter.step != s.step) continue;
    Json sj = Json::object();
    sj["step"] = s.step;
    sj["contents"] = s.contents;
    sj["lr"] = opt_num(s.lr);
    sj["loss"] = opt_num(s.loss);
    sj["adamw_step"] = opt_int(s.adamw_step);
    uint64_t n = 0, el = 0, b = 0, st = 0;
    Json roles = Json::array();
    Json tensors = Json::array();
    for (Role role : kAllRoles) {
      uint64_t rn = 0, rel = 0, rb = 0, rst = 0;
      std::set<std::string> dtypes, ops;
      for (size_t i : s.tensors) {
        const TensorInfo& t = r.tensors()[i];
        if (t.role != role || !filter.matches(t)) continue;
        ++rn;
        rel += static_cast<uint64_t>(t.numel());
        rb += t.bytes();
        rst += t.stored_bytes;
        dtypes.insert(std::string(dtype_name(t.dtype)));
        if (!t.op.empty()) ops.insert(t.op);
        if (with_tensors) tensors.push_back(tensor_json(t));
      }
      if (!rn) continue;
      Json rj = Json::object();
      rj["role"] = std::string(role_name(role));
      rj["tensors"] = rn;
      rj["elements"] = rel;
      rj["bytes"] = rb;
      rj["stored_bytes"] = rst;
      rj["dtypes"] = string_array({dtypes.begin(), dtypes.end()});
      rj["ops"] = string_array({ops.begin(), ops.end()});
      roles.push_back(std::move(rj));
      n += rn;
      el += rel;
      b += rb;
      st += rst;
    }
    if (!n && (filter.role || filter.layer || !filter.op.empty() || !filter.name_contains.empty())) continue;
    sj["tensor_count"] = n;
    sj["elements"] = el;
    sj["bytes"] = b;
    sj["stored_bytes"] = st;
    sj["roles"] = std::move(roles);
    if (with_tensors) sj["tensors"] = std::move(tensors);
    steps.push_back(std::move(sj));
    tot_n += n;
    tot_el += el;
    tot_b += b;
    tot_s += st;
  }
  Json totals = Json::object();
  totals["tensors"] = tot_n;
  totals["elements"] = tot_el;
  totals["bytes"] = tot_b;
  totals["stored_bytes"] = tot_s;
  j["totals"] = std::move(totals);
  j["steps"] = std::move(steps);
  return j;
}

}  // namespace fp8sim::trace
