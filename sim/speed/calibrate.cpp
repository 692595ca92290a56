#include "sim/speed/calibrate.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "sim/backend/backend.hpp"
#include "sim/common/build_info.hpp"
#include "sim/common/check.hpp"
#include "sim/model/model.hpp"
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

Calibration calibrate(const CalibrateOptions& opts, gpu::Backend& gpu, std::vector<std::string>& notes) {
  const std::vector<CalibrationShape> shapes = opts.shapes.empty() ? default_calibration_shapes() : opts.shapes;
  const Json tdoc = opts.torch_times.empty() ? Json() : load_torch_times(opts.torch_times);  // checked before timing
  const std::vector<KernelOp> ops = calibration_kernels(shapes, notes);
  gpu.require("calibrate times the kernels on a GPU");
  Calibration cal = gpu.measure_kernels(ops, opts.measure, opts.progress);
  cal.origin = "measured in this run";
  cal.created = utc_timestamp();
  cal.command = opts.command_line;
  cal.commit = build_commit();
  add_torch_times(cal, tdoc, notes);
  return cal;
}

}  // namespace fp8sim::speed
