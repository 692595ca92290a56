// fp8sim calibrate: the speed calibration as a product of this build, measured on the GPU.
#include <fmt/format.h>

#include <map>
#include <memory>

#include "sim/app/cli.hpp"
#include "sim/app/gpu_api.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/output.hpp"
#include "sim/common/sizes.hpp"
#include "sim/speed/calibrate.hpp"
#include "sim/speed/kernel_versions.hpp"
#include "sim/speed/speed.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;
using namespace fp8sim::speed;

int run_calibrate(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string out, models, batches, seqs, torch_times, update_from, families;
  int reps = 10, warmup = 3;
  opts.add_options()("out,o", po::value(&out), "write the calibration to FILE (atomically; - : stdout)")(
      "model,m", po::value(&models),
      "comma-separated models (models/NAME.json names or files) instead of the set (every model of models/)")(
      "batch,b", po::value(&batches), "comma-separated micro-batches with --model (default 1,2,4,8)")(
      "seq,s", po::value(&seqs), "comma-separated sequence lengths with --model (default 2048)")(
      "torch-times", po::value(&torch_times),
      "PyTorch's attention, fused AdamW and layer times from scripts/torch_layer_time.py (default: those of the "
      "committed calibration)")("reps", po::value(&reps)->default_value(10), "timed repetitions per kernel")(
      "warmup", po::value(&warmup)->default_value(3), "untimed warm-up launches per kernel")(
      "update", po::value(&update_from),
      "start from this calibration and re-time only the kernels of --families, keeping every other "
      "measurement, PyTorch's times and the file's provenance; the update is recorded in its 'updates'")(
      "families", po::value(&families),
      "with --update: comma-separated kernel families to re-time (--list prints them with their versions)")(
      "list", "print the kernels the set needs, by kind, and the kernel families, and exit (no GPU needed)");
  po::variables_map vm;
  if (!cli::parse("calibrate", args, opts, {}, vm, "--out FILE [--model M,...] [--torch-times FILE]",
                  "Measures on the GPU every kernel that the speed replay's plans (every recipe's) need at a\n"
                  "documented set of shapes: every model of models/ at micro-batches 1, 2, 4 and 8 and sequence\n"
                  "2048, COAT Table 7's Llama-2-13B row at 1 x 1024, and Figure 4(b)'s kernels. The file records\n"
                  "the build's git commit and each kernel's version, so `fp8sim speed` warns when a calibration\n"
                  "is older than the kernels it models. scripts/device/calibrate.sh runs PyTorch's reference\n"
                  "and this on a GPU host and writes the file to commit as reports/h200/calibration.json.\n"
                  "Examples:\n"
                  "  fp8sim calibrate --list\n"
                  "  fp8sim calibrate --torch-times torch_times.json --out calibration.json  (GPU)\n"
                  "  fp8sim calibrate --model llama2-7b --batch 2 --out cal.json  (GPU)\n"
                  "  fp8sim calibrate --update reports/h200/calibration.json --families adamw_fp8lm,adamw_bf16m "
                  "--out cal.json  (GPU: re-time the kernels that changed)"))
    return 0;

  std::vector<CalibrationShape> shapes;
  if (vm.count("model")) {
    const std::vector<std::string> b =
        vm.count("batch") ? cli::comma_list("--batch", batches) : std::vector<std::string>{"1", "2", "4", "8"};
    const std::vector<std::string> q =
        vm.count("seq") ? cli::comma_list("--seq", seqs) : std::vector<std::string>{"2048"};
    for (const std::string& m : cli::comma_list("--model", models))
      for (const std::string& bs : b)
        for (const std::string& ss : q) {
          const int64_t batch = parse_size("--batch", bs), seq = parse_size("--seq", ss);
          validate_run_sizes({.batch = batch, .seq = seq});
          shapes.push_back({m, batch, seq});
        }
  } else if (vm.count("batch") || vm.count("seq")) {
    throw UsageError("--batch and --seq go with --model (the default set has its own)");
  }
  if (reps <= 0 || warmup < 0) throw UsageError("--reps must be positive and --warmup non-negative");
  if (vm.count("families") && !vm.count("update")) throw UsageError("--families goes with --update FILE");
  if (vm.count("update") && !vm.count("families"))
    throw UsageError("--update needs --families (the kernel families to re-time; --list prints them)");
  if (vm.count("update") && vm.count("torch-times"))
    throw UsageError("--update re-times fp8sim's kernels only: PyTorch's times stay those of the file it updates");
  const std::vector<std::string> family_list =
      vm.count("families") ? cli::comma_list("--families", families) : std::vector<std::string>{};

  if (vm.count("list")) {
    std::vector<std::string> notes;
    const std::vector<KernelOp> ops =
        calibration_kernels(shapes.empty() ? default_calibration_shapes() : shapes, notes);
    std::map<std::string, int> by_kind;
    for (const KernelOp& op : ops) ++by_kind[std::string(kind_name(op.kind)) + " " + op.variant];
    std::vector<std::vector<std::string>> rows;
    for (const auto& [k, n] : by_kind) rows.push_back({k, std::to_string(n)});
    cli::print_table({"kernel", "shapes"}, rows);
    fmt::print("{} kernels\n", ops.size());
    std::vector<std::vector<std::string>> fam;
    for (const KernelFamily& f : kernel_families()) fam.push_back({f.name, std::to_string(f.version), f.code});
    cli::print_table({"family", "version", "kernels"}, fam);
    for (const std::string& n : notes) fp8sim::eprint("fp8sim calibrate: note: {}\n", n);
    return 0;
  }
  if (out.empty()) throw UsageError("--out FILE is required (where the calibration goes)");

  RunFiles files;
  files.input("--torch-times", torch_times);
  files.input("--update", update_from);
  const int out_id = files.output("--out", out);
  CalibrateOptions o;
  o.shapes = shapes;
  o.torch_times = torch_times;
  o.update_from = update_from;
  o.families = family_list;
  o.measure = {.warmup = warmup, .reps = reps};
  o.command_line = "fp8sim calibrate";
  for (const auto& a : args) o.command_line += " " + a;
  std::unique_ptr<Progress> bar;
  o.progress = [&bar](double done, double total) {
    if (!bar) bar = std::make_unique<Progress>("timing kernels", total);
    bar->update(done);
  };
  std::vector<std::string> notes;
  // calibrate() checks the inputs (the torch times, the file to update, the family names) before
  // it asks for the GPU.
  const Calibration cal = calibrate(o, gpu_api::backend(), notes);
  if (bar) bar->finish();
  files.write(out_id, cal.to_json().dump(1) + "\n");
  for (const std::string& n : notes) fp8sim::eprint("fp8sim calibrate: note: {}\n", n);
  if (const Json* sk = cal.device.find("skipped_kernels"))
    fp8sim::eprint("fp8sim calibrate: warning: {} kernel(s) could not run (the file's device.skipped_kernels)\n",
                   sk->size());
  fmt::print("{} kernels measured on {} (commit {})\n", cal.measurements().size(),
             cal.device.contains("name") ? cal.device.at("name").as_string() : std::string("the GPU"), cal.commit);
  std::fflush(stdout);
  files.commit();
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("calibrate", "measure every speed-plan kernel on the GPU into a calibration file for fp8sim speed",
               fp8sim::run_calibrate);
