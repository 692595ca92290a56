// fp8sim compare: the GPU kernels against the CPU reference over a trace's real tensors.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "sim/app/cli.hpp"
#include "sim/app/gpu_api.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/compare/compare.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

int run_compare_cmd(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string trace, json_out, md_out;
  std::vector<std::string> ops_raw;
  int64_t step = -1;
  int max_tensors = 0;
  bool gemm_suite = false;
  opts.add_options()("trace", po::value(&trace), "the trace (HDF5; positional)")(
      "ops", po::value(&ops_raw)->multitoken(), "cast, quantize, adamw, gemm (comma or space separated; default all)")(
      "step", po::value(&step), "trace step to use (default: the step with the most tensors)")(
      "max-tensors", po::value(&max_tensors), "at most this many tensors per role / parameters / layers (default all)")(
      "gemm-suite", po::bool_switch(&gemm_suite),
      "also run the random and adversarial GEMM suite (every cuBLASLt configuration the tensor-core model "
      "covers, K = 16 .. 16384, about 1.2e7 outputs; a few minutes)")(
      "json", po::value(&json_out), "write the comparison document (reports/h200/compare.json) here (- : stdout)")(
      "md", po::value(&md_out), "write the Markdown report (reports/h200/compare.md) here (- : stdout)");
  po::positional_options_description pos;
  pos.add("trace", 1);
  po::variables_map vm;
  if (!cli::parse(
          "compare", args, opts, pos, vm, "TRACE [--ops OP,...] [--json OUT] [--md OUT]",
          "Runs every op on the CPU reference and on the GPU over the real tensors of a trace and compares\n"
          "them element by element: casts (RNE SAT/NOSAT, stochastic, bf16 input), quantizers for every\n"
          "granularity and scale mode (per-tensor, row, column, 1xG, RxC blocks; fp32/pow2/E8M0/bf16\n"
          "scales; DE coat and robust; delayed scaling; stochastic rounding) with their dequantization, one\n"
          "AdamW step per parameter for every state recipe, and each linear layer's GEMM through cuBLASLt\n"
          "(BF16; FP8 per-tensor fast/split, row-wise, 1x128 x 128x128 blocks; E5M2 x E4M3 dgrad).\n"
          "Casts, quantizers, DE and the optimizer step must agree bit for bit (0 differing codes, scales,\n"
          "k, c, parameter bits). GEMMs run on cuBLASLt's first algorithm that keeps K in one piece and\n"
          "must match the tensor-core model (Hopper's FP8 and BF16 accumulation) output bit for output bit,\n"
          "and the ideal fp32 product within the tolerance derived from K and the formats.\n"
          "Exit status 0 when everything agrees, 1 otherwise or without a GPU.\n"
          "Examples:\n"
          "  fp8sim compare traces/tiny-llama-s300.h5\n"
          "  fp8sim compare traces/tiny-llama-s300.h5 --ops quantize,adamw --json compare.json --md compare.md\n"
          "  fp8sim compare traces/tiny-llama-s300.h5 --ops gemm --gemm-suite --md compare.md"))
    return 0;
  if (trace.empty()) throw UsageError("no TRACE given (see 'fp8sim compare --help')");
  RunFiles files;
  files.input("TRACE", trace);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;
  const int md_id = vm.count("md") ? files.output("--md", md_out) : -1;
  compare::CompareOptions o;
  o.trace_path = trace;
  for (const auto& s : ops_raw) {
    std::stringstream ss(s);
    std::string tok;
    while (std::getline(ss, tok, ','))
      if (!tok.empty()) o.ops.push_back(tok);
  }
  if (vm.count("ops") && o.ops.empty()) throw UsageError("--ops is empty (leave it out for every op)");
  compare::validate_ops(o.ops);
  if (gemm_suite && !o.ops.empty() && std::find(o.ops.begin(), o.ops.end(), "gemm") == o.ops.end())
    throw UsageError("--gemm-suite runs GEMMs: add gemm to --ops");
  if (max_tensors < 0) throw UsageError("--max-tensors must be >= 0");
  o.step = step;
  o.max_tensors = max_tensors;
  o.gemm_suite = gemm_suite;
  std::string cmdline = "fp8sim compare";
  for (const auto& a : args) cmdline += " " + a;
  o.command_line = cmdline;

  { trace::TraceReader probe(trace); }  // a bad trace fails first, in well under a second
  gpu::Backend& gpu = gpu_api::backend();
  gpu.require("compare runs the CUDA kernels against the CPU reference and needs a GPU");
  const compare::CompareResult res = compare::compare_trace(o, gpu);
  cli::print_table(compare::summary_header(), compare::summary_rows(res));
  const compare::CompareSummary& s = res.summary;
  fmt::print("{} of {} comparisons passed\n", s.entries - s.failed, s.entries);
  if (json_id >= 0) files.write(json_id, res.to_json().dump(2) + "\n");
  if (md_id >= 0) files.write(md_id, compare::render_markdown(res));
  std::fflush(stdout);
  files.commit();
  // A verdict: the documents are written either way, the status says whether everything agreed.
  return s.passed ? 0 : 1;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("compare", "run every op on the CPU reference and the GPU over a trace and compare them bit by bit",
               fp8sim::run_compare_cmd);
