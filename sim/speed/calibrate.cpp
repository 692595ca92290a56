#include "sim/speed/calibrate.hpp"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

#include "sim/backend/backend.hpp"
#include "sim/common/build_info.hpp"
#include "sim/common/check.hpp"
#include "sim/model/model.hpp"
#include "sim/speed/kernel_versions.hpp"
#include "sim/speed/speed.hpp"

namespace fp8sim::speed {

std::vector<CalibrationShape> default_calibration_shapes() {
  std::vector<CalibrationShape> out;
  for (const std::string& m : model::list_models())
    for (int64_t b : {1, 2, 4, 8}) out.push_back({m, b, 2048});
  out.push_back({"llama2-13b", 1, 1024});  // COAT Table 7's Llama-2-13B row on 2 GPUs
  return out;
}

std::vector<KernelOp> calibration_kernels(const std::vector<CalibrationShape>& shapes,
                                          std::vector<std::string>& notes) {
  std::vector<KernelOp> out;
  std::set<std::string> seen;
  auto want = [&](const KernelOp& op) {
    if (op.kind == Kind::Attention || (op.kind == Kind::Optimizer && op.variant == "adamw_fp32")) return;
    if (seen.insert(op.key()).second) out.push_back(op);
  };
  std::map<std::string, ModelShape> models;
  for (const CalibrationShape& s : shapes) {
    if (!models.count(s.model)) models.emplace(s.model, load_model_shape(s.model));
    PlanOptions po;
    po.batch = s.batch;
    po.seq = s.seq;
    for (Plan p : all_plans()) {
      try {
        for (const KernelOp& op : build_plan(models.at(s.model), p, po)) want(op);
      } catch (const Error& e) {  // UsageError included: a shape this plan does not run
        notes.push_back(
            fmt::format("{} at {} x {}, plan {}: not measured ({})", s.model, s.batch, s.seq, plan_name(p), e.what()));
      }
    }
  }
  for (const Fig4bPaperRow& pr : fig4b_paper()) {
    const Fig4bOps f = fig4b_ops(pr.rows, pr.cols);
    for (const KernelOp& op : {f.jit_amax, f.stage2_reduce, f.producer_plain, f.producer_with_gmax}) want(op);
  }
  return out;
}

std::vector<KernelOp> kernels_of_families(const std::vector<KernelOp>& ops, const std::vector<std::string>& families) {
  std::string known;
  for (const KernelFamily& f : kernel_families()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  std::set<std::string> want;
  for (const std::string& name : families) {
    bool found = false;
    for (const KernelFamily& f : kernel_families()) found = found || name == f.name;
    if (!found) throw UsageError(fmt::format("unknown kernel family '{}' (families: {})", name, known));
    want.insert(name);
  }
  std::vector<KernelOp> out;
  std::set<std::string> hit;
  for (const KernelOp& op : ops) {
    const KernelFamily* f = kernel_family(op.kind, op.variant);
    if (f && want.count(f->name)) {
      out.push_back(op);
      hit.insert(f->name);
    }
  }
  for (const std::string& name : want)
    if (!hit.count(name))
      throw UsageError(fmt::format("kernel family '{}' has no kernel in the calibration set", name));
  return out;
}

Calibration updated_calibration(Calibration base, const Calibration& fresh, const std::vector<std::string>& families,
                                const std::string& created, const std::string& commit, const std::string& command) {
  for (const auto& [key, m] : fresh.measurements()) base.add(m);
  Json entry = Json::object();
  entry["created"] = created;
  entry["commit"] = commit;
  entry["command"] = command;
  Json names = Json::array();
  for (const std::string& f : families) names.push_back(f);
  entry["families"] = names;
  entry["kernels"] = static_cast<double>(fresh.measurements().size());
  if (const Json* name = fresh.device.is_object() ? fresh.device.find("name") : nullptr) entry["device"] = *name;
  if (!base.updates.is_array()) base.updates = Json::array();
  base.updates.push_back(entry);
  return base;
}

Calibration calibrate(const CalibrateOptions& opts, gpu::Backend& gpu, std::vector<std::string>& notes) {
  const std::vector<CalibrationShape> shapes = opts.shapes.empty() ? default_calibration_shapes() : opts.shapes;
  const bool update = !opts.update_from.empty();
  FP8SIM_REQUIRE(!update || opts.torch_times.empty(),
                 "--update re-times fp8sim's kernels only: PyTorch's times stay those of the file it updates");
  const Json tdoc = opts.torch_times.empty() ? Json() : load_torch_times(opts.torch_times);  // checked before timing
  std::optional<Calibration> base;
  if (update) base = Calibration::load(opts.update_from);  // checked before timing too
  std::vector<KernelOp> ops = calibration_kernels(shapes, notes);
  if (update) ops = kernels_of_families(ops, opts.families);
  gpu.require("calibrate times the kernels on a GPU");
  if (update) {
    // One calibration holds one GPU's times: an update from another GPU would mix them under the
    // file's device name.
    const Json* name = base->device.is_object() ? base->device.find("name") : nullptr;
    const std::string was = name && name->is_string() ? name->as_string() : std::string();
    const std::string now = gpu.device().name;
    if (was != now)
      throw Error(
          fmt::format("--update: '{}' holds times measured on {}, and this GPU is {}: a calibration is one "
                      "GPU's (make one for this GPU with --out)",
                      opts.update_from.string(), was.empty() ? std::string("an unrecorded GPU") : was, now));
  }
  Calibration cal = gpu.measure_kernels(ops, opts.measure, opts.progress);
  if (update)
    return updated_calibration(std::move(*base), cal, opts.families, utc_timestamp(), build_commit(),
                               opts.command_line);
  cal.origin = "measured in this run";
  cal.created = utc_timestamp();
  cal.command = opts.command_line;
  cal.commit = build_commit();
  add_torch_times(cal, tdoc, notes);
  return cal;
}

}  // namespace fp8sim::speed
