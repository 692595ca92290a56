#pragma once
// `fp8sim calibrate`: the calibration file (calibration.hpp) as a product of the current build.
// On a GPU it times every kernel that the replay's plans (every Plan; each registry recipe names
// one) need at a documented set of shapes, and stamps the file with the build's git commit and
// every measurement with its kernel's version (kernel_versions.hpp), so that `fp8sim speed` can say
// when a calibration is older than the kernels it models.
//
// The set (docs/speed-model.md): every model of models/ (the committed zoo) at micro-batches 1, 2,
// 4 and 8 and sequence 2048, plus COAT Table 7's Llama-2-13B row at 1 x 1024, and Figure 4(b)'s
// kernels. A shape a plan refuses (a model whose widths are not whole 1x128 groups, say) is left
// out with a note. Other shapes are fitted from the nearest measured one when modelled.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sim/speed/calibration.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim::gpu {
class Backend;  // sim/backend/backend.hpp
}

namespace fp8sim::speed {

// One shape of the set: a model at micro-batch x sequence.
struct CalibrationShape {
  std::string model;
  int64_t batch = 1;
  int64_t seq = 2048;
};

struct CalibrateOptions {
  std::vector<CalibrationShape> shapes;  // empty: default_calibration_shapes()
  std::filesystem::path torch_times;     // scripts/torch_layer_time.py's document (attention, fused AdamW)
  MeasureSettings measure;
  std::string command_line;                                 // recorded in the file
  std::function<void(double done, double total)> progress;  // kernels timed so far
  // Update mode: start from this calibration and re-time only the kernels of `families`
  // (kernel_families() names), keeping every other measurement, its PyTorch times and its
  // provenance; the update itself is recorded in the file's `updates`.
  std::filesystem::path update_from;
  std::vector<std::string> families;
};

// The documented set (above), in a fixed order.
std::vector<CalibrationShape> default_calibration_shapes();

// Every distinct kernel the set needs, every plan at every shape, then Figure 4(b)'s, in that order;
// attention and the fp32 AdamW baseline left out (PyTorch times them). `notes` receives one line per
// shape a plan refuses.
std::vector<KernelOp> calibration_kernels(const std::vector<CalibrationShape>& shapes, std::vector<std::string>& notes);

// The kernels of `ops` whose family (kernel_family) is one of `families`, in order. UsageError for
// a name kernel_families() does not have, or for a family none of `ops` belongs to.
std::vector<KernelOp> kernels_of_families(const std::vector<KernelOp>& ops, const std::vector<std::string>& families);

// `base` with the measurements of `fresh` in place of its own of the same keys, and an entry in
// its `updates` (created, commit, command, families, how many kernels).
Calibration updated_calibration(Calibration base, const Calibration& fresh, const std::vector<std::string>& families,
                                const std::string& created, const std::string& commit, const std::string& command);

// Times calibration_kernels on `gpu` (which must have a GPU) and returns the calibration: created,
// command, the build's commit, PyTorch's times (from opts.torch_times, else the committed
// calibration's, with a note). In update mode (opts.update_from) it times only the kernels of
// opts.families and returns updated_calibration of the given file. Throws Error / UsageError.
Calibration calibrate(const CalibrateOptions& opts, gpu::Backend& gpu, std::vector<std::string>& notes);

}  // namespace fp8sim::speed
