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
void print_report(const Json& doc, bool show_ops) {
  const Json& model = doc.at("model");
  fmt::print("{}\n\n", doc.at("timing").at("statement").as_string());
  fmt::print("model {} ({} layers, {:.2f} B params), seq {}, {} GPU(s), grad-accum {}\n", model.at("name").as_string(),
             model.at("layers").as_int(), model.at("params").as_number() / 1e9, doc.at("seq").as_int(),
             doc.at("gpus").as_int(), doc.at("grad_accum").as_int());
  if (const Json* cm = doc.at("timing").find("comm_model")) fmt::print("{}\n", cm->as_string());
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows;
  for (const Json& r : doc.at("recipes").as_array()) {
    const Json& b = r.at("breakdown_ms");
    rows.push_back({r.at("recipe").as_string(), std::to_string(r.at("batch").as_int()),
                    f(r.at("layer_fwd_ms").as_number(), 3), f(r.at("layer_bwd_ms").as_number(), 3),
                    f(b.at("gemm").as_number(), 1), f(b.at("attention").as_number(), 1),
                    f(b.at("quantize").as_number(), 1), f(b.at("nonlinear").as_number(), 1),
                    f(r.at("optimizer_ms").as_number() + r.at("weight_cast_ms").as_number(), 1),
                    f(r.at("comm_ms").as_number(), 1), f(r.at("step_ms").as_number(), 1),
                    f(r.at("tokens_per_s_per_gpu").as_number(), 0), f(r.at("speedup_vs_bf16").as_number(), 3) + "x"});
  }
  cli::print_table({"recipe", "batch", "layer fwd ms", "layer bwd ms", "gemm", "attn", "quant", "nonlin", "opt+cast",
                    "comm", "step ms", "tok/s/GPU", "vs BF16"},
                   rows);
  fmt::print("(gemm .. comm: milliseconds per optimizer step)\n");

  if (show_ops)
    for (const Json& r : doc.at("recipes").as_array()) {
      fmt::print("\nkernels, recipe {} (ms per launch; count = launches per step)\n", r.at("recipe").as_string());
      std::vector<std::vector<std::string>> kr;
      for (const Json& op : r.at("ops").as_array()) {
        std::string dims;
        for (const Json& d : op.at("dims").as_array()) {
          if (!dims.empty()) dims += 'x';
          dims += std::to_string(d.as_int());
        }
        const Json* tf = op.find("tflops");
        kr.push_back({op.at("name").as_string(), op.at("phase").as_string(),
                      op.at("kind").as_string() + " " + op.at("variant").as_string(), dims,
                      f(op.at("ms").as_number(), 4), fmt::format("{:g}", op.at("count").as_number()),
                      tf ? f(tf->as_number(), 0) + " TFLOP/s" : f(op.at("gbps").as_number(), 0) + " GB/s",
                      op.at("source").as_string() == "measured" ? "measured" : "fitted"});
      }
      cli::print_table({"op", "phase", "kernel", "dims", "ms", "count", "achieved", "source"}, kr);
    }

  if (const Json* fb = doc.find("fig4b")) {
    fmt::print("\nFigure 4(b): per-tensor max of a BF16 tensor, just-in-time pass vs Group Scaling\n");
    std::vector<std::vector<std::string>> fr;
    for (const Json& r : fb->as_array())
      fr.push_back({fmt::format("{}x{}", r.at("rows").as_int(), r.at("cols").as_int()),
                    f(r.at("jit_amax_ms").as_number(), 3), f(r.at("group_stage1_overhead_ms").as_number(), 3),
                    f(r.at("group_stage2_ms").as_number(), 3), f(r.at("group_scaling_ms").as_number(), 3),
                    f(r.at("speedup").as_number(), 1) + "x", num_or_dash(r.find("torch_eager_amax_ms"), "{:.3f}"),
                    fmt::format("{:.2f} -> {:.2f}", r.at("paper_h100_jit_ms").as_number(),
                                r.at("paper_h100_group_ms").as_number())});
    cli::print_table(
        {"tensor", "JIT ms", "stage1 extra", "stage2 ms", "group ms", "JIT/group", "torch amax ms", "paper H100 ms"},
        fr);
  }
  if (const Json* t = doc.find("table7")) {
    fmt::print("\nCOAT Table 7 rows (paper: H100, FSDP; predicted: this calibration's GPU, kernels only{})\n",
               doc.at("timing").at("fsdp_comm").as_string() == "none" ? ", no communication" : " + the FSDP model");
    const std::vector<std::vector<std::string>> tr = speed::table7_cells(*t, "/", false);
    cli::print_table({"row", "batch b/t/c", "tok/s/GPU b/t/c", "paper tok/s", "TE/BF16", "paper", "COAT/BF16", "paper",
                      "COAT same batch"},
                     tr);
  }
  if (const Json* v = doc.find("validation")) {
    fmt::print(
        "\nValidation: BF16 layer forward+backward, fp8sim vs PyTorch ({})\n",
        v->at("torch_version").is_string() ? "torch " + v->at("torch_version").as_string() : std::string("torch"));
    std::vector<std::vector<std::string>> vr;
    for (const Json& r : v->at("rows").as_array())
      vr.push_back({fmt::format("{} b{} s{}", r.at("model").as_string(), r.at("batch").as_int(), r.at("seq").as_int()),
                    f(r.at("torch_layer_ms").as_number(), 3), f(r.at("fp8sim_bf16_layer_ms").as_number(), 3),
                    fmt::format("{:+.1f}%", 100 * r.at("difference").as_number()),
                    r.at("within_15_percent").as_bool() ? "yes" : "NO"});
    cli::print_table({"config", "torch ms", "fp8sim ms", "diff", "within 15%"}, vr);
  }
  if (const Json* n = doc.find("notes"); n && n->size()) {
    fmt::print("\nnotes:\n");
    for (const Json& s : n->as_array()) fmt::print("  - {}\n", s.as_string());
  }
}

void print_framework(const Json& doc) {
  fmt::print("{}\n\n", doc.at("statement").as_string());
  const Json& so = doc.at("step_ops");
  fmt::print(
      "framework {}: {}\nop inventory {} ({} configurations on {}; fit residual: other bytes {:.2g}, kernels "
      "{:.2g})\n\n",
      doc.at("framework").as_string(), doc.at("framework_description").as_string(), so.at("file").as_string(),
      so.at("configs").as_int(), so.at("device").as_string(), so.at("max_residual_bytes").as_number(),
      so.at("max_residual_kernels").as_number());
  auto row = [](const Json& r, std::vector<std::string> head) {
    for (const char* k : {"gemm_ms", "attention_ms", "other_ms", "optimizer_ms", "host_ms", "step_ms"})
      head.push_back(f(r.at(k).as_number(), 1));
    head.push_back(f(r.at("other_bytes").as_number() / 1e9, 1));
    head.push_back(f(r.at("kernels").as_number(), 0));
    return head;
  };
  if (const Json* p = doc.find("predictions")) {
    std::vector<std::vector<std::string>> rows;
    for (const Json& r : p->as_array())
      rows.push_back(row(r, {doc.at("model").at("name").as_string(), std::to_string(r.at("batch").as_int()),
                             f(r.at("tokens_per_s").as_number(), 0)}));
    cli::print_table(
        {"model", "batch", "tok/s", "gemm", "attn", "other", "optim", "host", "step ms", "other GB", "launches"}, rows);
  }
  if (const Json* v = doc.find("validation")) {
    std::vector<std::vector<std::string>> rows;
    for (const Json& r : v->at("rows").as_array()) {
      auto cells = row(r, {r.at("model").as_string(), std::to_string(r.at("batch").as_int())});
      cells.resize(8);
      cells.push_back(f(r.at("measured_step_ms").as_number(), 1));
      cells.push_back(fmt::format("{:+.1f}%", 100 * r.at("difference").as_number()));
      rows.push_back(cells);
    }
    cli::print_table({"model", "batch", "gemm", "attn", "other", "optim", "host", "step ms", "measured", "diff"}, rows);
    fmt::print("{} of {} steps within 10% (max |diff| {:.1f}%)\n", v->at("within_10_percent").as_int(),
               v->at("rows").size(), 100 * v->at("max_abs_difference").as_number());
  }
  if (const Json* n = doc.find("notes"); n && n->size()) {
    fmt::print("\nnotes:\n");
    for (const Json& s : n->as_array()) fmt::print("  - {}\n", s.as_string());
  }
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
  for (const char* opt : {"recipes", "gpus", "grad-accum", "torch-times", "write-calibration", "table7", "no-fig4b",
                          "fsdp-comm", "link-gbps", "reps", "warmup", "ops", "markdown"})
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
  const StepOps ops = load_step_ops(step_ops);
  if (ops.framework != framework)
    throw UsageError(fmt::format("--step-ops '{}' is the inventory of framework '{}', not '{}'", step_ops,
                                 ops.framework, framework));
  std::vector<std::string> notes;
  Json doc = Json::object();
  doc["framework"] = framework;
  doc["compiled"] = compiled;
  doc["framework_description"] = description;
  doc["statement"] = fmt::format(
      "MODELLED step times of {} ({}, BF16, one GPU) from calibration {} ({}) and the framework's op inventory",
      framework, compiled ? "torch.compile" : "eager", source_relative(calib),
      cal.device.is_object() && cal.device.contains("name") ? cal.device.at("name").as_string()
                                                            : std::string("unknown GPU"));
  Json so = Json::object();
  so["file"] = source_relative(step_ops);
  so["device"] = ops.device;
  so["versions"] = ops.versions;
  so["configs"] = static_cast<int64_t>(ops.configs);
  so["max_residual_bytes"] = ops.max_residual.at("elementwise_bytes");
  so["max_residual_kernels"] = ops.max_residual.at("elementwise_kernels");
  doc["step_ops"] = so;
  std::string command = "fp8sim speed";
  for (const auto& a : args) command += " " + a;
  doc["command"] = command;
  if (!validate.empty()) {
    if (!std::filesystem::exists(validate))
      throw UsageError(fmt::format("--validate '{}': no such file or folder", validate));
    const Json rows = framework_validate({validate}, cal, ops, notes, compiled);
    int64_t within = 0;
    double worst = 0;
    for (const Json& r : rows.as_array()) {
      const double dd = std::abs(r.at("difference").as_number());
      within += dd <= 0.10;
      worst = std::max(worst, dd);
    }
    Json v = Json::object();
    v["rows"] = rows;
    v["within_10_percent"] = within;
    v["max_abs_difference"] = worst;
    doc["validation"] = v;
  } else {
    const ModelShape m = load_model_shape(model);
    if (model.find('/') != std::string::npos || model.ends_with(".json")) files.input("--model", model);
    Json mj = Json::object();
    mj["name"] = m.name;
    mj["layers"] = m.layers;
    mj["params"] = m.params;
    doc["model"] = mj;
    doc["seq"] = seq;
    Json preds = Json::array();
    for (const std::string& b : split(batch, ',')) {
      const int64_t bb = parse_size("--batch", b);
      validate_run_sizes({.batch = bb, .seq = seq});
      preds.push_back(framework_step(m, bb, seq, cal, ops, notes, compiled).to_json());
    }
    doc["predictions"] = preds;
  }
  Json nj = Json::array();
  for (const auto& n : notes) nj.push_back(n);
  doc["notes"] = nj;
  if (json_id >= 0) files.write(json_id, doc.dump(1) + "\n");
  print_framework(doc);
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
      "reps", po::value(&reps)->default_value(10), "measuring run: timed repetitions per kernel")(
      "warmup", po::value(&warmup)->default_value(3), "measuring run: untimed warm-up launches per kernel")(
      "framework", po::value(&framework),
      "predict an eager BF16 step as this framework runs it: torch or hf (from the calibration and the framework's "
      "op inventory; --batch may list several, e.g. 1,2,4)")(
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
          "  fp8sim speed --framework hf --compile --validate reports/h200/frameworks"))
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
  if (o.recipes.empty()) throw UsageError("--recipes is empty");
  parse_batch(batch, o);
  validate_run_sizes({.batch = o.batch, .seq = seq, .gpus = gpus, .grad_accum = accum});
  for (const auto& [r, b] : o.recipe_batch)
    validate_run_sizes({.batch = b, .seq = seq, .batch_option = fmt::format("--batch for {}", r)});
  if (!(link > 0) || !std::isfinite(link)) throw UsageError("--link-gbps must be a positive number");
  if (fsdp != "none" && fsdp != "serial" && fsdp != "overlap")
    throw UsageError(fmt::format("--fsdp-comm must be none, serial or overlap, not '{}'", fsdp));
  if (reps <= 0 || warmup < 0) throw UsageError("--reps must be positive and --warmup non-negative");
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
  if (model.find('/') != std::string::npos || model.ends_with(".json")) files.input("--model", model);
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

  const Json doc = speed_report(o, gpu);
  if (bar) bar->finish();
  if (json_id >= 0) files.write(json_id, doc.dump(1) + "\n");
  if (md_id >= 0) files.write(md_id, speed_markdown(doc));
  if (const Json* skipped = doc.find("skipped_recipes"))
    for (const Json& r : skipped->as_array())
      fmt::print(stderr, "fp8sim speed: warning: recipe {} left out: {}\n", r.at("recipe").as_string(),
                 r.at("why").as_string());
  if (const Json* stale = doc.at("timing").find("stale_kernels"))
    for (const Json& f : stale->as_array())
      fmt::print(stderr, "fp8sim speed: warning: {}\n", f.at("message").as_string());
  print_report(doc, vm.count("ops") > 0);
  std::fflush(stdout);
  files.commit();
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("speed", "step time, tokens/s/GPU and speedup vs BF16 per recipe from timed kernels", fp8sim::run_speed);
