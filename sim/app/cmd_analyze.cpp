// fp8sim analyze: a trace through an FP8 recipe, per tensor and per layer.
#include <fmt/format.h>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "sim/analyze/analyze.hpp"
#include "sim/app/cli.hpp"
#include "sim/app/gpu_api.hpp"
#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/trace/chunk_decode.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

void list_recipes() {
  for (const recipe::TrainingRecipe& r : recipe::all()) {
    fmt::print("{}: {}\n", r.name, r.description);
    std::vector<std::vector<std::string>> rows;
    for (const auto& rule : r.rules)
      rows.push_back({"  " + rule.role, rule.op, rule.module.empty() ? "" : rule.module,
                      rule.spec ? rule.spec->to_string() : "none", rule.note});
    cli::print_table({"  role", "op", "module", "spec", "note"}, rows);
    fmt::print("\n");
  }
  fmt::print(
      "A JSON recipe file has the same shape: {{\"name\": ..., \"base\": \"coat\" (optional), \"rules\": [{{\"role\": "
      "\"activation\", \"op\": \"norm_input\", \"module\": \"regex\" (optional), \"spec\": \"e4m3:g32\" | \"none\"}}, "
      "...]}}; the first matching rule wins, then the base recipe's rules. The recipes above are the files in {} "
      "(docs/recipes.md).\n",
      source_relative(recipe::recipes_dir()));
}

// --memory-budget in bytes: "auto" is a quarter of the machine's memory divided among the ranks on
// it (Open MPI's local size, else the job's size).
double memory_budget(const std::string& text) {
  if (text == "auto") {
    const double mem = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    int local = dist::size();
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); v && std::atoi(v) > 0) local = std::atoi(v);
    return mem / 4.0 / static_cast<double>(local);
  }
  char* end = nullptr;
  const double gib = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(gib >= 0) || gib > 1e6)
    throw UsageError(fmt::format("--memory-budget must be auto or a number of GiB >= 0, got '{}'", text));
  return gib * 1073741824.0;
}

int run_analyze(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string trace_path, recipe_arg = "coat", json_out, md_out;
  int64_t step = -1;
  int threads = 0;
  opts.add_options()("trace", po::value(&trace_path),
                     "the trace (.h5), a checkpoint (.safetensors) or a folder of .npy files, positional")(
      "recipe", po::value(&recipe_arg)->default_value("coat"),
      ("a recipe (" + cli::recipe_names_for_help(recipe::names) + ") or a recipe .json file").c_str())(
      "step", po::value(&step), "captured step to analyze (default: the one with the most tensors)")(
      "json", po::value(&json_out), "write the full analysis (every tensor, every GEMM) as JSON (- : stdout)")(
      "md", po::value(&md_out), "write a Markdown report (- : stdout)")("tensors", "also print the per-tensor table")(
      "no-gemm", "skip the per-layer GEMM output error")(
      "device", po::value<std::string>()->default_value("cpu"),
      "where the tensors are quantized and measured: cpu, or cuda (the GPU's kernels, the same bits; the GEMM "
      "errors stay on the CPU)")(
      "tensor-core-device", po::value<std::string>()->default_value("cpu"),
      "where the tensor-core model runs: cpu, or cuda (the GPU's CUDA cores, same bits; for large GEMMs)")(
      "tensor-core-rows", po::value<int64_t>()->default_value(256),
      "rows of each GEMM output that the Hopper tensor-core model computes, evenly spaced (0: all; -1: skip "
      "the model)")("histograms", "keep the per-tensor scaled-magnitude histograms in the JSON")(
      "timing",
      "say where the time went: reading the trace or computing, the work of each rank, and the time "
      "before the work (process and MPI start-up, opening the trace) and after it (exchanging results, "
      "writing)")(
      "memory-budget", po::value<std::string>()->default_value("auto"),
      "GiB one tensor's work may hold per process: a larger tensor is read and measured in slabs of rows, with "
      "the same numbers (auto: a quarter of this machine's memory shared among its ranks; 0: whole tensors)")(
      "strict", "exit 1 when any tensor holds NaN or Inf (they are always counted and reported)")(
      "threads", po::value(&threads)->default_value(0), "OpenMP threads (0: default)")(
      "list-recipes", "show the recipes of the registry and their rules, then exit");
  po::positional_options_description pos;
  pos.add("trace", 1);
  po::variables_map vm;
  if (!cli::parse("analyze", args, opts, pos, vm, "TRACE [--recipe NAME|FILE.json] [--step S] [--json OUT] [--md OUT]",
                  "Quantizes every tensor of one captured step of a trace with the QuantSpec its recipe assigns to\n"
                  "its (role, op) and reports the error (the metrics of `fp8sim quantize`: nmse, snr_db, underflow,\n"
                  "saturation, ...), aggregated per role/op and per layer, plus for every linear layer the error\n"
                  "of the forward GEMM output X W^T when both operands are quantized (fp32, Eigen), as in COAT's\n"
                  "Figure 4(a). Tensors are quantized from their stored dtype (one rounding). NaN/Inf values are\n"
                  "counted and reported per tensor.\n"
                  "Examples:\n"
                  "  fp8sim analyze traces/tiny-llama-s300.h5\n"
                  "  fp8sim analyze traces/tiny-llama-s300.h5 --recipe deepseek --json deepseek.json --md deepseek.md\n"
                  "  fp8sim analyze --list-recipes\n"
                  "  fp8sim analyze my.h5 --recipe my-recipe.json --tensors\n"
                  "  fp8sim analyze model.safetensors --recipe coat   (a checkpoint's weights)\n"
                  "  fp8sim analyze big.h5 --no-gemm --device cuda --json big.json   (the GPU; same JSON)\n"
                  "  mpirun -np 16 fp8sim analyze big.h5 --json big.json   (16 processes: docs/scale-out.md)"))
    return 0;
  if (vm.count("list-recipes")) {
    list_recipes();
    return 0;
  }
  if (trace_path.empty()) throw UsageError("no trace given (see 'fp8sim analyze --help')");
  cli::check_threads(threads);
  RunFiles files;
  files.input("TRACE", trace_path);
  if (!recipe::is_registered(recipe_arg)) files.input("--recipe", recipe_arg);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;
  const int md_id = vm.count("md") ? files.output("--md", md_out) : -1;

  analyze::AnalyzeOptions o;
  if (vm.count("step")) o.step = step;
  o.gemm = vm.count("no-gemm") == 0;
  o.tensor_core_rows = vm["tensor-core-rows"].as<int64_t>();
  if (o.tensor_core_rows < -1) throw UsageError("--tensor-core-rows must be -1 (skip), 0 (all rows) or positive");
  const std::string tc_device = vm["tensor-core-device"].as<std::string>();
  if (tc_device != "cpu" && tc_device != "cuda")
    throw UsageError(fmt::format("--tensor-core-device must be cpu or cuda, got '{}'", tc_device));
  if (tc_device == "cuda") {
    gpu::Backend& gpu = gpu_api::backend();
    gpu.require("--tensor-core-device cuda runs the tensor-core model on the GPU");
    o.tensor_core_gemm = [&gpu](const uint8_t* x, const uint8_t* w, const float* xs, const float* ws, float* y,
                                int64_t m, int64_t n, int64_t k, const gemm::TcGemmConfig& c) {
      gpu::GemmRequest r;
      r.m = m;
      r.n = n;
      r.k = k;
      r.x_format = c.x_format;
      r.w_format = c.w_format;
      r.scaling = c.scaling;
      r.fast_accum = c.fast_accum;
      r.y_bf16 = c.y_format == Format::BF16;
      if (c.scaling == 0) {
        r.x_bf16.assign(reinterpret_cast<const uint16_t*>(x), reinterpret_cast<const uint16_t*>(x) + m * k);
        r.w_bf16.assign(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const uint16_t*>(w) + n * k);
      } else {
        const int64_t nx = gemm::tc_scale_count(c.scaling, false, m, k);
        const int64_t nw = gemm::tc_scale_count(c.scaling, true, n, k);
        r.x_codes.assign(x, x + m * k);
        r.w_codes.assign(w, w + n * k);
        r.x_scales.assign(xs, xs + nx);
        r.w_scales.assign(ws, ws + nw);
      }
      const std::vector<float> out = gpu.tensor_core_model(r);
      std::copy(out.begin(), out.end(), y);
    };
  }
  const std::string device = vm["device"].as<std::string>();
  if (device != "cpu" && device != "cuda")
    throw UsageError(fmt::format("--device must be cpu or cuda, got '{}'", device));
  int64_t on_cpu = 0;    // tensors the device path does not take
  double on_device = 0;  // seconds in the device's calls (rank 0)
  if (device == "cuda") {
    gpu::Backend& gpu = gpu_api::backend();
    gpu.require("--device cuda quantizes the tensors on the GPU");
    o.tensor_metrics = [&gpu, &on_cpu, &on_device](const void* x, InputDtype dtype, std::span<const int64_t> shape,
                                                   const QuantSpec* spec) -> std::optional<TensorMetrics> {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        TensorMetrics m = gpu.tensor_metrics(x, dtype, shape, spec);
        on_device += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return m;
      } catch (const UsageError&) {
        ++on_cpu;  // rht, an empty tensor, a shape the 4-bit kernels refuse: the CPU takes it
        return std::nullopt;
      }
    };
  }
  o.memory_budget = memory_budget(vm["memory-budget"].as<std::string>());
  o.histograms = vm.count("histograms") > 0;
  o.threads = threads;
  const recipe::TrainingRecipe& rec = recipe::get(recipe_arg);
  const trace::TraceReader reader(trace_path);
  const analyze::AnalyzeResult a = analyze::analyze_trace(reader, rec, o);
  // Every output is staged before the tables are printed; they appear together at the end.
  if (json_id >= 0) files.write(json_id, a.to_json().dump(2) + "\n");
  if (md_id >= 0) files.write(md_id, analyze::analysis_markdown(a));

  const analyze::Totals& tot = a.totals;
  fmt::print(
      "trace {}  step {}  recipe {}: {} tensors ({} quantized), {:.1f} KiB stored -> {:.1f} KiB under the recipe\n\n",
      trace_path, a.step, rec.name, tot.tensors, tot.quantized_tensors, static_cast<double>(tot.stored_bytes) / 1024,
      static_cast<double>(tot.recipe_bytes) / 1024);
  const analyze::Table ops = analyze::op_table(a);
  cli::print_table(ops.header, ops.rows);
  if (!a.layers.empty()) {
    fmt::print("\nforward GEMM output error per layer (Y = X W^T, both operands quantized vs unquantized, fp32)\n");
    const analyze::Table lt = analyze::layer_gemm_table(a);
    cli::print_table(lt.header, lt.rows);
    if (o.tensor_core_rows >= 0) {
      const analyze::Table tc = analyze::tensor_core_table(a);
      if (tc.rows.empty()) {
        fmt::print("\non Hopper's tensor cores: not modelled: {}\n", analyze::tensor_core_absent(a));
      } else {
        fmt::print(
            "\nthe same GEMMs on Hopper's tensor cores (cuBLASLt on sm_90: promote 128 = fp32 every 128 of K, fast = "
            "never; BF16 operands: the BF16 tensor cores), on sampled rows of Y\n");
        cli::print_table(tc.header, tc.rows);
      }
    }
  }
  if (vm.count("tensors")) {
    fmt::print("\n");
    const analyze::Table tt = analyze::tensor_table(a);
    cli::print_table(tt.header, tt.rows);
  }
  const std::vector<std::string>& bad = a.nonfinite_tensors;
  if (!bad.empty()) {
    std::string names;
    for (size_t i = 0; i < bad.size() && i < 4; ++i) names += (i ? ", " : "") + bad[i];
    fp8sim::eprint(
        "fp8sim analyze: warning: {} tensor(s) hold NaN/Inf values ({}{}); their counts are in the "
        "per-tensor nan_count / inf_count fields\n",
        bad.size(), names, bad.size() > 4 ? ", ..." : "");
  }
  if (const auto& un = a.unmatched_tensors; !un.empty())
    fp8sim::eprint("fp8sim analyze: note: {} tensor(s) matched no rule of recipe {} and stay unquantized\n", un.size(),
                   rec.name);
  if (const auto& sk = a.skipped_gemms; !sk.empty())
    fp8sim::eprint("fp8sim analyze: note: {} GEMM(s) skipped (see skipped_gemms in --json)\n", sk.size());
  if (const auto& t = a.rank_times; t.size() > 1) {
    const auto [lo, hi] =
        std::minmax_element(t.begin(), t.end(), [](const auto& x, const auto& y) { return x.work < y.work; });
    double sum = 0;
    for (const auto& v : t) sum += v.work;
    cli::note(fmt::format("work per rank: {:.2f} s mean, {:.2f} s min (rank {}), {:.2f} s max (rank {})",
                          sum / static_cast<double>(t.size()), lo->work, lo - t.begin(), hi->work, hi - t.begin()));
  }
  if (vm.count("timing")) {
    const auto& t = a.rank_times.front();
    cli::note(
        fmt::format("rank 0: {:.2f} s of work; reading {:.2f} s on the read-ahead thread, of which the "
                    "computing waited {:.2f} s; {} tensor(s) read in slabs",
                    t.work, t.read, t.wait, t.slabbed));
    const DirectReadStats dr = direct_read_stats();
    cli::note(fmt::format("rank 0: {} tensor(s) read by decoding their chunks on {} thread(s), {} chunk(s){}",
                          dr.datasets, omp_get_max_threads(), dr.chunks,
                          dr.fallbacks ? fmt::format(", {} handed back to HDF5", dr.fallbacks) : ""));
    if (device == "cuda")
      cli::note(fmt::format("rank 0: {:.2f} s in the GPU's calls (upload, kernels, results)", on_device));
  }
  if (on_cpu > 0)
    cli::note(
        fmt::format("{} tensor(s){} were measured on the CPU (rht, empty, or a shape the GPU kernels do not take)",
                    on_cpu, dist::size() > 1 ? " of rank 0" : ""));
  std::fflush(stdout);
  files.commit();
  if (json_id >= 0 && json_out != "-") cli::note(fmt::format("wrote {}", json_out));
  if (md_id >= 0 && md_out != "-") cli::note(fmt::format("wrote {}", md_out));
  if (vm.count("timing")) {
    // Where a job's time goes outside the ranks' work: starting (process, MPI, the trace and recipe
    // opened), and after the work (exchanging and assembling the results, writing the outputs).
    const auto& t = a.rank_times;
    const auto last =
        std::max_element(t.begin(), t.end(), [](const auto& x, const auto& y) { return x.began < y.began; });
    cli::note(
        fmt::format("rank 0: the work began {:.2f} s after the process started ({:.2f} s of it in the job's "
                    "start-up){}; the results were exchanged and written in {:.2f} s after it",
                    t.front().began, t.front().startup,
                    t.size() > 1 ? fmt::format(", the latest rank's at {:.2f} s after its own start (rank {})",
                                               last->began, last - t.begin())
                                 : std::string(),
                    dist::process_age_seconds() - t.front().began - t.front().work));
  }
  // A verdict, not a failure of the run: the outputs that report the NaN/Inf are written.
  if (vm.count("strict") && !bad.empty())
    throw Error(fmt::format("{} tensor(s) hold NaN/Inf values (--strict)", bad.size()));
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_DISTRIBUTED_COMMAND(
    "analyze", "quantize a trace through a recipe (a name or a JSON file): per-tensor and per-layer GEMM error",
    fp8sim::run_analyze);
