// fp8sim synth: a synthetic trace of a Llama-family model, to size analyze and report runs
// (and their MPI scaling) without training the model.
#include <fmt/format.h>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/output.hpp"
#include "sim/quant/spec.hpp"
#include "sim/trace/synth.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

int run_synth(const std::vector<std::string>& args) {
  po::options_description opts("options");
  trace::SynthOptions o;
  std::string out, seed_text = "0";
  opts.add_options()("model", po::value(&o.model)->default_value("tiny-llama"),
                     "a models/ name or a config .json (Llama family: RMSNorm, SwiGLU)")(
      "out", po::value(&out), "the trace to write (.h5; required unless --dry-run)")(
      "layers", po::value(&o.layers)->default_value(0), "decoder layers to write (0: all of the model's)")(
      "tokens", po::value(&o.tokens)->default_value(2048), "tokens of the activations' micro-batch")(
      "seed", po::value(&seed_text)->default_value("0"), "the values' seed, below 2^53 (same options, same values)")(
      "deflate", po::value(&o.deflate_level)->default_value(0),
      "deflate level of the datasets, 0-9 (random values barely compress; 0 writes fastest)")(
      "window", po::value(&o.window)->default_value(0),
      "steps of a grad window for `optim` (0: none): the full step is its first, each later step holds every "
      "parameter's grad")("dry-run", "print the tensors and bytes it would write, and write nothing");
  po::variables_map vm;
  if (!cli::parse("synth", args, opts, {}, vm, "--out TRACE.h5 [--model NAME|FILE] [--layers N] [--tokens T]",
                  "Writes a synthetic trace: one full training step of a Llama-family model with every\n"
                  "parameter's weight, grad and AdamW moments (fp32) and every layer's activations and output\n"
                  "gradients (bf16), named and tagged like a recorded trace (traces/FORMAT.md). The values are\n"
                  "random with the shapes of real training tensors (outlier channels, heavy-tailed gradients,\n"
                  "second moments over a wide range; sim/trace/synth.hpp), so the file sizes the work of analyze\n"
                  "and report on a model of any size, for example for MPI runs (docs/scale-out.md). Its numbers\n"
                  "say nothing about a real model's numerics.\n"
                  "Examples:\n"
                  "  fp8sim synth --model tinyllama-1.1b --layers 8 --tokens 4096 --out big.h5 --dry-run\n"
                  "  fp8sim synth --model llama2-7b --layers 2 --out l2-7b-2.h5\n"
                  "  fp8sim synth --model tinyllama-1.1b --layers 4 --window 4 --out win.h5   (for optim)"))
    return 0;
  o.seed = parse_seed(seed_text, "--seed");
  o.command = "fp8sim synth";
  for (const auto& a : args) o.command += " " + a;
  const trace::SynthSummary plan = trace::synth_plan(o);
  if (vm.count("dry-run")) {
    fmt::print("{} tensors, {:.2f} GiB\n", plan.tensors, static_cast<double>(plan.bytes) / (1ull << 30));
    return 0;
  }
  if (!vm.count("out")) throw UsageError("--out is required (the trace to write)");
  if (out == "-") throw UsageError("--out must be a file: an HDF5 trace cannot go to standard output");
  const OutputTarget t = resolve_output("--out", out);
  if (t.kind != OutputTarget::Kind::File)
    throw UsageError(
        fmt::format("--out '{}' is not a regular file path: the trace is written to a temporary "
                    "beside it and renamed into place",
                    out));
  o.out = t.path;
  const trace::SynthSummary s = trace::write_synthetic_trace(o);
  fmt::print("wrote {}: {} tensors, {:.2f} GiB of values\n", out, s.tensors,
             static_cast<double>(s.bytes) / (1ull << 30));
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("synth", "write a synthetic trace of a Llama-family model (sizes analyze/report runs, MPI scaling)",
               fp8sim::run_synth);
