// fp8sim._core: the Python binding of the C++ library. Thin: each function calls the library
// function the matching command calls, so results equal the command line's bit for bit. Inputs
// arrive as C-contiguous CPU arrays (float32, or uint16 bits of bfloat16 / float16, which the
// Python layer views without a copy); outputs are NumPy arrays that own the library's buffers.
// Traces: analyze, optim and report read a trace by path, or (analyze, optim) named arrays in
// memory that the Python layer passes as (name, array, kind) and keeps alive for the call.
// Errors: UsageError and Error become ValueError with the library's one-line message; the GIL is
// released around every computation.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <csignal>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "sim/analyze/analyze.hpp"
#include "sim/backend/backend.hpp"
#include "sim/common/check.hpp"
#include "sim/common/interrupt.hpp"
#include "sim/common/json.hpp"
#include "sim/common/output.hpp"
#include "sim/common/paths.hpp"
#include "sim/formats/cast.hpp"
#include "sim/memory/memory.hpp"
#include "sim/model/model.hpp"
#include "sim/optim/replay.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"
#include "sim/quant/spec.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/report/report.hpp"
#include "sim/trace/tensor_files.hpp"
#include "sim/trace/trace.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fp8sim::py {
namespace {

using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// Ctrl-C during long work (analyze, optim_replay, report), which runs without the GIL so that
// Python's own handler cannot act: for the guard's lifetime SIGINT requests an interrupt, the
// library stops at its next boundary (a tensor, a parameter) by throwing Interrupted, and Python
// sees KeyboardInterrupt. The previous handler (Python's) comes back when the call returns.
class SigintGuard {
 public:
  SigintGuard() {
    clear_interrupt();
    struct sigaction sa {};
    sa.sa_handler = [](int) { request_interrupt(); };
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
  }
  ~SigintGuard() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
    clear_interrupt();
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

// A NumPy array that owns `v` (moved to the heap; freed when the array is).
template <typename T>
nb::ndarray<nb::numpy, T> owned(std::vector<T>&& v, const std::vector<int64_t>& shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return nb::ndarray<nb::numpy, T>(heap->data(), dims.size(), dims.data(), owner);
}

std::vector<int64_t> shape_of(const InArray& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

// `kind` is what the Python layer says the array holds: "f32", "bf16" or "fp16" (uint16 bits).
InputDtype input_dtype(const InArray& a, const std::string& kind) {
  if (kind == "f32") {
    FP8SIM_REQUIRE(a.dtype() == nb::dtype<float>(), "expected float32 data");
    return InputDtype::F32;
  }
  FP8SIM_REQUIRE(kind == "bf16" || kind == "fp16", "unknown input kind '{}'", kind);
  FP8SIM_REQUIRE(a.dtype() == nb::dtype<uint16_t>(), "expected 16-bit data");
  return kind == "bf16" ? InputDtype::BF16 : InputDtype::FP16;
}

std::string dtype_name(InputDtype d) {
  return d == InputDtype::F32 ? "float32" : (d == InputDtype::BF16 ? "bfloat16" : "float16");
}

struct Quantized {
  QuantizeResult r;
  std::string input_dtype;
};

nb::object quantize(const InArray& x, const std::string& kind, const std::string& spec_text, int threads) {
  const QuantSpec spec = QuantSpec::parse(spec_text);
  const InputDtype dt = input_dtype(x, kind);
  const std::vector<int64_t> shape = shape_of(x);
  FP8SIM_REQUIRE(x.size() > 0, "the array is empty (shape has a zero dimension)");
  FP8SIM_REQUIRE(threads >= 0, "threads must be >= 0, not {}", threads);
  auto out = std::make_unique<Quantized>();
  {
    nb::gil_scoped_release nogil;
    QuantizeOptions qo;
    qo.threads = threads;
    std::unique_ptr<DelayedScaler> scaler;
    if (spec.delayed.enabled()) {  // one tensor sees one step, as `fp8sim quantize` does
      scaler = std::make_unique<DelayedScaler>(spec);
      qo.delayed = scaler.get();
    }
    out->r = run_quantize(x.data(), dt, shape, spec, qo);
    out->input_dtype = dtype_name(dt);
  }
  QuantizeResult& r = out->r;
  QuantizedTensor& q = r.q;
  nb::dict d;
  d["spec"] = q.spec.to_string();
  d["shape"] = nb::tuple(nb::cast(shape));
  d["metrics"] = r.json.dump();
  d["input_dtype"] = out->input_dtype;
  const bool wide = q.spec.is_16bit();
  if (wide) {
    std::vector<uint16_t> c(q.codes.size() / 2);
    std::memcpy(c.data(), q.codes.data(), q.codes.size());
    d["codes"] = owned(std::move(c), shape);
  } else {
    d["codes"] = owned(std::move(q.codes), shape);
  }
  const std::vector<int64_t> grid{q.geometry.grid_rows, q.geometry.grid_cols};
  d["scales"] = q.spec.is_passthrough() ? nb::none() : nb::cast(owned(std::move(q.scales), grid));
  d["k"] = q.spec.has_expand() ? nb::cast(owned(std::move(q.expand_k), grid)) : nb::none();
  d["c"] = q.spec.has_expand() ? nb::cast(owned(std::move(q.expand_c), grid)) : nb::none();
  d["dequantized"] = owned(std::move(r.dequantized), shape);
  return d;
}

std::vector<float> floats(const std::optional<InArray>& a, const char* what, int64_t n) {
  if (!a) return {};
  FP8SIM_REQUIRE(a->dtype() == nb::dtype<float>(), "{} must be float32", what);
  FP8SIM_REQUIRE(static_cast<int64_t>(a->size()) == n, "{} holds {} values; the spec's group grid has {}", what,
                 a->size(), n);
  const float* p = static_cast<const float*>(a->data());
  return std::vector<float>(p, p + n);
}

nb::object dequantize(const InArray& codes, const std::optional<InArray>& scales, const std::string& spec_text,
                      const std::optional<InArray>& k, const std::optional<InArray>& c, int threads) {
  QuantizedTensor q;
  q.spec = QuantSpec::parse(spec_text);
  q.shape = shape_of(codes);
  q.geometry = group_geometry(q.spec, q.shape);
  const bool wide = q.spec.is_16bit();
  FP8SIM_REQUIRE(codes.dtype() == (wide ? nb::dtype<uint16_t>() : nb::dtype<uint8_t>()), "codes of {} must be {}",
                 q.spec.to_string(), wide ? "uint16" : "uint8");
  const size_t bytes = codes.size() * (wide ? 2 : 1);
  q.codes.resize(bytes);
  std::memcpy(q.codes.data(), codes.data(), bytes);
  const int64_t groups = q.geometry.num_groups();
  if (!q.spec.is_passthrough()) {
    FP8SIM_REQUIRE(scales.has_value(), "spec {} needs the scales", q.spec.to_string());
    q.scales = floats(scales, "scales", groups);
  }
  if (q.spec.has_expand()) {
    FP8SIM_REQUIRE(k.has_value() && c.has_value(), "spec {} (Dynamic Range Expansion) needs k and c",
                   q.spec.to_string());
    q.expand_k = floats(k, "k", groups);
    q.expand_c = floats(c, "c", groups);
  }
  std::vector<float> out;
  {
    nb::gil_scoped_release nogil;
    out = fp8sim::dequantize(q, threads);
  }
  return nb::cast(owned(std::move(out), q.shape));
}

nb::object cast(const InArray& x, const std::string& kind, const std::string& format, bool saturate,
                const std::string& rounding, uint64_t seed, int threads) {
  CastOptions o;
  o.format = parse_format(format);
  o.saturation = saturate ? Saturation::Finite : Saturation::None;
  o.rounding = parse_rounding(rounding);
  o.seed = seed;
  o.threads = threads;
  validate_cast_options(o);
  const InputDtype dt = input_dtype(x, kind);
  std::vector<uint8_t> out(x.size());
  {
    nb::gil_scoped_release nogil;
    if (dt == InputDtype::F32) cast_f32_to_fp8(static_cast<const float*>(x.data()), out.data(), x.size(), o);
    else if (dt == InputDtype::BF16) cast_bf16_to_fp8(static_cast<const uint16_t*>(x.data()), out.data(), x.size(), o);
    else cast_fp16_to_fp8(static_cast<const uint16_t*>(x.data()), out.data(), x.size(), o);
  }
  return nb::cast(owned(std::move(out), shape_of(x)));
}

nb::object decode(const InArray& codes, const std::string& format, int threads) {
  const Format f = parse_format(format);
  FP8SIM_REQUIRE(is_small_float(f), "decode takes e4m3, e5m2, e2m1, e2m3 or e3m2 codes, not {}", format);
  FP8SIM_REQUIRE(codes.dtype() == nb::dtype<uint8_t>(), "codes must be uint8");
  std::vector<float> out(codes.size());
  {
    nb::gil_scoped_release nogil;
    cast_fp8_to_f32(static_cast<const uint8_t*>(codes.data()), out.data(), codes.size(), f, threads);
  }
  return nb::cast(owned(std::move(out), shape_of(codes)));
}

// The spec's facts: canonical text and, for a shape, its exact bytes.
nb::dict spec_info(const std::string& text) {
  const QuantSpec s = QuantSpec::parse(text);
  nb::dict d;
  d["text"] = s.to_string();
  d["format"] = std::string(format_name(s.format));
  d["granularity"] = std::string(granularity_name(s.granularity));
  d["bits_per_code"] = s.bits_per_code();
  d["metadata_bytes_per_group"] = s.metadata_bytes_per_group();
  d["fmax"] = s.fmax();
  return d;
}

nb::dict spec_size(const std::string& text, const std::vector<int64_t>& shape) {
  const QuantSpec s = QuantSpec::parse(text);
  for (int64_t d : shape) FP8SIM_REQUIRE(d >= 0, "shape has a negative dimension ({})", d);
  const QuantizedSize z = quantized_size(s, shape);
  nb::dict d;
  d["codes"] = z.code_bytes;
  d["scales"] = z.scale_bytes;
  d["expand"] = z.expand_bytes;
  d["metadata"] = z.metadata_bytes();
  d["total"] = z.total_bytes();
  d["groups"] = z.num_groups;
  return d;
}

// `config`: a model name, a path, or the JSON text of a config (is_json); the document of
// `fp8sim memory --json` as JSON text.
std::string memory(const std::string& config, bool is_json, const std::string& origin,
                   const std::optional<std::string>& recipe, int64_t gpus, int64_t batch, int64_t seq, int zero,
                   int fsdp, const std::string& fsdp_param_dtype, bool checkpointing, bool free_grads, bool compiled,
                   const std::string& framework, const std::optional<double>& gpu_mem_gib, bool compare) {
  nb::gil_scoped_release nogil;
  memory::MemoryOptions o;
  if (recipe) o.recipe = *recipe;
  o.gpus = gpus;
  o.batch = batch;
  o.seq = seq;
  o.zero = zero;
  if (fsdp_param_dtype != "bf16" && fsdp_param_dtype != "fp32")
    throw UsageError(fmt::format("fsdp_param_dtype must be 'bf16' or 'fp32', not '{}'", fsdp_param_dtype));
  o.fsdp = fsdp;
  o.fsdp_gather_fp32 = fsdp_param_dtype == "fp32";
  o.checkpointing = checkpointing;
  o.grads_persist = !free_grads;
  o.compiled = compiled;
  o.framework = framework;
  if (gpu_mem_gib) o.gpu_mem_gib = *gpu_mem_gib;
  memory::apply_framework_profile(o, recipe.has_value());
  memory::validate(o);
  const model::ModelConfig m = is_json ? model::parse_model(Json::parse(config), origin) : model::load_model(config);
  return (compare ? memory::memory_compare(m, o).to_json() : memory::memory_breakdown(m, o).to_json()).dump(2);
}

std::string model_info(const std::string& config, bool is_json, const std::string& origin) {
  const model::ModelConfig m = is_json ? model::parse_model(Json::parse(config), origin) : model::load_model(config);
  return model::model_to_json(m).dump();
}

// ---- traces ------------------------------------------------------------------------------------

// Named arrays in memory: (name, C-contiguous array, kind as for quantize).
using Tensors = std::vector<std::tuple<std::string, InArray, std::string>>;

trace::DType trace_dtype(const InArray& a, const std::string& kind) {
  const InputDtype d = input_dtype(a, kind);
  return d == InputDtype::F32 ? trace::DType::F32 : (d == InputDtype::BF16 ? trace::DType::BF16 : trace::DType::F16);
}

// The tensors as a one-step trace read in place (the arrays outlive the reader: they are the
// call's arguments). `meta` (JSON text, may be empty) adds what a trace's attributes say: the
// step number `step`, the step's `lr` and `adamw_step`, the `optimizer` {name, beta1, beta2, eps,
// weight_decay, options} and the `grad_window` [first, last].
trace::TraceReader memory_reader(const Tensors& tensors, const std::string& label, const std::string& meta_text) {
  const Json meta = meta_text.empty() ? Json::object() : Json::parse(meta_text);
  const Json* st = meta.find("step");
  const int64_t step = st && st->is_number() ? st->as_int() : 0;
  std::vector<trace::MemoryTensor> mem;
  for (const auto& [name, a, kind] : tensors) mem.push_back({name, trace_dtype(a, kind), shape_of(a), a.data()});
  std::unique_ptr<trace::TensorFiles> files = trace::tensors_in_memory(std::move(mem), label, step);
  trace::StepInfo& s = files->steps.front();
  if (const Json* v = meta.find("lr"); v && v->is_number()) s.lr = v->as_number();
  if (const Json* v = meta.find("adamw_step"); v && v->is_number()) s.adamw_step = v->as_int();
  if (const Json* v = meta.find("contents"); v && v->is_string()) s.contents = v->as_string();
  trace::TraceHeader& h = files->header;
  if (const Json* o = meta.find("optimizer"); o && o->is_object()) {
    trace::OptimizerInfo& oi = h.optimizer;
    if (const Json* v = o->find("name"); v && v->is_string()) oi.name = v->as_string();
    auto num = [&](const char* key, std::optional<double>& out) {
      if (const Json* v = o->find(key); v && v->is_number()) out = v->as_number();
    };
    num("lr", oi.lr);
    num("beta1", oi.beta1);
    num("beta2", oi.beta2);
    num("eps", oi.eps);
    num("weight_decay", oi.weight_decay);
    if (const Json* v = o->find("options")) oi.options = *v;
  }
  if (const Json* w = meta.find("grad_window"); w && w->is_array() && w->size() == 2)
    h.grad_window = std::make_pair(w->as_array()[0].as_int(), w->as_array()[1].as_int());
  if (const Json* v = meta.find("producer"); v && v->is_string()) h.producer = v->as_string();
  return trace::TraceReader(std::move(files), label);
}

// `fp8sim analyze PATH --recipe R --json` (path given) or the same over `tensors`: the document
// as JSON text.
std::string analyze(const std::optional<std::string>& path, const Tensors& tensors, const std::string& label,
                    const std::string& recipe_arg, std::optional<int64_t> step, bool gemm, bool histograms,
                    int threads) {
  FP8SIM_REQUIRE(threads >= 0, "threads must be >= 0, not {}", threads);
  std::optional<trace::TraceReader> mem;
  if (!path) mem.emplace(memory_reader(tensors, label, ""));
  SigintGuard sigint;
  nb::gil_scoped_release nogil;
  analyze::AnalyzeOptions o;
  o.step = step;
  o.gemm = gemm;
  o.histograms = histograms;
  o.threads = threads;
  const recipe::TrainingRecipe& rec = recipe::get(recipe_arg);
  if (path) return analyze::analyze_trace(trace::TraceReader(*path), rec, o).to_json().dump(2);
  return analyze::analyze_trace(*mem, rec, o).to_json().dump(2);
}

// `fp8sim optim PATH --json` with the command's options (path given), or the same over `tensors`
// with `meta` (memory_reader): the document as JSON text.
std::string optim(const std::optional<std::string>& path, const Tensors& tensors, const std::string& label,
                  const std::string& meta, const std::vector<std::string>& recipes, int steps,
                  const std::string& update, const std::string& rounding, uint64_t seed, bool table1,
                  bool table1_lowbit, std::optional<int64_t> table1_step, bool drift, int threads) {
  FP8SIM_REQUIRE(steps >= 0, "steps must be >= 0, not {}", steps);
  FP8SIM_REQUIRE(threads >= 0, "threads must be >= 0, not {}", threads);
  optim::OptimOptions o;
  for (const auto& r : recipes) o.recipes.push_back(optim::StateRecipe::parse(r));
  o.steps = steps;
  o.rule = optim::parse_update_rule(update);
  o.rounding = parse_rounding(rounding);
  o.seed = seed;
  o.table1 = table1;
  FP8SIM_REQUIRE(table1 || !table1_lowbit, "table1_lowbit extends Table 1: it needs table1=True");
  o.table1_lowbit = table1_lowbit;
  o.table1_step = table1_step;
  o.drift = drift;
  o.threads = threads;
  std::optional<trace::TraceReader> mem;
  if (!path) mem.emplace(memory_reader(tensors, label, meta));
  SigintGuard sigint;
  nb::gil_scoped_release nogil;
  return (path ? optim::optim_replay(*path, o) : optim::optim_replay(*mem, o)).to_json().dump(2);
}

// `fp8sim report` (one report, not --compare) without a GPU: what the command prints, as a dict.
nb::dict report(const std::optional<std::string>& trace, const std::string& model,
                const std::vector<std::string>& recipes, int gpus, int batch, int seq, const std::string& out,
                bool plots, bool keep_going, const std::string& python, const std::string& command_line) {
  report::ReportOptions o;
  if (trace) {
    FP8SIM_REQUIRE(!trace->empty(), "the trace path is empty (give None for the sample trace)");
    o.trace = *trace;
  }
  o.model = model;
  o.recipes = recipes;
  o.gpus = gpus;
  o.batch = batch;
  o.seq = seq;
  o.out_dir = out;
  o.plots = plots;
  o.keep_going = keep_going;
  o.python = python;
  o.command_line = command_line;
#ifdef FP8SIM_VERSION
  o.version = FP8SIM_VERSION;
#endif
  report::WriteResult wr;
  forget_inputs_read();  // what earlier calls in this process read is not this report's input
  {
    SigintGuard sigint;
    nb::gil_scoped_release nogil;
    // The package is built for the CPU: the GPU sections say so, as the command does on a
    // machine without a GPU.
    static const std::unique_ptr<gpu::Backend> cpu = gpu::no_gpu_backend(
        "the Python package has no GPU backend (run `fp8sim report` on a GPU host for the GPU sections)");
    wr = report::run_report(o, *cpu);
  }
  nb::dict d;
  d["dir"] = wr.dir.string();
  d["files"] = nb::cast(wr.files);
  nb::dict pl;
  pl["status"] = wr.plots_status;
  pl["reason"] = wr.plots_reason;
  d["plots"] = pl;
  nb::list secs;
  for (const auto& s : wr.sections) {
    nb::dict e;
    e["title"] = s.title;
    e["status"] = s.status;
    e["reason"] = s.reason;
    secs.append(e);
  }
  d["sections"] = secs;
  return d;
}

}  // namespace
}  // namespace fp8sim::py

NB_MODULE(_core, m) {
  using namespace fp8sim::py;
  m.doc() = "fp8sim's C++ core (use the fp8sim package, not this module).";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const fp8sim::Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const fp8sim::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("quantize", &quantize, "x"_a, "kind"_a, "spec"_a, "threads"_a = 0);
  m.def("dequantize", &dequantize, "codes"_a, "scales"_a.none(), "spec"_a, "k"_a.none(), "c"_a.none(), "threads"_a = 0);
  m.def("cast", &cast, "x"_a, "kind"_a, "format"_a, "saturate"_a, "rounding"_a, "seed"_a, "threads"_a = 0);
  m.def("decode", &decode, "codes"_a, "format"_a, "threads"_a = 0);
  m.def("spec_info", &spec_info, "text"_a);
  m.def("spec_size", &spec_size, "text"_a, "shape"_a);
  m.def("memory", &memory, "config"_a, "is_json"_a, "origin"_a, "recipe"_a.none(), "gpus"_a, "batch"_a, "seq"_a,
        "zero"_a, "fsdp"_a, "fsdp_param_dtype"_a, "checkpointing"_a, "free_grads"_a, "compiled"_a, "framework"_a,
        "gpu_mem_gib"_a.none(), "compare"_a);
  m.def("model_info", &model_info, "config"_a, "is_json"_a, "origin"_a);
  m.def("analyze", &analyze, "path"_a.none(), "tensors"_a, "label"_a, "recipe"_a, "step"_a.none(), "gemm"_a,
        "histograms"_a, "threads"_a = 0);
  m.def("optim", &optim, "path"_a.none(), "tensors"_a, "label"_a, "meta"_a, "recipes"_a, "steps"_a, "update"_a,
        "rounding"_a, "seed"_a, "table1"_a, "table1_lowbit"_a, "table1_step"_a.none(), "drift"_a, "threads"_a = 0);
  m.def("report", &report, "trace"_a.none(), "model"_a, "recipes"_a, "gpus"_a, "batch"_a, "seq"_a, "out"_a, "plots"_a,
        "keep_going"_a, "python"_a, "command_line"_a);
  m.def(
      "set_data_root", [](const std::string& d) { fp8sim::set_data_root(d); }, "dir"_a);
  m.def("data_root", []() { return fp8sim::data_root().string(); });
  m.def("list_models", &fp8sim::model::list_models);
}
