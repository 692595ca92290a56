// fp8sim info: what is in a trace, in the trace's own terms (steps, roles, ops, tensors).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_info.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

std::string human_bytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

std::string model_line(const Json& m) {
  if (!m.is_object()) return "(no model_config attribute)";
  auto get = [&](const char* k) -> std::string {
    const Json* v = m.find(k);
    if (!v) return "?";
    if (v->is_string()) return v->as_string();
    if (v->is_bool()) return v->as_bool() ? "true" : "false";
    if (v->is_number()) return fmt::format("{:g}", v->as_number());
    return "?";
  };
  if (!m.contains("hidden_size")) return get("name");
  std::string s =
      fmt::format("{}: hidden {}, ffn {}, {} layers, {}/{} heads (q/kv), vocab {}, {}, {}", get("name"),
                  get("hidden_size"), get("intermediate_size"), get("num_hidden_layers"), get("num_attention_heads"),
                  get("num_key_value_heads"), get("vocab_size"), get("norm"), get("activation"));
  if (const Json* t = m.find("tie_word_embeddings"); t && t->is_bool() && t->as_bool()) s += ", tied embeddings";
  return s;
}

std::string training_line(const Json& t) {
  if (!t.is_object()) return "";
  std::vector<std::string> parts;
  auto num = [&](const char* k) -> std::optional<double> {
    const Json* v = t.find(k);
    return v && v->is_number() ? std::optional<double>(v->as_number()) : std::nullopt;
  };
  auto str = [&](const char* k) -> std::string {
    const Json* v = t.find(k);
    return v && v->is_string() ? v->as_string() : "";
  };
  if (auto b = num("batch_size"), s = num("seq_len"); b && s)
    parts.push_back(fmt::format("batch {} x {} tokens", *b, *s));
  if (auto s = num("steps")) parts.push_back(fmt::format("{} steps", *s));
  if (auto p = num("params")) parts.push_back(fmt::format("{} parameters", *p));
  if (auto s = num("seed")) parts.push_back(fmt::format("seed {}", *s));
  if (!str("device").empty()) parts.push_back(str("device") + " " + str("compute_dtype"));
  if (!str("tokenizer").empty()) parts.push_back(str("tokenizer"));
  if (!str("factory").empty()) parts.push_back("factory " + str("factory"));
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

// A list for a message: every value when there are few, else the first and last few and a count.
std::string some_of(const std::vector<std::string>& v) {
  if (v.empty()) return "none";
  std::string s;
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 8 && i == 5) {
      s += fmt::format(", ... ({} in all), {}", n, v[n - 1]);
      break;
    }
    s += (i ? ", " : "") + v[i];
  }
  return s;
}

// A filter that selects no tensor is an error (bad data for the question, exit 1, as analyze's
// missing --step) naming what the trace holds instead: each given filter is checked alone first
// (its values in the trace are listed), then their combination.
void check_filter_matches(const trace::TraceReader& r, const trace::Filter& f) {
  const auto& ts = r.tensors();
  auto values = [&](auto key) {
    std::vector<std::string> out;
    for (const auto& t : ts) {
      std::string k = key(t);
      if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(std::move(k));
    }
    return out;
  };
  auto none = [&](const trace::Filter& one) {
    return std::none_of(ts.begin(), ts.end(), [&](const auto& t) { return one.matches(t); });
  };
  if (f.step && none(trace::Filter{.step = f.step})) {
    std::vector<std::string> steps;
    for (const auto& s : r.steps()) steps.push_back(std::to_string(s.step));
    throw Error(fmt::format("--step {} matches no tensor: the trace holds steps {}", *f.step, some_of(steps)));
  }
  if (f.role && none(trace::Filter{.role = f.role}))
    throw Error(fmt::format("--role {} matches no tensor: the trace holds roles {}", trace::role_name(*f.role),
                            some_of(values([](const auto& t) { return std::string(trace::role_name(t.role)); }))));
  if (f.layer && none(trace::Filter{.layer = f.layer})) {
    auto layers = values([](const auto& t) { return std::to_string(t.layer); });
    std::sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return std::stoi(a) < std::stoi(b); });
    throw Error(fmt::format("--layer {} matches no tensor: the trace holds layers {}", *f.layer, some_of(layers)));
  }
  if (!f.op.empty() && none(trace::Filter{.op = f.op})) {
    auto ops = values([](const auto& t) { return t.op.empty() ? std::string("(none)") : t.op; });
    std::sort(ops.begin(), ops.end());
    throw Error(fmt::format("--op {} matches no tensor: the trace holds ops {}", f.op, some_of(ops)));
  }
  if (!f.name_contains.empty() && none(trace::Filter{.name_contains = f.name_contains}))
    throw Error(fmt::format("--name {} matches no tensor name", f.name_contains));
  if (none(f))
    throw Error(
        "no tensor matches all the filters together (each one alone matches some; see "
        "'fp8sim info TRACE --summary')");
}

int run_info(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string trace_path, json_out, role_s, op, name;
  int64_t step = -1;
  int layer = -2;
  opts.add_options()("trace", po::value(&trace_path),
                     "the trace (.h5), a checkpoint (.safetensors) or a folder of .npy files, positional")(
      "summary", "per-role totals only, no tensor lines")("step", po::value(&step), "only this step")(
      "role", po::value(&role_s), "only this role: weight, grad, exp_avg, exp_avg_sq, activation, activation_grad")(
      "layer", po::value(&layer), "only this block index (-1: outside the blocks)")(
      "op", po::value(&op), "only this op (linear, norm, linear_input, norm_input, silu_input, ...)")(
      "name", po::value(&name), "only tensors whose name contains this text")(
      "json", po::value(&json_out),
      "also write the tree as JSON to this file (- : standard output, instead of "
      "the text)");
  po::positional_options_description pos;
  pos.add("trace", 1);
  po::variables_map vm;
  if (!cli::parse("info", args, opts, pos, vm,
                  "TRACE [--summary] [--step S] [--role R] [--layer L] [--op OP] [--json OUT]",
                  "Shows what a trace holds: the model and optimizer attributes, the grad window, and per\n"
                  "captured step the tensors by role with op, layer, dtype, shape, size and stored (compressed)\n"
                  "size. Like `h5ls -r`, but in the trace's own terms (schema: traces/FORMAT.md). A file that is\n"
                  "not a valid trace gives a one-line error naming what is missing.\n"
                  "Examples:\n"
                  "  fp8sim info traces/tiny-llama-s300.h5 --summary\n"
                  "  fp8sim info traces/tiny-llama-s300.h5 --step 295 --role activation\n"
                  "  fp8sim info traces/tiny-llama-s300.h5 --op linear --layer 0 --json info.json"))
    return 0;
  if (trace_path.empty()) throw UsageError("no trace given (see 'fp8sim info --help')");
  if (vm.count("op") && op.empty()) throw UsageError("--op is empty (give an op name such as linear)");
  if (vm.count("name") && name.empty()) throw UsageError("--name is empty (give part of a tensor name)");
  RunFiles files;
  files.input("TRACE", trace_path);
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;
  trace::Filter filter;
  if (vm.count("step")) filter.step = step;
  if (vm.count("role")) {
    auto r = trace::parse_role(role_s);
    if (!r)
      throw UsageError(fmt::format(
          "unknown --role '{}' (valid: weight, grad, exp_avg, exp_avg_sq, activation, activation_grad)", role_s));
    filter.role = *r;
  }
  if (vm.count("layer")) filter.layer = layer;
  filter.op = op;
  filter.name_contains = name;
  const bool summary = vm.count("summary") > 0;

  const trace::TraceReader r(trace_path);
  if (filter.step || filter.role || filter.layer || !filter.op.empty() || !filter.name_contains.empty())
    check_filter_matches(r, filter);
  const trace::TraceInfo info = trace::trace_info(r, filter, true);
  if (json_id >= 0) files.write(json_id, info.to_json().dump(2) + "\n");

  const auto& h = r.header();
  fmt::print("trace      {}  ({}, {} v{})\n", trace_path, human_bytes(static_cast<double>(r.file_bytes())),
             trace::kFormatName, h.version);
  if (!h.producer.empty()) fmt::print("producer   {}\n", h.producer);
  if (!h.created.empty()) fmt::print("created    {}\n", h.created);
  if (!h.command.empty()) fmt::print("command    {}\n", h.command);
  fmt::print("model      {}{}\n", h.model_kind.empty() ? "" : h.model_kind + " ", model_line(h.model_config));
  const auto& o = h.optimizer;
  if (!o.name.empty() || o.lr) {
    auto f = [](const std::optional<double>& v) { return v ? fmt::format("{:g}", *v) : std::string("?"); };
    fmt::print("optimizer  {}  lr {}  betas ({}, {})  eps {}  weight_decay {}\n", o.name.empty() ? "?" : o.name,
               f(o.lr), f(o.beta1), f(o.beta2), f(o.eps), f(o.weight_decay));
  }
  if (const std::string t = training_line(h.training); !t.empty()) fmt::print("training   {}\n", t);
  if (h.grad_window) {
    const auto [a, b] = *h.grad_window;
    const bool has_end = r.find_step(b + 1) != nullptr;
    fmt::print("grad window steps {}..{} ({} steps){}\n", a, b, b - a + 1,
               has_end ? fmt::format("; state after the window in step {}", b + 1) : "; NO end state stored");
  }
  if (!r.ignored().empty()) {
    fmt::print("ignored    {} object(s) outside the schema:", r.ignored().size());
    for (size_t i = 0; i < r.ignored().size() && i < 5; ++i) fmt::print(" {}", r.ignored()[i]);
    fmt::print("{}\n", r.ignored().size() > 5 ? " ..." : "");
  }
  const trace::TraceTotals& tot = info.totals;
  fmt::print("tensors    {} ({} elements, {} in memory, {} stored)\n", tot.tensors, tot.elements,
             human_bytes(static_cast<double>(tot.bytes)), human_bytes(static_cast<double>(tot.stored_bytes)));

  for (const trace::StepSummary& s : info.steps) {
    fmt::print("\nstep {}{}  lr {}  loss {}  adamw_step {}  {} tensors, {} ({} stored)\n", s.step,
               s.contents.empty() ? "" : " [" + s.contents + "]", num_or_dash(s.lr, "{:.4g}"),
               num_or_dash(s.loss, "{:.4f}"), num_or_dash(s.adamw_step, "{:g}"), s.tensor_count,
               human_bytes(static_cast<double>(s.bytes)), human_bytes(static_cast<double>(s.stored_bytes)));
    if (summary) {
      std::vector<std::vector<std::string>> rows;
      for (const trace::RoleSummary& rs : s.roles) {
        std::string dtypes, ops;
        for (const auto& d : rs.dtypes) dtypes += (dtypes.empty() ? "" : ",") + d;
        for (const auto& o : rs.ops) ops += (ops.empty() ? "" : ",") + o;
        rows.push_back({"  " + std::string(trace::role_name(rs.role)), fmt::format("{}", rs.tensors),
                        fmt::format("{}", rs.elements), human_bytes(static_cast<double>(rs.bytes)),
                        human_bytes(static_cast<double>(rs.stored_bytes)), dtypes, ops});
      }
      cli::print_table({"  role", "tensors", "elements", "bytes", "stored", "dtypes", "ops"}, rows);
      continue;
    }
    std::optional<trace::Role> current_role;
    std::vector<std::vector<std::string>> rows;
    auto flush = [&] {
      if (rows.empty()) return;
      cli::print_table({"    name", "op", "layer", "dtype", "shape", "bytes", "stored"}, rows);
      rows.clear();
    };
    for (const trace::TensorInfo& t : *s.tensors) {
      if (t.role != current_role) {
        flush();
        current_role = t.role;
        for (const trace::RoleSummary& rs : s.roles)
          if (rs.role == t.role)
            fmt::print("  {}: {} tensors, {} elements\n", trace::role_name(rs.role), rs.tensors, rs.elements);
      }
      std::string shape = "(";
      for (size_t i = 0; i < t.shape.size(); ++i) shape += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
      shape += t.shape.size() == 1 ? ",)" : ")";
      std::string name = t.name;
      if (t.modules.size() > 1) name += fmt::format("  [-> {} linears]", t.modules.size());
      rows.push_back({"    " + name, t.op, t.layer < 0 ? "-" : fmt::format("{}", t.layer),
                      std::string(trace::dtype_name(t.dtype)), shape, human_bytes(static_cast<double>(t.bytes())),
                      human_bytes(static_cast<double>(t.stored_bytes))});
    }
    flush();
  }
  std::fflush(stdout);
  files.commit();
  if (json_id >= 0 && json_out != "-") cli::note(fmt::format("wrote {}", json_out));
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("info", "show the steps, tensors, roles, ops, shapes and attributes of a trace", fp8sim::run_info);
