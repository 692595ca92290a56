// `fp8sim report`: options, the order of the phases, plots, and writing the folder.
#include "sim/report/report.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <set>
#include <thread>

#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/io.hpp"
#include "sim/common/paths.hpp"
#include "sim/common/sizes.hpp"
#include "sim/report/sections.hpp"
#include "sim/report/util.hpp"
#include "sim/speed/speed.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::report {

namespace fs = std::filesystem;

std::vector<std::string> default_recipes() { return recipe::report_default_names(); }

void Context::add_summary(const std::string& recipe, const std::string& column, std::string cell) {
  if (std::find(summary_columns.begin(), summary_columns.end(), column) == summary_columns.end())
    summary_columns.push_back(column);
  summary[recipe][column] = std::move(cell);
}

void Context::add_figure(const std::string& recipe, const std::string& key, double value, std::string cell,
                         const std::string& section) {
  Json f;
  if (std::isfinite(value)) f["value"] = value;
  else f["value"] = Json();
  f["cell"] = std::move(cell);
  f["section"] = section;
  figures[recipe][key] = std::move(f);
}

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(' '));
        return m;
      }
    }
  }
  return "unknown CPU";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string human_bytes(uintmax_t b) {
  if (b >= (uintmax_t{1} << 30)) return fmt::format("{:.2f} GiB", double(b) / double(uintmax_t{1} << 30));
  if (b >= (uintmax_t{1} << 20)) return fmt::format("{:.2f} MiB", double(b) / double(uintmax_t{1} << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", double(b) / 1024.0);
  return fmt::format("{} B", b);
}

// The committed sample trace (traces/README.md says how it was made); if it was renamed, the
// first traces/*.h5 in name order.
constexpr const char* kSampleTrace = "tiny-llama-s300.h5";

fs::path find_default_trace(std::string* looked) {
  const fs::path dir = find_resource("traces");
  if (looked)
    *looked = dir.empty() ? "no traces/ folder beside the fp8sim sources (set FP8SIM_SOURCE_DIR)" : dir.string();
  if (dir.empty()) return {};
  std::vector<fs::path> h5;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".h5") h5.push_back(e.path());
  std::sort(h5.begin(), h5.end());
  for (const auto& p : h5)
    if (p.filename() == kSampleTrace) return p;
  return h5.empty() ? fs::path() : h5.front();
}

// One line about what the trace holds: its model, producer and steps.
std::string trace_summary(const fs::path& p) {
  const trace::TraceReader r(p);
  const auto& h = r.header();
  std::string model = h.model_kind.empty() ? std::string("a model") : h.model_kind;
  if (h.model_config.is_object()) {
    const Json& c = h.model_config;
    const Json* name = c.find("name");
    const Json* d = c.find("hidden_size");
    const Json* L = c.find("num_hidden_layers");
    if (name && name->is_string()) model = "`" + name->as_string() + "`";
    if (d && d->is_number() && L && L->is_number())
      model += fmt::format(" (d={}, {} layers)", d->as_int(), L->as_int());
  }
  std::string window;
  if (h.grad_window) window = fmt::format(", grad window steps {}..{}", h.grad_window->first, h.grad_window->second);
  return fmt::format("{}; {} tensors in {} captured steps{}; written by {}{}", model, r.tensors().size(),
                     r.steps().size(), window, h.producer.empty() ? std::string("?") : h.producer,
                     h.created.empty() ? std::string() : " on " + h.created);
}

Json section_inputs(Context& ctx, const ReportOptions& o) {
  Section s("inputs", "Inputs and machine");
  std::error_code ec;
  const auto size = fs::file_size(o.trace, ec);
  std::vector<Row> rows = {
      {"trace", "`" + display_path(o.trace) + "`" + (ec ? "" : " (" + human_bytes(size) + ")")},
      {"trace contents", trace_summary(o.trace)},
      {"model (memory, speed)", "`" + o.model + "`"},
      {"recipes", join(o.recipes, ", ")},
      {"GPUs (data parallel, FSDP)", std::to_string(o.gpus)},
      {"micro-batch per GPU x sequence", fmt::format("{} x {}", o.batch, o.seq)},
  };
  s.table("What this report was run on", {"input", "value"}, rows);
  const gpu::DeviceStatus& d = ctx.device;
  std::vector<Row> mrows = {
      {"host", host_name()},
      {"CPU", fmt::format("{} ({} hardware threads)", cpu_model(), std::thread::hardware_concurrency())},
      {"GPU", d.available ? d.name : "none: " + d.reason()},
  };
  s.table("Machine", {"machine", ""}, mrows);
  return s.take();
}

Json section_summary(const Context& ctx) {
  Section s("summary", "Summary");
  s.para(
      "Headline numbers per recipe, gathered from the sections below (each section defines its numbers). "
      "`n/a` means the section that produces the number did not run on this machine or does "
      "not apply to the recipe.");
  std::vector<Row> rows;
  for (const auto& entry : ctx.opts.recipes) {
    const std::string& r = recipe_of(entry).name;
    Row row{r};
    const Json* rec = ctx.summary.find(r);
    for (const auto& c : ctx.summary_columns) {
      const Json* cell = rec ? rec->find(c) : nullptr;
      row.push_back(cell && cell->is_string() ? cell->as_string() : "n/a");
    }
    rows.push_back(std::move(row));
  }
  Row header{"recipe"};
  header.insert(header.end(), ctx.summary_columns.begin(), ctx.summary_columns.end());
  if (ctx.summary_columns.empty()) s.para("No section produced headline numbers (see the sections below).");
  else s.table("", header, rows);
  return s.take();
}

}  // namespace

ReportOptions resolve_options(ReportOptions o) {
  validate_run_sizes({.batch = o.batch, .seq = o.seq, .gpus = o.gpus, .grad_accum = std::nullopt});
  if (o.trace.empty()) {
    std::string looked;
    o.trace = find_default_trace(&looked);
    FP8SIM_REQUIRE(!o.trace.empty(), "no TRACE given and no committed sample trace found ({})", looked);
  }
  std::error_code ec;
  const auto st = fs::status(o.trace, ec);
  FP8SIM_REQUIRE(fs::exists(st), "cannot open trace '{}': no such file", o.trace.string());
  FP8SIM_REQUIRE(fs::is_regular_file(st) || fs::is_directory(st),
                 "trace '{}' is neither a file nor a folder of .npy files", o.trace.string());
  FP8SIM_REQUIRE(::access(o.trace.c_str(), R_OK) == 0, "cannot read trace '{}'", o.trace.string());
  if (o.recipes.empty()) o.recipes = default_recipes();
  validate_pieces(o);
  std::set<std::string> seen;
  for (const auto& r : o.recipes) {
    FP8SIM_REQUIRE(!r.empty(), "--recipes has an empty name");
    if (!seen.insert(r).second) throw UsageError(fmt::format("recipe '{}' is listed twice in --recipes", r));
  }
  // Different entries (a name and a file, two files) may still name the same recipe.
  std::set<std::string> names;
  for (const auto& r : o.recipes)
    if (const std::string& n = recipe_of(r).name; !names.insert(n).second)
      throw UsageError(fmt::format("recipe '{}' is listed twice in --recipes ('{}' is named so)", n, r));
  return o;
}

Json build_report(const ReportOptions& opts, gpu::Backend& gpu) {
  Context ctx{opts, gpu, gpu.device(), Json::object(), Json::object(), Json::object(), {}, Json::object()};
  // One phase per section; the bar advances as each finishes (the pieces draw their own bars
  // for long inner loops).
  // `split`: the section splits its work among MPI ranks; the others run on rank 0 alone (the
  // other ranks never time kernels on a GPU rank 0 measures with).
  struct Phase {
    const char* label;
    Json (*run)(Context&);
    bool split;
  };
  const Phase phases[] = {
      {"report: tensors", section_tensors, true},     {"report: gemm error", section_gemm, false},
      {"report: optimizer", section_optimizer, true}, {"report: memory", section_memory, false},
      {"report: speed", section_speed, false},        {"report: compare", section_compare, false},
      {"report: bench", section_bench, false},
  };
  std::vector<Json> body;
  for (const auto& ph : phases) {
    if (!ph.split && !dist::is_root()) continue;
    Progress bar(ph.label, 1);
    ctx.progress = [&bar](double done, double total) { bar.update(total > 0 ? done / total : 0); };
    body.push_back(ph.run(ctx));
    bar.update(1);
    bar.finish();
    const Json& sec = body.back();
    if (!opts.keep_going && sec.at("status").as_string() == "error")
      throw Error(fmt::format(
          "section '{}' failed: {} (no report written; --keep-going writes it with the error "
          "in that section)",
          sec.at("title").as_string(), sec.find("reason") ? sec.at("reason").as_string() : std::string("error")));
  }
  ctx.progress = [](double, double) {};

  Json doc;
  doc["fp8sim_report"] = 1;
  doc["title"] = fmt::format("fp8sim report: {} on {}", opts.trace.filename().string(), opts.model);
  Json meta;
  meta["generated"] = utc_now();
  meta["fp8sim_version"] = opts.version;
  meta["command"] = opts.command_line;
  meta["host"] = host_name();
  meta["cpu"] = cpu_model();
  meta["device"] = ctx.device.to_json();
  meta["trace"] = display_path(opts.trace);
  meta["model"] = opts.model;
  Json recipes = Json::array(), colours = Json::object();
  for (const auto& r : opts.recipes) {
    const recipe::TrainingRecipe& rec = recipe_of(r);
    recipes.push_back(rec.name);
    if (!rec.colour.empty()) colours[rec.name] = rec.colour;
  }
  meta["recipes"] = std::move(recipes);
  // Each recipe's colour in the plots (scripts/plots.py reads them with the plot data).
  meta["recipe_colours"] = std::move(colours);
  meta["gpus"] = opts.gpus;
  meta["batch"] = opts.batch;
  meta["seq"] = opts.seq;
  doc["meta"] = std::move(meta);
  Json intro = Json::array();
  intro.push_back(fmt::format("Generated {} by `{}` (fp8sim {}) on {}.", doc["meta"]["generated"].as_string(),
                              opts.command_line.empty() ? std::string("fp8sim report") : opts.command_line,
                              opts.version, host_name()));
  intro.push_back(
      "Accuracy comes from replaying the trace's real tensors through each recipe's quantizers on the CPU "
      "emulator; memory from the footprint model for the chosen model and GPU count; speed from kernels "
      "timed on a GPU (or a calibration file measured on one). Every number is in `report.json`.");
  doc["intro"] = std::move(intro);

  Json sections = Json::array();
  // The verdict first: it answers the question the report exists for, from the sections below.
  sections.push_back(section_verdict(ctx));
  if (!opts.keep_going && sections.as_array().front().at("status").as_string() == "error")
    throw Error(
        fmt::format("section 'Verdict' failed: {} (no report written; --keep-going writes it with the error "
                    "in that section)",
                    sections.as_array().front().at("reason").as_string()));
  sections.push_back(section_summary(ctx));
  sections.push_back(section_inputs(ctx, opts));
  for (auto& s : body) sections.push_back(std::move(s));
  doc["sections"] = std::move(sections);
  doc["outro"] = Json::array();
  doc["plot_data"] = std::move(ctx.plot_data);
  doc["data"] = std::move(ctx.data);
  return doc;
}

// ---- writing ----------------------------------------------------------------------------------

namespace {

// Marks every plot block of every section; `status_of(file)` gives {status, reason}.
void mark_plots(Json& doc, const std::function<std::pair<std::string, std::string>(const std::string&)>& status_of) {
  for (auto& s : doc["sections"].as_array()) {
    for (auto& b : s["blocks"].as_array()) {
      if (!b.contains("plot")) continue;
      Json& p = b["plot"];
      auto [st, why] = status_of(p.at("file").as_string());
      p["status"] = st;
      if (why.empty()) {
        auto& o = p.as_object();
        o.erase(std::remove_if(o.begin(), o.end(), [](const auto& kv) { return kv.first == "reason"; }), o.end());
      } else {
        p["reason"] = why;
      }
    }
  }
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

struct PlotRun {
  std::string status, reason;
  Json info;
};

PlotRun draw_plots(Json& doc, const fs::path& dir, const fs::path& given_python) {
  PlotRun run;
  const Json& plot_data = doc.at("plot_data");
  if (plot_data.size() == 0) {
    run.status = "skipped";
    run.reason = "no section produced anything to plot";
    return run;
  }
  std::string why;
  const fs::path python = given_python.empty() ? find_python(&why) : given_python;
  if (python.empty()) {
    run.status = "skipped";
    run.reason = why;
    return run;
  }
  run.info["python"] = display_path(python);
  const fs::path script = find_resource("scripts/plots.py");
  if (script.empty()) {
    run.status = "skipped";
    run.reason = "scripts/plots.py not found (set FP8SIM_SOURCE_DIR to the fp8sim source tree)";
    return run;
  }
  const fs::path input = dir / ".plot_data.json", manifest = dir / ".plots_manifest.json", log = dir / ".plots.log",
                 mpl = dir / ".mplconfig";
  Json input_doc = plot_data;
  if (const Json* meta = doc.find("meta"))
    if (const Json* c = meta->find("recipe_colours")) input_doc["recipe_colours"] = *c;
  write_file_atomic(input, input_doc.dump(1));
  const double n_plots = static_cast<double>(plot_data.size());
  Progress bar("report: plots", n_plots);
  ProcessResult pr =
      run_process({python.string(), script.string(), input.string(), dir.string(), "--manifest", manifest.string()},
                  {"MPLBACKEND=Agg", "MPLCONFIGDIR=" + mpl.string(), "PYTHONDONTWRITEBYTECODE=1"}, log, 600.0,
                  [&](const std::string& out) {
                    // "plot I/N" is printed as plot I starts: I - 1 are done.
                    const auto started = std::count(out.begin(), out.end(), '\n');
                    bar.update(static_cast<double>(std::max<long>(0, started - 1)));
                  });
  bar.finish();
  std::error_code ec;
  Json mf;
  if (fs::exists(manifest, ec)) mf = Json::parse(read_text_file(manifest));
  for (const auto& p : {input, manifest, log}) fs::remove(p, ec);
  fs::remove_all(mpl, ec);
  if (pr.timed_out) {
    run.status = "failed";
    run.reason = "scripts/plots.py ran longer than 600 s and was stopped";
  } else if (pr.exit_code == 3) {
    run.status = "skipped";
    run.reason = last_line(pr.output);
  } else if (!mf.is_object()) {
    run.status = "failed";
    run.reason = fmt::format("scripts/plots.py failed (exit {}): {}", pr.exit_code, last_line(pr.output));
  } else {
    run.info["matplotlib"] = mf.contains("matplotlib") ? mf.at("matplotlib") : Json();
    run.info["plots"] = mf.contains("plots") ? mf.at("plots") : Json::object();
    run.status = pr.exit_code == 0 ? "ok" : "partial";
    if (pr.exit_code != 0) run.reason = "some plots failed; see each plot's reason";
  }
  return run;
}

}  // namespace

WriteResult write_report(Json& doc, StagingDir& staging, bool plots, const fs::path& python) {
  const fs::path dir = staging.path();
  PlotRun pr;
  if (!plots) {
    pr.status = "skipped";
    pr.reason = "--no-plots was given";
  } else {
    pr = draw_plots(doc, dir, python);
  }
  const Json* per_plot = pr.info.find("plots");
  mark_plots(doc, [&](const std::string& file) -> std::pair<std::string, std::string> {
    if (pr.status == "skipped" || pr.status == "failed") return {"skipped", pr.reason};
    const Json* e = per_plot ? per_plot->find(file) : nullptr;
    if (!e) return {"skipped", "no data for this plot"};
    if (e->at("ok").as_bool()) {
      std::error_code ec;
      if (fs::exists(dir / file, ec)) return {"ok", ""};
      return {"skipped", "scripts/plots.py reported it drawn but the file is missing"};
    }
    return {"skipped", e->contains("error") ? e->at("error").as_string() : std::string("failed")};
  });
  Json pj;
  pj["status"] = pr.status;
  if (!pr.reason.empty()) pj["reason"] = pr.reason;
  for (const auto& [k, v] : pr.info.is_object() ? pr.info.as_object() : Json::Object{})
    if (k != "plots") pj[k] = v;
  doc["plots"] = pj;
  Json& outro = doc["outro"];
  if (!outro.is_array()) outro = Json::array();
  if (pr.status == "ok")
    outro.push_back(fmt::format("Plots drawn by `scripts/plots.py` with {} (matplotlib {}).",
                                pj.contains("python") ? pj.at("python").as_string() : std::string("python"),
                                pj.contains("matplotlib") && pj.at("matplotlib").is_string()
                                    ? pj.at("matplotlib").as_string()
                                    : std::string("?")));
  else
    outro.push_back(
        fmt::format("**Plots {}:** {}. Every table is still in this report; to draw the plots, "
                    "install matplotlib for the Python fp8sim finds (`FP8SIM_PYTHON`, the project "
                    "venv made by `scripts/setup.sh`, or `python3` on PATH) and run the report again.",
                    pr.status, pr.reason));
  outro.push_back(
      "Machine-readable: `report.json` (the same sections plus every piece's full document under "
      "`data`). Plots: `report.md` links the PNG files; `report.html` embeds them and needs no network.");

  WriteResult wr;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".png") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  files.insert(files.begin(), {"report.json", "report.md", "report.html"});
  Json fj = Json::array();
  for (const auto& f : files) fj.push_back(f);
  doc["files"] = std::move(fj);

  write_file_atomic(dir / "report.md", render_markdown(doc));
  write_file_atomic(dir / "report.html", render_html(doc, [&](const std::string& file) {
                      std::error_code e2;
                      // Only plain names: a plot file can never point outside the report folder.
                      if (file.find('/') != std::string::npos || !fs::exists(dir / file, e2)) return std::string();
                      return read_text_file(dir / file);
                    }));
  write_file_atomic(dir / "report.json", doc.dump(2));
  staging.commit();
  wr.dir = staging.target();
  wr.files = files;
  wr.plots_status = pr.status;
  wr.plots_reason = pr.reason;
  for (const auto& sec : doc.at("sections").as_array()) {
    const Json* why = sec.find("reason");
    wr.sections.push_back({sec.at("title").as_string(), sec.at("status").as_string(),
                           why && why->is_string() ? why->as_string() : std::string()});
  }
  return wr;
}

WriteResult run_report(const ReportOptions& raw, gpu::Backend& gpu) {
  const ReportOptions opts = resolve_options(raw);
  // The report replaces its folder whole: a folder holding one of the run's inputs is refused.
  {
    const fs::path target = report_target(opts.out_dir);
    auto inside = [&](const fs::path& p, const char* what) {
      std::error_code ec;
      if (p.empty() || !fs::exists(p, ec)) return;
      const fs::path rel = fs::weakly_canonical(fs::absolute(p), ec).lexically_relative(target);
      if (!rel.empty() && *rel.begin() != "..")
        throw UsageError(
            fmt::format("--out '{}' holds the {} '{}', which the report would delete; choose another "
                        "folder",
                        opts.out_dir.string(), what, p.string()));
    };
    inside(opts.trace, "trace");
    if (names_a_file(opts.model)) inside(opts.model, "model file");
    inside(speed::default_calibration_path(), "speed calibration");
    for (const std::string& r : opts.recipes)
      if (!recipe::is_registered(r)) inside(r, "recipe file");
  }
  if (!dist::is_root()) {  // a distributed run's other ranks compute their share; rank 0 writes
    build_report(opts, gpu);
    dist::check_all_ok();
    return {};
  }
  StagingDir staging(opts.out_dir);  // fails now, not after minutes of analysis
  Json doc = build_report(opts, gpu);
  dist::check_all_ok();  // every rank's share is in: nothing is written after a failure elsewhere
  return write_report(doc, staging, opts.plots, opts.python);
}

}  // namespace fp8sim::report
