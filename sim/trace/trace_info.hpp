#pragma once
// The work behind `fp8sim info TRACE`: the tree of steps, roles and tensors of a trace with its
// model and optimizer attributes, as the JSON document `fp8sim info --json` writes.
#include "sim/common/json.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::trace {

// {"file", "file_bytes", "format", "format_version", "producer", "created", "command",
//  "model_kind", "model_config", "optimizer" {name, lr, beta1, beta2, eps, weight_decay, options},
//  "training", "grad_window" [first, last] | null, "ignored" [paths],
//  "totals" {tensors, elements, bytes, stored_bytes},
//  "steps": [{step, contents, lr, loss, adamw_step, tensor_count, elements, bytes, stored_bytes,
//             "roles": [{role, tensors, elements, bytes, stored_bytes, dtypes [..], ops [..]}],
//             "tensors": [{name, role, op, module, modules, aliases, layer, dtype, shape, numel,
//                          bytes, stored_bytes}]  (only with `with_tensors`)}]}
// Tensors are listed only when they match `filter` (totals count the matching ones).
Json trace_info_json(const TraceReader& r, const Filter& filter = {}, bool with_tensors = true);

}  // namespace fp8sim::trace
