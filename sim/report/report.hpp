#pragma once
// `fp8sim report`: one run from a trace to an accuracy, memory and speed report.
//
// The report is assembled from the other subcommands' library functions (analyze, optim,
// memory, speed and, where a GPU exists, compare and bench), each called in-process; their
// documents are kept verbatim under report.json's `data`, and the report's own view of them
// is a list of `sections` (paragraphs, tables and plots) that the Markdown and HTML renderers
// turn into pages without knowing what any section means. Plots are drawn by
// scripts/plots.py from report.json's `plot_data`, a small normalised copy of the numbers,
// so the script never depends on another subcommand's JSON layout.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim::gpu {
class Backend;  // sim/backend/backend.hpp
}

namespace fp8sim::report {

struct ReportOptions {
  std::filesystem::path trace;       // trace (HDF5, .safetensors, .npy folder); empty: the committed sample
  std::string model = "llama2-7b";   // models/NAME.json or a path, for memory and speed
  std::vector<std::string> recipes;  // empty: default_recipes()
  int gpus = 4;                      // data-parallel GPUs for memory and speed (FSDP)
  int batch = 2;                     // micro-batch per GPU for memory and speed
  int seq = 2048;                    // sequence length for memory and speed
  std::filesystem::path out_dir = "report";
  bool plots = true;  // false: --no-plots (tables only; the report says so)
  // The Python that draws the plots; empty: find_python() ($FP8SIM_PYTHON, the project venv,
  // python3 on PATH). The Python package passes its own interpreter.
  std::filesystem::path python;
  // false: a section that fails with an error (not one that is unavailable, e.g. for want of a
  // GPU) ends the run with an Error naming it, and no report is written; true (--keep-going):
  // the report is written with the error in that section.
  bool keep_going = false;
  std::string command_line;         // how the report was asked for, recorded in it
  std::string version = "unknown";  // fp8sim's version, recorded in it
};

// On a GPU the report compares this many tensors per op family (fp8sim compare's --max-tensors)
// and runs fp8sim bench in its quick (smoke) mode, to stay within minutes.
inline constexpr int kCompareTensorsPerOp = 3;

std::vector<std::string> default_recipes();

// Checks everything the user gave (trace readable, model and recipes known, numbers sane) and
// fills in defaults; throws Error / UsageError with one line. Cheap: runs before any analysis.
ReportOptions resolve_options(ReportOptions opts);

// Runs every analysis and returns the whole report document (no files written). The GPU sections
// (compare, bench, a measured speed section) run on `gpu` when it has a GPU and say why not when it
// has none.
Json build_report(const ReportOptions& opts, gpu::Backend& gpu);

class StagingDir;

struct WriteResult {
  std::filesystem::path dir;
  std::vector<std::string> files;  // names written into dir
  std::string plots_status;        // "ok", "partial", "skipped" or "failed"
  std::string plots_reason;        // why, when not "ok"
  struct SectionStatus {
    std::string title, status, reason;  // status: "ok", "unavailable" or "error"
  };
  std::vector<SectionStatus> sections;
};

// Draws the plots (unless `plots` is false; with `python`, or find_python() when it is empty), renders report.md and
// report.html into `staging` and commits it, so the report appears at its target only once complete. Updates `doc`
// (plot status, file list) so report.json records what happened.
WriteResult write_report(Json& doc, StagingDir& staging, bool plots, const std::filesystem::path& python = {});

// The whole command: resolve_options, a staging folder for opts.out_dir (so an unwritable or
// forbidden --out fails before any work; an --out folder that holds one of the run's inputs is
// refused), build_report, write_report.
WriteResult run_report(const ReportOptions& opts, gpu::Backend& gpu);

// Renderers, from a finished report document. `png_bytes` returns a plot file's PNG bytes
// (HTML embeds them as data URIs); a plot that was not drawn is described as skipped, with why.
std::string render_markdown(const Json& doc);
std::string render_html(const Json& doc, const std::function<std::string(const std::string& file)>& png_bytes);

// ---- fp8sim report --compare A B ---------------------------------------------------------------
//
// Two finished reports side by side: what each was run on, the verdict figures per recipe, and
// the key numbers of the quantization, memory and speed sections, with B against A (ratio, or
// difference in dB for SNR) and the differences beyond a threshold marked. Every number is the
// report's own value, read from its report.json; nothing is recomputed.

struct CompareOptions {
  std::vector<std::string> inputs;  // exactly two: report.json files or report folders
  std::filesystem::path out_dir = "compare";
  double threshold = 0.05;  // a ratio outside [1/(1+t), 1+t] (an SNR change over 20 log10(1+t) dB) is marked
  std::string command_line;
  std::string version = "unknown";
};

// A report document read for comparison. `arg` is a report.json file or a folder holding one;
// throws Error (one line) for a missing file, a folder without report.json, a file that is not
// JSON or not an fp8sim report (no `fp8sim_report` format field) or of another format version.
struct LoadedReport {
  std::filesystem::path path;  // the report.json read
  Json doc;
};
LoadedReport load_report(const std::string& arg);

// The comparison document (compare.json): `compare` holds the numbers, `sections` what the
// Markdown and HTML renderers show (the same renderers as the report's).
Json build_comparison(const LoadedReport& a, const LoadedReport& b, const CompareOptions& opts);

struct CompareResult {
  std::filesystem::path dir;
  std::vector<std::string> files;
  int differences = 0;  // rows marked beyond the threshold
  std::vector<std::string> notes;
};
// The whole command: loads both inputs, builds the comparison and writes compare.json,
// compare.md and compare.html into opts.out_dir, all three or none (an output that is one of the
// inputs is refused with UsageError before anything is written).
CompareResult run_compare(const CompareOptions& opts);

}  // namespace fp8sim::report
