#pragma once
// The work behind `fp8sim info TRACE`: the tree of steps, roles and tensors of a trace with its
// model and optimizer attributes, and the JSON document `fp8sim info --json` writes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::trace {

// The tensors of one role in a step: {role, tensors, elements, bytes, stored_bytes, dtypes [..], ops [..]}.
struct RoleSummary {
  Role role = Role::Weight;
  uint64_t tensors = 0, elements = 0, bytes = 0, stored_bytes = 0;
  std::vector<std::string> dtypes, ops;  // sorted, distinct
  Json to_json() const;
};

// One captured step: {step, contents, lr, loss, adamw_step, tensor_count, elements, bytes,
// stored_bytes, roles [..], tensors [{name, role, op, module, modules, aliases, layer, dtype, shape,
// numel, bytes, stored_bytes}] (only with `with_tensors`)}.
struct StepSummary {
  int64_t step = 0;
  std::string contents;
  std::optional<double> lr, loss;
  std::optional<int64_t> adamw_step;
  uint64_t tensor_count = 0, elements = 0, bytes = 0, stored_bytes = 0;
  std::vector<RoleSummary> roles;                  // the roles present, in kAllRoles order
  std::optional<std::vector<TensorInfo>> tensors;  // by role, in the trace's order
  Json to_json() const;
};

struct TraceTotals {
  uint64_t tensors = 0, elements = 0, bytes = 0, stored_bytes = 0;
};

// {"file", "file_bytes", "format", "format_version", "producer", "created", "command",
//  "model_kind", "model_config", "optimizer" {name, lr, beta1, beta2, eps, weight_decay, options},
//  "training", "grad_window" [first, last] | null, "ignored" [paths],
//  "totals" {tensors, elements, bytes, stored_bytes}, "steps" [..]}
struct TraceInfo {
  std::string file;
  uint64_t file_bytes = 0;
  TraceHeader header;  // format_version through grad_window
  std::vector<std::string> ignored;
  TraceTotals totals;  // of the matching tensors
  std::vector<StepSummary> steps;
  Json to_json() const;
};

// Tensors are listed only when they match `filter` (totals count the matching ones).
TraceInfo trace_info(const TraceReader& r, const Filter& filter = {}, bool with_tensors = true);

}  // namespace fp8sim::trace
