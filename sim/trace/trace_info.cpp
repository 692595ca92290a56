#include "sim/trace/trace_info.hpp"

#include <set>

namespace fp8sim::trace {

namespace {

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

// The tensors of `role` in step `s` that match `filter` (appended to `tensors` when given).
RoleSummary role_summary(const TraceReader& r, const StepInfo& s, Role role, const Filter& filter,
                         std::vector<TensorInfo>* tensors) {
  RoleSummary rs;
  rs.role = role;
  std::set<std::string> dtypes, ops;
  for (size_t i : s.tensors) {
    const TensorInfo& t = r.tensors()[i];
    if (t.role != role || !filter.matches(t)) continue;
    ++rs.tensors;
    rs.elements += static_cast<uint64_t>(t.numel());
    rs.bytes += t.bytes();
    rs.stored_bytes += t.stored_bytes;
    dtypes.insert(std::string(dtype_name(t.dtype)));
    if (!t.op.empty()) ops.insert(t.op);
    if (tensors) tensors->push_back(t);
  }
  rs.dtypes.assign(dtypes.begin(), dtypes.end());
  rs.ops.assign(ops.begin(), ops.end());
  return rs;
}
}  // namespace

Json RoleSummary::to_json() const {
  Json j = Json::object();
  j["role"] = std::string(role_name(role));
  j["tensors"] = tensors;
  j["elements"] = elements;
  j["bytes"] = bytes;
  j["stored_bytes"] = stored_bytes;
  j["dtypes"] = string_array(dtypes);
  j["ops"] = string_array(ops);
  return j;
}

Json StepSummary::to_json() const {
  Json j = Json::object();
  j["step"] = step;
  j["contents"] = contents;
  j["lr"] = json_or_null(lr);
  j["loss"] = json_or_null(loss);
  j["adamw_step"] = json_or_null(adamw_step);
  j["tensor_count"] = tensor_count;
  j["elements"] = elements;
  j["bytes"] = bytes;
  j["stored_bytes"] = stored_bytes;
  Json rs = Json::array();
  for (const auto& r : roles) rs.push_back(r.to_json());
  j["roles"] = std::move(rs);
  if (tensors) {
    Json ts = Json::array();
    for (const auto& t : *tensors) ts.push_back(tensor_json(t));
    j["tensors"] = std::move(ts);
  }
  return j;
}

Json TraceInfo::to_json() const {
  const TraceHeader& h = header;
  Json j = Json::object();
  j["file"] = file;
  j["file_bytes"] = file_bytes;
  j["format"] = kFormatName;
  j["format_version"] = h.version;
  j["producer"] = h.producer;
  j["created"] = h.created;
  j["command"] = h.command;
  j["model_kind"] = h.model_kind;
  j["model_config"] = h.model_config;
  Json o = Json::object();
  o["name"] = h.optimizer.name;
  o["lr"] = json_or_null(h.optimizer.lr);
  o["beta1"] = json_or_null(h.optimizer.beta1);
  o["beta2"] = json_or_null(h.optimizer.beta2);
  o["eps"] = json_or_null(h.optimizer.eps);
  o["weight_decay"] = json_or_null(h.optimizer.weight_decay);
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
  j["ignored"] = string_array(ignored);
  Json t = Json::object();
  t["tensors"] = totals.tensors;
  t["elements"] = totals.elements;
  t["bytes"] = totals.bytes;
  t["stored_bytes"] = totals.stored_bytes;
  j["totals"] = std::move(t);
  Json steps_json = Json::array();
  for (const auto& s : steps) steps_json.push_back(s.to_json());
  j["steps"] = std::move(steps_json);
  return j;
}

TraceInfo trace_info(const TraceReader& r, const Filter& filter, bool with_tensors) {
  TraceInfo info;
  info.file = r.path().string();
  info.file_bytes = r.file_bytes();
  info.header = r.header();
  info.ignored = r.ignored();
  for (const StepInfo& s : r.steps()) {
    if (filter.step && *filter.step != s.step) continue;
    StepSummary ss;
    ss.step = s.step;
    ss.contents = s.contents;
    ss.lr = s.lr;
    ss.loss = s.loss;
    ss.adamw_step = s.adamw_step;
    if (with_tensors) ss.tensors.emplace();
    for (Role role : kAllRoles) {
      RoleSummary rs = role_summary(r, s, role, filter, with_tensors ? &*ss.tensors : nullptr);
      if (!rs.tensors) continue;
      ss.tensor_count += rs.tensors;
      ss.elements += rs.elements;
      ss.bytes += rs.bytes;
      ss.stored_bytes += rs.stored_bytes;
      ss.roles.push_back(std::move(rs));
    }
    if (!ss.tensor_count && (filter.role || filter.layer || !filter.op.empty() || !filter.name_contains.empty()))
      continue;
    info.totals.tensors += ss.tensor_count;
    info.totals.elements += ss.elements;
    info.totals.bytes += ss.bytes;
    info.totals.stored_bytes += ss.stored_bytes;
    info.steps.push_back(std::move(ss));
  }
  return info;
}

}  // namespace fp8sim::trace
