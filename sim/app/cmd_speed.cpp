// fp8sim speed: step time, tokens/s/GPU and speedup vs BF16 per recipe, from kernels timed on
// the GPU now or from a calibration measured on one earlier.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"
#include "sim/common/sizes.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/speed/framework.hpp"
#include "sim/speed/speed.hpp"

#include "sim/app/gpu_api.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;
using namespace fp8sim::speed;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream ss(s);
  while (std::getline(ss, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

// A recipe the replay models: a registry name or a recipe file whose recipe names a speed plan.
PlanRecipe plan_recipe(const std::string& name_or_file) {
  const recipe::TrainingRecipe& r = recipe::get(name_or_file);
  if (!r.speed_plan)
    throw UsageError(
        fmt::format("recipe '{}' has no speed plan, so the speed replay does not model it (recipes "
                    "with one: {})",
                    r.name, recipe::join(recipe::speed_names())));
  return {r.name, *r.speed_plan};
}

// "2" (every recipe) or "NAME=2,NAME=4" (per recipe; a recipe not named gets the batch of the
// named recipe that runs the BF16 plan, else 1).
void parse_batch(const std::string& s, SpeedOptions& o) {
  if (s.find('=') == std::string::npos) {
    o.batch = parse_size("--batch", s);
    return;
  }
  std::optional<int64_t> bf16_batch;
  for (const std::string& part : split(s, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos)
      throw UsageError(fmt::format("--batch '{}': write one number, or recipe=number pairs like bf16=2,coat=4", s));
    const PlanRecipe r = plan_recipe(part.substr(0, eq));
    if (o.recipe_batch.count(r.name)) throw UsageError(fmt::format("--batch names recipe '{}' twice", r.name));
    o.recipe_batch[r.name] = parse_size("--batch", part.substr(eq + 1));
    if (r.plan == Plan::BF16 && !bf16_batch) bf16_batch = o.recipe_batch[r.name];
  }
  o.batch = bf16_batch ? *bf16_batch : 1;
}

std::string f(double v, int digits = 2) { return fmt::format("{:.{}f}", v, digits); }

void print_ops(const RecipeSpeed& r) {
  fmt::print("\nkernels, recipe {} (ms per launch; count = launches per step)\n", r.recipe);
  std::vector<std::vector<std::string>> kr;
  for (const SpeedOp& op : r.ops.value()) {
    std::string dims;
    for (int64_t d : op.dims) {
      if (!dims.empty()) dims += 'x';
      dims += std::to_string(d);
    }
    kr.push_back({op.name, op.phase, op.kind + " " + op.variant, dims, f(op.ms, 4), fmt::format("{:g}", op.count),
                  op.tflops ? f(*op.tflops, 0) + " TFLOP/s" : f(op.gbps.value(), 0) + " GB/s",
                  op.source == "measured" ? "measured" : "fitted"});
  }
  cli::print_table({"op", "phase", "kernel", "dims", "ms", "count", "achieved", "source"}, kr);
}

void print_fig4b(const std::vector<Fig4bRow>& fig4b) {
  fmt::print("\nFigure 4(b): per-tensor max of a BF16 tensor, just-in-time pass vs Group Scaling\n");
  std::vector<std::vector<std::string>> fr;
  for (const Fig4bRow& r : fig4b)
    fr.push_back({fmt::format("{}x{}", r.rows, r.cols), f(r.jit_amax_ms, 3), f(r.group_stage1_overhead_ms, 3),
                  f(r.group_stage2_ms, 3), f(r.group_scaling_ms, 3), f(r.speedup, 1) + "x",
                  r.torch_eager_amax_ms ? f(*r.torch_eager_amax_ms, 3) : std::string("-"),
                  fmt::format("{:.2f} -> {:.2f}", r.paper_h100_jit_ms, r.paper_h100_group_ms)});
  cli::print_table(
      {"tensor", "JIT ms", "stage1 extra", "stage2 ms", "group ms", "JIT/group", "torch amax ms", "paper H100 ms"}, fr);
}

void print_validation(const SpeedValidation& v) {
  fmt::print("\nValidation: BF16 layer forward+backward, fp8sim vs PyTorch ({})\n",
             v.torch_version.is_string() ? "torch " + v.torch_version.as_string() : std::string("torch"));
  std::vector<std::vector<std::string>> vr;
  for (const SpeedValidationRow& r : v.rows)
    vr.push_back({fmt::format("{} b{} s{}", r.model, r.batch, r.seq), f(r.torch_layer_ms, 3),
                  f(r.fp8sim_bf16_layer_ms, 3), fmt::format("{:+.1f}%", 100 * r.difference),
                  r.within_15_percent ? "yes" : "NO"});
  cli::print_table({"config", "torch ms", "fp8sim ms", "diff", "within 15%"}, vr);
}

void print_notes(const std::vector<std::string>& notes) {
  if (notes.empty()) return;
  fmt::print("\nnotes:\n");
  for (const std::string& s : notes) fmt::print("  - {}\n", s);
}

void print_report(const SpeedResult& res, bool show_ops) {
  fmt::print("{}\n\n", res.timing.statement);
  fmt::print("model {} ({} layers, {:.2f} B params), seq {}, {} GPU(s), grad-accum {}\n", res.model.name,
             res.model.layers, static_cast<double>(res.model.params) / 1e9, res.seq, res.gpus, res.grad_accum);
  if (res.timing.comm_model) fmt::print("{}\n", *res.timing.comm_model);
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows;
  for (const RecipeSpeed& r : res.recipes) {
    const SpeedBreakdown& b = r.breakdown_ms;
    rows.push_back({r.recipe, std::to_string(r.batch), f(r.layer_fwd_ms, 3), f(r.layer_bwd_ms, 3), f(b.gemm, 1),
                    f(b.attention, 1), f(b.quantize, 1), f(b.nonlinear, 1), f(r.optimizer_ms + r.weight_cast_ms, 1),
                    f(r.comm_ms, 1), f(r.step_ms, 1), f(r.tokens_per_s_per_gpu, 0),
                    f(r.speedup_vs_bf16.value(), 3) + "x"});
  }
  cli::print_table({"recipe", "batch", "layer fwd ms", "layer bwd ms", "gemm", "attn", "quant", "nonlin", "opt+cast",
                    "comm", "step ms", "tok/s/GPU", "vs BF16"},
                   rows);
  fmt::print("(gemm .. comm: milliseconds per optimizer step)\n");

  if (show_ops)
    for (const RecipeSpeed& r : res.recipes) print_ops(r);
  if (res.fig4b) print_fig4b(*res.fig4b);
  if (res.table7) {
    fmt::print("\nCOAT Table 7 rows (paper: H100, FSDP; predicted: this calibration's GPU, kernels only{})\n",
               res.timing.fsdp_comm == "none" ? ", no communication" : " + the FSDP model");
    const std::vector<std::vector<std::string>> tr = speed::table7_cells(*res.table7, "/", false);
    cli::print_table({"row", "batch b/t/c", "tok/s/GPU b/t/c", "paper tok/s", "TE/BF16", "paper", "COAT/BF16", "paper",
                      "COAT same batch"},
                     tr);
  }
  if (res.validation) print_validation(*res.validation);
  print_notes(res.notes);
}

void print_framework(const FrameworkResult& res) {
  fmt::print("{}\n\n", res.statement);
  const FrameworkInventory& so = res.step_ops;
  fmt::print(
      "framework {}: {}\nop inventory {} ({} configurations on {}; fit residual: other bytes {:.2g}, kernels "
      "{:.2g})\n\n",
      res.framework, res.framework_description, so.file, so.configs, so.device, so.max_residual_bytes,
      so.max_residual_kernels);
  auto row = [](const FrameworkStep& r, std::vector<std::string> head) {
    for (double ms : {r.gemm_ms, r.attention_ms, r.other_ms, r.optimizer_ms, r.host_ms, r.step_ms})
      head.push_back(f(ms, 1));
    head.push_back(f(r.other_bytes / 1e9, 1));
    head.push_back(f(r.kernels, 0));
    return head;
  };
  if (res.predictions) {
    std::vector<std::vector<std::string>> rows;
    for (const FrameworkStep& r : *res.predictions)
      rows.push_back(row(r, {res.model.value().name, std::to_string(r.batch), f(r.tokens_per_s, 0)}));
    cli::print_table(
        {"model", "batch", "tok/s", "gemm", "attn", "other", "optim", "host", "step ms", "other GB", "launches"}, rows);
  }
  if (res.validation) {
    const FrameworkValidation& v = *res.validation;
    // The measured host time beside the predicted one, where the runs recorded it.
    const bool host = std::any_of(v.rows.begin(), v.rows.end(), [](const auto& r) { return r.measured_host_ms; });
    std::vector<std::vector<std::string>> rows;
    for (const FrameworkValidationRow& r : v.rows) {
      auto cells = row(r, {r.model, std::to_string(r.batch)});
      cells.resize(8);
      if (host) cells.insert(cells.begin() + 7, r.measured_host_ms ? f(*r.measured_host_ms, 1) : "-");
      cells.push_back(f(r.measured_step_ms, 1));
      cells.push_back(fmt::format("{:+.1f}%", 100 * r.difference));
      rows.push_back(cells);
    }
    std::vector<std::string> head{"model", "batch", "gemm",    "attn",     "other",
                                  "optim", "host",  "step ms", "measured", "diff"};
    if (host) head.insert(head.begin() + 7, "host meas");
    cli::print_table(head, rows);
    fmt::print("{} of {} steps within 10% (max |diff| {:.1f}%)\n", v.within_10_percent, v.rows.size(),
               100 * v.max_abs_difference);
    if (!v.baseline.empty()) {
      fmt::print("\nspeedup over {}{} (BF16) at the same model and batch, where both were measured\n\n", v.baseline,
                 res.compiled ? " compiled" : "");
      std::vector<std::vector<std::string>> sp;
      int64_t within = 0;
      for (const SpeedupRow& r : v.speedups) {
        sp.push_back({r.model, std::to_string(r.batch), f(r.predicted, 3) + "x", f(r.measured, 3) + "x",
                      fmt::format("{:+.1f}%", 100 * r.difference)});
        within += std::abs(r.difference) <= 0.10;
      }
      cli::print_table({"model", "batch", "predicted", "measured", "diff"}, sp);
      fmt::print("{} of {} speedups within 10%\n", within, v.speedups.size());
    }
  }
  print_notes(res.notes);
}

// `speed --framework`: predictions at each --batch, or the comparison with measured steps.
int run_speed_framework(const po::variables_map& vm, const std::vector<std::string>& args, const std::string& model,
                        const std::string& batch, int64_t seq, std::string calib, std::string step_ops,
                        const std::string& validate, const std::string& json_out) {
  const std::string framework = vm["framework"].as<std::string>();
  const bool compiled = vm.count("compile") > 0;
  std::string description;
  for (const auto& [name, what] : speed_frameworks())
    if (name == framework) description = what;
  if (description.empty()) {
    std::string known;
    for (const auto& [name, what] : speed_frameworks()) known += (known.empty() ? "" : ", ") + name;
    throw UsageError(fmt::format("--framework '{}' is not modelled (one of: {})", framework, known));
  }
  for (const char* opt :
       {"recipes", "gpus", "grad-accum", "torch-times", "write-calibration", "table7", "no-fig4b", "fsdp-comm",
        "link-gbps", "fp8-allgather", "reduce-dtype", "comm-fit", "reps", "warmup", "ops", "markdown"})
    if (vm.count(opt) && !vm[opt].defaulted())
      throw UsageError(fmt::format("--{} does not go with --framework (one GPU, BF16, eager)", opt));
  if (!validate.empty() && (!vm["model"].defaulted() || !vm["batch"].defaulted() || !vm["seq"].defaulted()))
    throw UsageError(
        "--validate takes the model, batches and sequence from the measurements; drop --model, "
        "--batch and --seq");
  if (vm.count("validate") && validate.empty()) throw UsageError("--validate is empty");
  if (calib.empty()) calib = default_calibration_path().string();
  if (step_ops.empty()) step_ops = default_step_ops_path(framework).string();
  RunFiles files;
  files.input("--calibration", calib);
  files.input("--step-ops", step_ops);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;

  const Calibration cal = Calibration::load(calib);
  StepOps loaded = load_step_ops(step_ops);
  if (loaded.framework != inventory_framework(framework))
    throw UsageError(fmt::format("--step-ops '{}' is the inventory of framework '{}', not '{}'", step_ops,
                                 loaded.framework, inventory_framework(framework)));
  const StepOps ops = for_profile(std::move(loaded), framework);
  FrameworkResult res;
  res.framework = framework;
  res.compiled = compiled;
  res.framework_description = description;
  res.statement = fmt::format(
      "MODELLED step times of {} ({}, {}, one GPU) from calibration {} ({}) and the framework's op inventory",
      framework, compiled ? "torch.compile" : "eager", framework == "coat" || ops.torchao_float8 ? "FP8" : "BF16",
      source_relative(calib),
      cal.device.is_object() && cal.device.contains("name") ? cal.device.at("name").as_string()
                                                            : std::string("unknown GPU"));
  res.step_ops = {source_relative(step_ops),
                  ops.device,
                  ops.versions,
                  static_cast<int64_t>(ops.configs),
                  ops.max_residual.at("elementwise_bytes"),
                  ops.max_residual.at("elementwise_kernels")};
  res.command = "fp8sim speed";
  for (const auto& a : args) res.command += " " + a;
  if (!validate.empty()) {
    if (!std::filesystem::exists(validate))
      throw Error(fmt::format("--validate '{}': no such file or folder", validate));
    res.validation = framework_validate({validate}, cal, ops, res.notes, compiled);
    if (const std::string base = speedup_baseline(framework); !base.empty()) {
      std::vector<std::string> base_notes;  // the baseline's notes are its own validation's
      add_speedups(*res.validation, framework_validate({validate}, cal, for_profile(ops, base), base_notes, compiled),
                   base);
    }
  } else {
    const ModelShape m = load_model_shape(model);
    if (names_a_file(model)) files.input("--model", model);
    res.model = m;
    res.seq = seq;
    res.predictions.emplace();
    for (const std::string& b : split(batch, ',')) {
      const int64_t bb = parse_size("--batch", b);
      validate_run_sizes({.batch = bb, .seq = seq});
      res.predictions->push_back(framework_step(m, bb, seq, cal, ops, res.notes, compiled));
    }
  }
  if (json_id >= 0) files.write(json_id, res.to_json().dump(1) + "\n");
  print_framework(res);
  std::fflush(stdout);
  files.commit();
  return 0;
}

int run_speed(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string all_speed;  // every recipe with a speed plan: the default --recipes
  try {
    for (const auto& n : recipe::speed_names()) all_speed += (all_speed.empty() ? "" : ",") + n;
  } catch (const Error&) {
    // The run reports the registry's error; --help still works.
  }
  std::string model = "llama2-7b", batch = "1", recipes, fsdp = "none", json_out, md_out, calib, torch_times, write_cal,
              framework, step_ops, validate;
  int64_t seq = 2048, gpus = 1, accum = 1;
  double link = 360;
  std::string reduce_dtype = "bf16", comm_fit;
  int reps = 10, warmup = 3;
  opts.add_options()("model,m", po::value(&model)->default_value("llama2-7b"),
                     "model name (models/NAME.json) or a model JSON path")(
      "batch,b", po::value(&batch)->default_value("1"),
      "micro-batch per GPU: one number, or per recipe as bf16=2,te=2,coat=4")(
      "seq,s", po::value(&seq)->default_value(2048), "sequence length")(
      "recipes,r", po::value(&recipes)->default_value(all_speed),
      ("comma-separated recipes that name a speed plan (" + cli::recipe_names_for_help(recipe::speed_names) +
       ") or recipe .json files")
          .c_str())("gpus,g", po::value(&gpus)->default_value(1),
                    "FSDP data-parallel GPUs (shards the optimizer step)")(
      "grad-accum", po::value(&accum)->default_value(1), "micro-batches per optimizer step")(
      "calibration", po::value(&calib),
      "model from this calibration file even when a GPU is present "
      "(default without a GPU: reports/h200/calibration.json)")("torch-times", po::value(&torch_times),
                                                                "measuring run: PyTorch SDPA/AdamW/layer times from "
                                                                "scripts/torch_layer_time.py")(
      "write-calibration", po::value(&write_cal), "measuring run: merge this run's kernel times into FILE")(
      "table7", "add COAT Table 7's rows (Llama-2-7B/13B, LLaMA-30B) beside the paper's throughput")(
      "no-fig4b", "leave out the Figure 4(b) table")("fsdp-comm", po::value(&fsdp)->default_value("none"),
                                                     "FSDP communication model: none, serial or overlap")(
      "link-gbps", po::value(&link)->default_value(360), "bus bandwidth the FSDP model assumes, GB/s")(
      "fp8-allgather", "the FSDP model all-gathers the weights as FP8 codes (1 B/param) instead of BF16 (2 B)")(
      "reduce-dtype", po::value(&reduce_dtype)->default_value("bf16"),
      "the FSDP model reduce-scatters the gradients in bf16 or fp32 (FSDP2's reduce_dtype=float32)")(
      "comm-fit", po::value(&comm_fit),
      "price each FSDP collective by the latency and bus bandwidth fitted in this scripts/bench_allgather.py "
      "JSON (measured on the GPUs) instead of --link-gbps without latency")(
      "reps", po::value(&reps)->default_value(10), "measuring run: timed repetitions per kernel")(
      "warmup", po::value(&warmup)->default_value(3), "measuring run: untimed warm-up launches per kernel")(
      "framework", po::value(&framework),
      "predict a step as this framework runs it: torch or hf (BF16), coat (COAT's own FP8 code), or torchao-float8 "
      "(torchao's float8 training of the hf model, with --compile) (from the "
      "calibration and the framework's op inventory; --batch may list several, e.g. 1,2,4)")(
      "step-ops", po::value(&step_ops),
      "--framework: the op inventory (scripts/count_step_ops.py; default reports/h200/step_ops/FRAMEWORK.json)")(
      "compile", "--framework: the step under torch.compile (Inductor's fused kernels) instead of eager")(
      "validate", po::value(&validate),
      "--framework: compare with measured steps (a scripts/measure_step.py JSON, or a folder: every eager "
      "measurement of the framework in it)")("ops", "print every kernel of every recipe")(
      "json", po::value(&json_out), "write the whole result as JSON to FILE (- : stdout)")(
      "markdown", po::value(&md_out), "write the result as Markdown to FILE (- : stdout)");
  po::variables_map vm;
  if (!cli::parse(
          "speed", args, opts, {}, vm,
          "--model NAME --batch B --seq S [--recipes R,...] [--gpus N] [--calibration FILE] [--json OUT]",
          "Predicts one training step's time per GPU for each recipe that names a speed plan (BF16,\n"
          "TransformerEngine-style per-tensor FP8, COAT's, FP8-LM's, DeepSeek-V3's block-scaled FP8 or MXFP8\n"
          "as Hopper runs it), by replaying every kernel of a transformer layer (three GEMMs per Linear,\n"
          "the recipe's quantize/transpose/group-scaling kernels, RMSNorm, SiLU*Mul, residual adds, RoPE,\n"
          "attention) plus embedding, LM head, loss and the optimizer step, and reports tokens/s/GPU and\n"
          "the speedup vs BF16.\n"
          "On a GPU (CUDA build) each kernel is timed now with CUDA events; attention comes from PyTorch SDPA\n"
          "(--torch-times). Without a GPU the times come from a calibration file measured on one (fp8sim\n"
          "calibrate), and the output says the figures are MODELLED; a kernel family the calibration times\n"
          "at another version than this build's is named in a warning, and without --recipes a recipe the\n"
          "calibration has no kernels for is left out with a warning.\n"
          "Examples:\n"
          "  fp8sim speed --model llama2-7b --batch 2 --seq 2048 --gpus 4\n"
          "  fp8sim speed --model llama2-7b --batch bf16=2,te=2,coat=4 --gpus 4 --table7 --json speed.json\n"
          "  fp8sim speed --model llama2-13b --batch 1 --gpus 4 --fsdp-comm serial --ops\n"
          "  fp8sim speed --model llama2-7b --batch 2 --torch-times torch.json --write-calibration cal.json  (GPU)\n"
          "  fp8sim speed --framework hf --model tinyllama-1.1b --batch 1,2,4\n"
          "  fp8sim speed --framework hf --validate reports/h200/frameworks\n"
          "  fp8sim speed --framework hf --compile --validate reports/h200/frameworks\n"
          "  fp8sim speed --framework coat --validate reports/h200/frameworks\n"
          "  fp8sim speed --framework torchao-float8 --compile --validate reports/h200/frameworks"))
    return 0;
  if (vm.count("framework"))
    return run_speed_framework(vm, args, model, batch, seq, calib, step_ops, validate, json_out);
  for (const char* opt : {"step-ops", "validate", "compile"})
    if (vm.count(opt)) throw UsageError(fmt::format("--{} goes with --framework", opt));

  SpeedOptions o;
  o.model = model;
  o.recipes.clear();
  std::set<std::string> seen;
  for (const std::string& r : split(recipes, ',')) {
    if (!seen.insert(r).second) throw UsageError(fmt::format("--recipes lists '{}' twice", r));
    o.recipes.push_back(plan_recipe(r));
    if (!seen.insert(o.recipes.back().name).second && o.recipes.back().name != r)
      throw UsageError(fmt::format("--recipes lists recipe '{}' twice ('{}' is named so)", o.recipes.back().name, r));
  }
  if (o.recipes.empty()) {
    if (vm["recipes"].defaulted()) recipe::speed_names();  // throws the registry's own error
    throw UsageError("--recipes is empty");
  }
  parse_batch(batch, o);
  validate_run_sizes({.batch = o.batch, .seq = seq, .gpus = gpus, .grad_accum = accum});
  for (const auto& [r, b] : o.recipe_batch)
    validate_run_sizes({.batch = b, .seq = seq, .batch_option = fmt::format("--batch for {}", r)});
  if (!(link > 0) || !std::isfinite(link)) throw UsageError("--link-gbps must be a positive number");
  if (fsdp != "none" && fsdp != "serial" && fsdp != "overlap")
    throw UsageError(fmt::format("--fsdp-comm must be none, serial or overlap, not '{}'", fsdp));
  if (reps <= 0 || warmup < 0) throw UsageError("--reps must be positive and --warmup non-negative");
  if (reduce_dtype != "bf16" && reduce_dtype != "fp32")
    throw UsageError(fmt::format("--reduce-dtype must be bf16 or fp32, not '{}'", reduce_dtype));
  const bool comm_detail = vm.count("fp8-allgather") || !vm["reduce-dtype"].defaulted() || vm.count("comm-fit");
  if (comm_detail && fsdp == "none")
    throw UsageError(
        "--fp8-allgather, --reduce-dtype and --comm-fit describe the FSDP communication: add --fsdp-comm "
        "serial or overlap");
  if (vm.count("comm-fit") && !vm["link-gbps"].defaulted())
    throw UsageError("--comm-fit prices the collectives from its fits: drop --link-gbps");
  o.fp8_allgather = vm.count("fp8-allgather") > 0;
  o.reduce_dtype = reduce_dtype;
  if (vm.count("comm-fit")) o.comm_fit = load_comm_fit(comm_fit);
  o.seq = seq;
  o.gpus = gpus;
  o.grad_accum = accum;
  o.fsdp_comm = fsdp;
  o.link_gbps = link;
  o.calibration = calib;
  o.torch_times = torch_times;
  o.write_calibration = write_cal;
  o.table7 = vm.count("table7") > 0;
  o.fig4b = vm.count("no-fig4b") == 0;
  // The default list (every recipe with a plan) leaves out, with a warning, what cannot be modelled.
  o.drop_unmodelled = vm["recipes"].defaulted();
  o.command_line = "fp8sim speed";
  for (const auto& a : args) o.command_line += " " + a;

  if (!calib.empty() && (!torch_times.empty() || !write_cal.empty()))
    throw UsageError("--torch-times and --write-calibration belong to a measuring run; drop --calibration");
  for (const char* opt : {"calibration", "torch-times", "model", "recipes"})
    if (vm.count(opt) && vm[opt].as<std::string>().empty()) throw UsageError(fmt::format("--{} is empty", opt));
  RunFiles files;
  files.input("--calibration", calib);
  files.input("--torch-times", torch_times);
  if (names_a_file(model)) files.input("--model", model);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;
  const int md_id = vm.count("markdown") ? files.output("--markdown", md_out) : -1;
  // --write-calibration merges into the file it names: it is read and replaced, by design.
  const int cal_id = vm.count("write-calibration") ? files.output("--write-calibration", write_cal) : -1;
  if (cal_id >= 0) o.calibration_sink = [&files, cal_id](const std::string& text) { files.write(cal_id, text); };

  std::unique_ptr<Progress> bar;
  // A GPU measures now; without one (or without the GPU module) the calibration models it.
  gpu::Backend* gpu = calib.empty() && gpu_api::backend().available() ? &gpu_api::backend() : nullptr;
  if (gpu) {
    o.measure = {.warmup = warmup, .reps = reps};
    o.progress = [&bar](double done, double total) {
      if (!bar) bar = std::make_unique<Progress>("timing kernels", total);
      bar->update(done);
    };
  }
  if (!gpu && (!torch_times.empty() || !write_cal.empty()) && calib.empty())
    throw Error("--torch-times and --write-calibration need a GPU (this build or machine has none)");

  const SpeedResult res = speed_report(o, gpu);
  if (bar) bar->finish();
  if (json_id >= 0) files.write(json_id, res.to_json().dump(1) + "\n");
  if (md_id >= 0) files.write(md_id, speed_markdown(res));
  for (const SkippedRecipe& r : res.skipped_recipes)
    fp8sim::eprint("fp8sim speed: warning: recipe {} left out: {}\n", r.recipe, r.why);
  for (const StaleKernels& k : res.timing.stale_kernels) fp8sim::eprint("fp8sim speed: warning: {}\n", k.message);
  print_report(res, vm.count("ops") > 0);
  std::fflush(stdout);
  files.commit();
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("speed", "step time, tokens/s/GPU and speedup vs BF16 per recipe from timed kernels", fp8sim::run_speed);
