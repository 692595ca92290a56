// fp8sim report: one command from a trace to an accuracy, memory and speed report with plots.
#include <fmt/format.h>

#include <sstream>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/report/report.hpp"

#include "sim/app/gpu_api.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    if (item.find_first_not_of(" \t") == std::string::npos)
      throw UsageError(fmt::format("--recipes '{}' names no recipe", item));
    std::stringstream ss(item);
    std::string part;
    while (std::getline(ss, part, ',')) {
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      if (part.empty()) throw UsageError(fmt::format("--recipes '{}' has an empty name", item));
      out.push_back(part);
    }
  }
  return out;
}

int run_report_cmd(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string trace, model, out;
  std::vector<std::string> recipes, compare;
  int gpus = 4, batch = 2, seq = 2048;
  double threshold_pct = 5.0;
  const report::ReportOptions defaults;
  opts.add_options()("trace", po::value(&trace),
                     "HDF5 trace, .safetensors checkpoint or folder of .npy files (positional; default: the committed "
                     "sample under traces/)")(
      "model", po::value(&model)->default_value(defaults.model),
      "model for the memory and speed sections: a models/NAME.json name or a JSON file")(
      "recipes", po::value(&recipes)->multitoken(),
      ("recipes to compare (registry names or recipe .json files), comma- or space-separated (default: " +
       cli::recipe_names_for_help(recipe::report_default_names) + ")")
          .c_str())("gpus", po::value(&gpus)->default_value(defaults.gpus),
                    "data-parallel GPUs (FSDP) for memory and speed")(
      "batch", po::value(&batch)->default_value(defaults.batch), "micro-batch per GPU for memory and speed")(
      "seq", po::value(&seq)->default_value(defaults.seq), "sequence length for memory and speed")(
      "out", po::value(&out)->default_value(defaults.out_dir.string()),
      "report folder (created; an earlier report there is replaced only when the new one is complete)")(
      "no-plots", "skip the plots (tables only; the report says so)")(
      "keep-going",
      "write the report even when a section fails with an error (the section shows the error; "
      "exit status 0). Without it such a failure ends the run with status 1 naming the section, "
      "and no report is written. A section that is unavailable (no GPU) is never a failure")(
      "compare", po::value(&compare)->multitoken(),
      "compare two finished reports, A and B (report.json files or report folders), instead of making one: "
      "writes compare.json, compare.md and compare.html into --out (default: compare)")(
      "threshold", po::value(&threshold_pct)->default_value(5.0),
      "with --compare: mark a difference whose ratio B/A is beyond 1 + PCT/100 either way (an SNR change "
      "beyond 20 log10(1 + PCT/100) dB)");
  po::positional_options_description pos;
  pos.add("trace", 1);
  po::variables_map vm;
  if (!cli::parse("report", args, opts, pos, vm,
                  "[TRACE] [--model NAME] [--recipes R,...] [--gpus N] [--out DIR] [--no-plots] [--keep-going]\n"
                  "       fp8sim report --compare A B [--out DIR] [--threshold PCT]",
                  "Runs every analysis fp8sim has on one trace and one model and writes a report folder:\n"
                  "  report.json   everything, machine-readable (each subcommand's full document under `data`)\n"
                  "  report.md     the report as Markdown, linking the PNG plots beside it\n"
                  "  report.html   a single file with the plots embedded (opens offline in any browser)\n"
                  "  *.png         plots drawn by scripts/plots.py (matplotlib; Python from $FP8SIM_PYTHON,\n"
                  "                the project venv, or python3 on PATH)\n"
                  "Sections: per-tensor quantization error and per-layer forward GEMM error per recipe (analyze),\n"
                  "optimizer-state error with COAT's Table 1 and Figure 3 (optim), memory per GPU (memory), step\n"
                  "time (speed: measured on a GPU, else modelled from the committed calibration file), and, with\n"
                  "a GPU, CPU-vs-GPU bit comparison (compare) and kernel throughput (bench). A section this\n"
                  "machine cannot produce says so and how to get it; a section that fails with an error ends the\n"
                  "run (status 1, the section named, no report written) unless --keep-going is given.\n"
                  "With --compare A B it reads two finished reports instead (two recipes, two models, two runs) and\n"
                  "writes them side by side: what each was run on, the verdict per recipe, the quantization error,\n"
                  "memory and step time per recipe with B/A, and the differences beyond --threshold marked.\n"
                  "Examples:\n"
                  "  fp8sim report                                   # sample trace, llama2-7b, 4 GPUs -> ./report\n"
                  "  fp8sim report my_trace.h5 --model llama3-8b --gpus 8 --out reports/mine\n"
                  "  fp8sim report --recipes coat,my_recipe.json --no-plots --out /tmp/r\n"
                  "  fp8sim report --compare runs/a runs/b/report.json --out runs/a-vs-b"))
    return 0;

  if (vm.count("compare")) {
    // The comparison reads finished reports: the options that make one mean nothing here.
    for (const char* opt : {"trace", "model", "recipes", "gpus", "batch", "seq", "no-plots", "keep-going"})
      if (vm.count(opt) && !vm[opt].defaulted())
        throw UsageError(
            fmt::format("{} cannot be combined with --compare (it reads two finished reports)",
                        std::string_view(opt) == "trace" ? std::string("TRACE") : "--" + std::string(opt)));
    report::CompareOptions co;
    co.inputs = compare;
    if (!vm["out"].defaulted()) co.out_dir = out;
    co.threshold = threshold_pct / 100.0;
    co.version = FP8SIM_VERSION;
    co.command_line = "fp8sim report";
    for (const auto& a : args) co.command_line += " " + a;
    const report::CompareResult res = report::run_compare(co);
    fmt::print("wrote {}/ (compare.json, compare.md, compare.html): {} difference{} beyond {}%\n", res.dir.string(),
               res.differences, res.differences == 1 ? "" : "s", threshold_pct);
    for (std::string n : res.notes) {
      // The notes are Markdown; the terminal gets them without the emphasis marks.
      for (size_t at = n.find("**"); at != std::string::npos; at = n.find("**", at)) n.erase(at, 2);
      fmt::print("note: {}\n", n);
    }
    return 0;
  }
  if (!vm["threshold"].defaulted()) throw UsageError("--threshold applies only with --compare");

  report::ReportOptions o;
  o.trace = trace;
  o.model = model;
  o.recipes = split_list(recipes);
  o.gpus = gpus;
  o.batch = batch;
  o.seq = seq;
  o.out_dir = out;
  o.plots = vm.count("no-plots") == 0;
  o.keep_going = vm.count("keep-going") > 0;
  if (vm.count("trace") && trace.empty()) throw UsageError("TRACE is empty (omit it to use the sample trace)");
  o.version = FP8SIM_VERSION;
  o.command_line = "fp8sim report";
  for (const auto& a : args) o.command_line += " " + a;

  const report::WriteResult wr = report::run_report(o, gpu_api::backend());
  fmt::print("wrote {}/ ({})\n", wr.dir.string(), [&] {
    std::string s;
    for (const auto& f : wr.files) s += (s.empty() ? "" : ", ") + f;
    return s;
  }());
  if (wr.plots_status == "ok") fmt::print("plots: drawn\n");
  else fmt::print("plots: {}: {}\n", wr.plots_status, wr.plots_reason);
  std::vector<std::vector<std::string>> rows;
  for (const auto& sec : wr.sections) {
    std::string why = sec.reason;
    if (why.size() > 90) why = why.substr(0, 87) + "...";
    rows.push_back({sec.title, sec.status, why});
  }
  cli::print_table({"section", "status", "note"}, rows);
  std::fflush(stdout);
  for (const auto& sec : wr.sections)
    if (sec.status == "error")
      fp8sim::eprint("fp8sim report: warning: section '{}' failed (--keep-going): {}\n", sec.title, sec.reason);
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_DISTRIBUTED_COMMAND("report",
                           "everything on one trace and model -> report.json, report.md, report.html, PNG plots",
                           fp8sim::run_report_cmd);
