// `fp8sim report --compare A B`: two finished reports side by side. The inputs are read as they
// are (report.json, format `fp8sim_report` 1); every number shown is read from them by a JSON
// pointer that compare.json records beside it, so a reader (and the tests) can check each one.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "sim/common/check.hpp"
#include "sim/common/output.hpp"
#include "sim/report/report.hpp"
#include "sim/report/section.hpp"
#include "sim/report/util.hpp"

namespace fp8sim::report {

namespace fs = std::filesystem;

namespace {

// A report.json is a few MiB (the optimizer histograms are the bulk); this bounds what is read.
constexpr uint64_t kMaxReportBytes = uint64_t{1} << 30;
constexpr int kReportFormat = 1;
constexpr int kCompareFormat = 1;

std::string str_or(const Json* j, std::string fallback = "n/a") {
  return j && j->is_string() ? j->as_string() : fallback;
}

// RFC 6901 JSON pointer: "/data/memory/coat/peak_gib"; array members by index.
const Json* at_pointer(const Json& doc, std::string_view ptr) {
  if (ptr.empty()) return nullptr;
  const Json* cur = &doc;
  size_t i = 1;
  while (cur && i <= ptr.size()) {
    const size_t end = std::min(ptr.find('/', i), ptr.size());
    std::string tok;
    for (size_t k = i; k < end; ++k) {
      if (ptr[k] == '~' && k + 1 < end) {
        tok += ptr[k + 1] == '1' ? '/' : '~';
        ++k;
      } else {
        tok += ptr[k];
      }
    }
    if (cur->is_object()) {
      cur = cur->find(tok);
    } else if (cur->is_array()) {
      if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos) return nullptr;
      const size_t idx = std::stoul(tok);
      cur = idx < cur->as_array().size() ? &cur->as_array()[idx] : nullptr;
    } else {
      return nullptr;
    }
    i = end + 1;
  }
  return cur;
}

std::string token(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string ptr(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (auto p : parts) out += "/" + token(p);
  return out;
}

std::vector<std::string> recipes_of(const Json& doc) {
  std::vector<std::string> out;
  if (const Json* r = at_pointer(doc, "/meta/recipes"); r && r->is_array())
    for (const auto& x : r->as_array())
      if (x.is_string()) out.push_back(x.as_string());
  return out;
}

// The pointer to recipe `r`'s entry in a list of per-recipe documents (the speed sections' `recipes`).
std::string list_entry(const Json& doc, const std::string& list, const std::string& r) {
  const Json* l = at_pointer(doc, list);
  if (!l || !l->is_array()) return "";
  for (size_t i = 0; i < l->as_array().size(); ++i) {
    const Json* name = l->as_array()[i].find("recipe");
    if (name && name->is_string() && name->as_string() == r) return list + "/" + std::to_string(i);
  }
  return "";
}

// One compared number.
enum class Better { Lower, Higher, Neither };
struct Metric {
  std::string recipe, key, label;
  bool db = false;  // an SNR in dB: B - A in dB instead of B/A
  Better better = Better::Lower;
  std::string a_ptr, b_ptr;
};

std::string ratio_text(double r) {
  if (!std::isfinite(r)) return "inf";
  if (r == 0) return "0x";
  return r < 0.01 ? fmt::format("{:.1e}x", r) : fmt::format("{:.2f}x", r);
}

// A number as the tables show it: integers (GPU counts, batches) as integers, else fmt_num's form.
std::string value_text(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) return fmt::format("{}", static_cast<int64_t>(x));
  return fmt_num(x);
}

struct TableOut {
  std::vector<Row> rows;
  Json marks = Json::array();
  Json entries = Json::array();
  int marked = 0, better = 0, worse = 0, changed = 0;
};

// Adds one metric as a row: recipe, quantity, A, B, B vs A. Marks B and the change when the
// difference is beyond the threshold: "better" / "worse" by the metric's direction, else "changed"
// (also when only one side has the number).
void add_metric(TableOut& t, const Metric& m, const Json& A, const Json& B, double threshold) {
  const Json* ja = at_pointer(A, m.a_ptr);
  const Json* jb = at_pointer(B, m.b_ptr);
  const bool ha = ja && ja->is_number(), hb = jb && jb->is_number();
  if (!ha && !hb) return;  // neither report has the number
  Json e;
  e["recipe"] = m.recipe;
  e["key"] = m.key;
  e["label"] = m.label;
  e["a"] = ha ? Json(ja->as_number()) : Json();
  e["b"] = hb ? Json(jb->as_number()) : Json();
  e["a_source"] = ha ? Json(m.a_ptr) : Json();
  e["b_source"] = hb ? Json(m.b_ptr) : Json();
  e["change"] = m.db ? "difference_db" : "ratio";
  e["better"] = m.better == Better::Lower ? Json("lower") : m.better == Better::Higher ? Json("higher") : Json();
  std::string change = "n/a", mark;
  if (ha && hb) {
    const double a = ja->as_number(), b = jb->as_number();
    bool far = false;
    if (m.db) {
      const double d = b - a;
      e["difference"] = d;
      e["ratio"] = Json();
      far = std::fabs(d) > 20.0 * std::log10(1.0 + threshold);
      change = fmt::format("{:+.2f} dB", d);
    } else {
      const double r = a != 0 ? b / a : (b == 0 ? 1.0 : INFINITY);
      e["difference"] = b - a;
      e["ratio"] = std::isfinite(r) ? Json(r) : Json();
      far = !(r > 0 && r <= 1.0 + threshold && r >= 1.0 / (1.0 + threshold));
      change = ratio_text(r);
    }
    if (far) {
      if (m.better == Better::Neither || a == b) mark = "changed";
      else mark = ((m.better == Better::Lower) == (b < a)) ? "better" : "worse";
    }
  } else {
    e["difference"] = Json();
    e["ratio"] = Json();
    if (ha || hb) {
      mark = "changed";
      change = ha ? "only in A" : "only in B";
    }
  }
  e["highlight"] = mark.empty() ? Json() : Json(mark);
  t.entries.push_back(std::move(e));
  const int r = static_cast<int>(t.rows.size());
  Row row{m.recipe, m.label, ha ? value_text(ja->as_number()) : "n/a", hb ? value_text(jb->as_number()) : "n/a"};
  if (!mark.empty()) {
    row.push_back(fmt::format("**{} ({})**", change, mark == "changed" ? "changed" : mark + " in B"));
    for (int col : {3, 4}) t.marks.push_back(Json(Json::Array{Json(r), Json(col), Json("diff " + mark)}));
    ++t.marked;
    (mark == "better" ? t.better : mark == "worse" ? t.worse : t.changed)++;
  } else {
    row.push_back(change);
  }
  t.rows.push_back(std::move(row));
}

// A section as the renderers read it (sim/report/section.hpp), with tables that may carry marks.
struct Sec {
  Json j;
  Sec(const std::string& id, const std::string& title) {
    j["id"] = id;
    j["title"] = title;
    j["status"] = "ok";
    j["blocks"] = Json::array();
  }
  void para(const std::string& text) {
    Json b;
    b["para"] = text;
    j["blocks"].push_back(std::move(b));
  }
  void table(const std::string& caption, const Row& header, const std::vector<Row>& rows, const Json& marks,
             const std::string& note = "") {
    Json t;
    t["caption"] = caption;
    Json h = Json::array();
    for (const auto& x : header) h.push_back(x);
    t["header"] = std::move(h);
    Json rs = Json::array();
    for (const auto& row : rows) {
      Json rj = Json::array();
      for (const auto& c : row) rj.push_back(c);
      rs.push_back(std::move(rj));
    }
    t["rows"] = std::move(rs);
    if (marks.size() > 0) t["marks"] = marks;
    if (!note.empty()) t["note"] = note;
    Json b;
    b["table"] = std::move(t);
    j["blocks"].push_back(std::move(b));
  }
};

const Row kMetricHeader = {"recipe", "quantity", "A", "B", "B vs A"};

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string num_text(const Json* j) {
  if (!j) return "n/a";
  if (j->is_number()) return value_text(j->as_number());
  if (j->is_string()) return j->as_string();
  return "n/a";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

}  // namespace

LoadedReport load_report(const std::string& arg) {
  if (arg.empty()) throw UsageError("--compare: a path is empty");
  fs::path p = arg;
  std::error_code ec;
  const auto st = fs::status(p, ec);
  FP8SIM_REQUIRE(fs::exists(st), "cannot open report '{}': no such file or folder", arg);
  if (fs::is_directory(st)) {
    p /= "report.json";
    FP8SIM_REQUIRE(fs::exists(fs::status(p, ec)),
                   "'{}' is a folder without report.json, not an fp8sim report folder (fp8sim report --out "
                   "DIR writes one)",
                   arg);
  }
  const std::string text = read_input_file(p, kMaxReportBytes);
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Error& e) {
    throw Error(fmt::format("'{}' is not an fp8sim report: {}", p.string(), e.what()));
  }
  const Json* fmt_field = doc.is_object() ? doc.find("fp8sim_report") : nullptr;
  FP8SIM_REQUIRE(fmt_field && fmt_field->is_number(),
                 "'{}' is not an fp8sim report (no `fp8sim_report` format field; `fp8sim report --out DIR` "
                 "writes DIR/report.json)",
                 p.string());
  FP8SIM_REQUIRE(fmt_field->as_number() == kReportFormat,
                 "'{}' is an fp8sim report of format {}; this fp8sim reads format {}", p.string(),
                 fmt_num(fmt_field->as_number()), kReportFormat);
  for (const char* key : {"meta", "data", "sections"}) {
    const Json* v = doc.find(key);
    FP8SIM_REQUIRE(v && (v->is_object() || v->is_array()), "'{}' is an incomplete fp8sim report: no '{}'", p.string(),
                   key);
  }
  const Json* recipes = at_pointer(doc, "/meta/recipes");
  FP8SIM_REQUIRE(recipes && recipes->is_array(), "'{}' is an incomplete fp8sim report: no 'meta.recipes'", p.string());
  return {p, std::move(doc)};
}

// The text of a value (n/a when absent; an array's elements joined).
std::string text_of(const Json* j) {
  if (!j) return std::string("n/a");
  if (j->is_array()) {
    std::vector<std::string> v;
    for (const auto& x : j->as_array()) v.push_back(num_text(&x));
    return join(v);
  }
  return num_text(j);
}

Json arr(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const auto& x : v) a.push_back(x);
  return a;
}

// One comparison, built section by section (build() runs the steps in order).
class Comparison {
 public:
  Comparison(const LoadedReport& la, const LoadedReport& lb, const CompareOptions& o)
      : la(la), lb(lb), o(o), A(la.doc), B(lb.doc), t(o.threshold) {
    pa = display_path(la.path);
    pb = display_path(lb.path);
    const auto ra = recipes_of(A), rb = recipes_of(B);
    for (const auto& r : ra) (std::find(rb.begin(), rb.end(), r) != rb.end() ? both : only_a).push_back(r);
    for (const auto& r : rb)
      if (std::find(ra.begin(), ra.end(), r) == ra.end()) only_b.push_back(r);

    cmp["threshold"] = t;
    change_note = fmt::format(
        "B vs A: the ratio B/A; for an SNR, B - A in dB. Marked (bold, coloured in HTML): a ratio beyond "
        "{:.3g}x either way or an SNR change over {:.2f} dB (--threshold {:.3g}%), as better or worse in B by the "
        "quantity's direction; `only in A/B`: one report lacks the number.",
        1.0 + t, 20.0 * std::log10(1.0 + t), t * 100.0);
  }

  Json build() {
    what_was_compared();
    like_for_like_notes();
    verdict_section();
    quantization_section();
    memory_section();
    speed_section();
    return document();
  }

 private:
  void what_was_compared() {
    struct Field {
      const char* key;
      const char* label;
      std::string pointer;
    };
    const std::vector<Field> fields = {
        {"title", "title", "/title"},
        {"generated_by", "generated", "/intro/0"},
        {"fp8sim_version", "fp8sim version", "/meta/fp8sim_version"},
        {"trace", "trace (accuracy)", "/meta/trace"},
        {"trace_model", "trace's model", "/data/verdict/models/accuracy"},
        {"model", "model (memory, speed)", "/meta/model"},
        {"recipes", "recipes", "/meta/recipes"},
        {"gpus", "GPUs (data parallel)", "/meta/gpus"},
        {"batch", "micro-batch per GPU", "/meta/batch"},
        {"seq", "sequence length", "/meta/seq"},
        {"host", "host", "/meta/host"},
        {"speed_mode", "speed", "/data/speed/timing/mode"},
        {"speed_device", "speed device", "/data/speed/timing/device"},
        {"recommendation", "recommendation", "/data/verdict/recommendation"},
    };
    Json inputs;
    std::vector<Row> in_rows;
    Json in_marks = Json::array();
    in_rows.push_back({"report", "`" + pa + "`", "`" + pb + "`"});
    inputs["a"]["path"] = pa;
    inputs["b"]["path"] = pb;
    for (const auto& f : fields) {
      const Json* va = at_pointer(A, f.pointer);
      const Json* vb = at_pointer(B, f.pointer);
      inputs["a"][f.key] = va ? *va : Json();
      inputs["b"][f.key] = vb ? *vb : Json();
      const std::string ta = text_of(va), tb = text_of(vb);
      const int r = static_cast<int>(in_rows.size());
      if (ta != tb && std::string_view(f.key) != "generated_by")
        for (int col : {1, 2}) in_marks.push_back(Json(Json::Array{Json(r), Json(col), Json("diff changed")}));
      in_rows.push_back({f.label, ta, tb});
    }
    cmp["inputs"] = inputs;

    Json rj;
    rj["both"] = arr(both);
    rj["only_a"] = arr(only_a);
    rj["only_b"] = arr(only_b);
    cmp["recipes"] = rj;

    {
      Sec s("inputs", "What was compared");
      s.table("The two reports", {"", "A", "B"}, in_rows, in_marks,
              "Cells marked differ between A and B (the generation line is expected to).");
      sections.push_back(std::move(s.j));
    }
  }

  void like_for_like_notes() {
    auto same = [&](const char* p) {
      const Json* x = at_pointer(A, p);
      const Json* y = at_pointer(B, p);
      return text_of(x) == text_of(y);
    };
    std::error_code ec;
    if (fs::equivalent(la.path, lb.path, ec))
      notes.push_back("A and B are the same file: every difference below is zero.");
    if (!same("/meta/trace") || !same("/data/verdict/models/accuracy"))
      notes.push_back(fmt::format(
          "**Different traces.** A's accuracy figures come from `{}` ({}), B's from `{}` ({}): the quantization "
          "errors compare different tensors, not only different recipes.",
          text_of(at_pointer(A, "/meta/trace")), text_of(at_pointer(A, "/data/verdict/models/accuracy")),
          text_of(at_pointer(B, "/meta/trace")), text_of(at_pointer(B, "/data/verdict/models/accuracy"))));
    if (!same("/meta/model"))
      notes.push_back(fmt::format("**Different models.** Memory and speed are for `{}` in A and `{}` in B.",
                                  text_of(at_pointer(A, "/meta/model")), text_of(at_pointer(B, "/meta/model"))));
    if (!same("/meta/gpus") || !same("/meta/batch") || !same("/meta/seq"))
      notes.push_back(fmt::format(
          "**Different run sizes.** A: {} GPUs, micro-batch {} x sequence {}; B: {} GPUs, micro-batch {} x sequence "
          "{}. Memory and step time at the given micro-batch differ for that reason alone.",
          text_of(at_pointer(A, "/meta/gpus")), text_of(at_pointer(A, "/meta/batch")),
          text_of(at_pointer(A, "/meta/seq")), text_of(at_pointer(B, "/meta/gpus")),
          text_of(at_pointer(B, "/meta/batch")), text_of(at_pointer(B, "/meta/seq"))));
    if (!same("/data/speed/timing/mode") || !same("/data/speed/timing/device") ||
        !same("/data/speed/timing/calibration"))
      notes.push_back(fmt::format(
          "**Different speed sources.** A's step times are {} ({}), B's {} ({}).",
          text_of(at_pointer(A, "/data/speed/timing/mode")), text_of(at_pointer(A, "/data/speed/timing/device")),
          text_of(at_pointer(B, "/data/speed/timing/mode")), text_of(at_pointer(B, "/data/speed/timing/device"))));
    if (!same("/meta/fp8sim_version"))
      notes.push_back(fmt::format("**Different fp8sim versions:** A by {}, B by {}.",
                                  text_of(at_pointer(A, "/meta/fp8sim_version")),
                                  text_of(at_pointer(B, "/meta/fp8sim_version"))));
    if (both.empty()) notes.push_back("**No recipe is in both reports**: only the inputs are compared.");
  }

  // A metric section's table (or its empty text) and its rows and counts in the JSON.
  void finish(Sec& s, const char* key, TableOut& tab, const std::string& caption, const std::string& empty_text,
              const std::string& note) {
    if (tab.rows.empty()) s.para(empty_text);
    else s.table(caption, kMetricHeader, tab.rows, tab.marks, note);
    total_marked += tab.marked;
    total_better += tab.better;
    total_worse += tab.worse;
    total_changed += tab.changed;
    Json sj;
    sj["rows"] = std::move(tab.entries);
    sj["differences"] = tab.marked;
    sec_json[key] = std::move(sj);
  }

  void verdict_section() {
    Sec s("verdict", "Verdict side by side");
    struct VKey {
      const char* key;
      const char* label;
      bool db;
      Better better;
    };
    const VKey vkeys[] = {
        {"activation_snr_db", "activation SNR dB", true, Better::Higher},
        {"gemm_rel_err_mean", "GEMM output rel. error", false, Better::Lower},
        {"param_drift", "optimizer param drift", false, Better::Lower},
        {"peak_gib", "peak GiB/GPU at --batch", false, Better::Lower},
        {"memory_saving_vs_bf16", "memory saving vs bf16", false, Better::Higher},
        {"max_batch", "max micro-batch", false, Better::Higher},
        {"tokens_per_s_at_max_batch", "tokens/s/GPU at max micro-batch", false, Better::Higher},
        {"speedup_at_max_batch", "speedup vs bf16", false, Better::Higher},
    };
    TableOut tab;
    std::vector<Row> dec_rows;
    Json dec_marks = Json::array();
    Json decisions = Json::object();
    for (const auto& r : both) {
      for (const auto& k : vkeys) {
        const std::string p = ptr({"data", "verdict", "recipes", r, k.key, "value"});
        add_metric(tab, {r, k.key, k.label, k.db, k.better, p, p}, A, B, t);
      }
      const std::string p = ptr({"data", "verdict", "recipes", r, "verdict", "decision"});
      const std::string da = str_or(at_pointer(A, p)), db = str_or(at_pointer(B, p));
      Json dj;
      dj["a"] = da;
      dj["b"] = db;
      dj["changed"] = da != db;
      decisions[r] = std::move(dj);
      if (da != db) {
        for (int col : {1, 2, 3})
          dec_marks.push_back(
              Json(Json::Array{Json(static_cast<int>(dec_rows.size())), Json(col), Json("diff changed")}));
        ++tab.marked;
        ++tab.changed;
      }
      dec_rows.push_back({r, da, db, da != db ? "**changed**" : "same"});
    }
    s.para(
        "Per recipe in both reports, the verdict's figures (each report's `data.verdict`, taken by the verdict "
        "from the report's own sections) and its decision. Memory at each report's --batch; throughput and "
        "speedup at each recipe's own largest micro-batch.");
    const std::string ra_text =
        fmt::format("**A's recommendation:** {}; **B's:** {}.", text_of(at_pointer(A, "/data/verdict/recommendation")),
                    text_of(at_pointer(B, "/data/verdict/recommendation")));
    s.para(ra_text);
    if (!dec_rows.empty()) s.table("Decisions", {"recipe", "A", "B", "B vs A"}, dec_rows, dec_marks);
    finish(s, "verdict", tab, "Verdict figures", "No recipe is in both reports.", change_note);
    sec_json["verdict"]["decisions"] = std::move(decisions);
    if (!only_a.empty() || !only_b.empty()) {
      std::vector<Row> rows;
      Json only = Json::object();
      auto add_only = [&](const std::vector<std::string>& names, const Json& doc, const char* side) {
        for (const auto& r : names) {
          Row row{r, side};
          Json oj;
          for (const auto& k : vkeys) {
            const Json* v = at_pointer(doc, ptr({"data", "verdict", "recipes", r, k.key, "value"}));
            row.push_back(num_text(v));
            oj[k.key] = v && v->is_number() ? *v : Json();
          }
          const std::string d = str_or(at_pointer(doc, ptr({"data", "verdict", "recipes", r, "verdict", "decision"})));
          row.push_back(d);
          oj["decision"] = d;
          oj["in"] = side;
          only[r] = std::move(oj);
          rows.push_back(std::move(row));
        }
      };
      add_only(only_a, A, "A only");
      add_only(only_b, B, "B only");
      Row header{"recipe", "in"};
      for (const auto& k : vkeys) header.push_back(k.label);
      header.push_back("verdict");
      s.para(fmt::format("Recipes in one report only: {}.", join([&] {
                           std::vector<std::string> v;
                           for (const auto& r : only_a) v.push_back("`" + r + "` (A)");
                           for (const auto& r : only_b) v.push_back("`" + r + "` (B)");
                           return v;
                         }())));
      s.table("Recipes in one report only", header, rows, Json::array());
      sec_json["verdict"]["only"] = std::move(only);
    }
    sections.push_back(std::move(s.j));
  }

  void quantization_section() {
    Sec s("quantization", "Quantization error per recipe");
    TableOut tab;
    for (const auto& r : both) {
      const std::string base = ptr({"data", "analyze", r, "aggregates", "by_role"});
      auto roles = [&](const Json& doc) {
        std::vector<std::pair<std::string, size_t>> v;
        if (const Json* l = at_pointer(doc, base); l && l->is_array())
          for (size_t i = 0; i < l->as_array().size(); ++i)
            if (const Json* k = l->as_array()[i].find("key"); k && k->is_string()) v.emplace_back(k->as_string(), i);
        return v;
      };
      const auto roles_a = roles(A), roles_b = roles(B);
      std::vector<std::string> keys;
      for (const auto& [k, i] : roles_a) keys.push_back(k);
      for (const auto& [k, i] : roles_b)
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      auto where = [&](const auto& v, const std::string& k) {
        for (const auto& [name, i] : v)
          if (name == k) return base + "/" + std::to_string(i) + "/snr_db";
        return std::string();
      };
      for (const auto& k : keys)
        add_metric(tab, {r, "snr_db:" + k, k + " SNR dB", true, Better::Higher, where(roles_a, k), where(roles_b, k)},
                   A, B, t);
      const std::string g = ptr({"data", "verdict", "recipes", r, "gemm_rel_err_mean", "value"});
      add_metric(tab, {r, "gemm_rel_err_mean", "forward GEMM output rel. error (mean)", false, Better::Lower, g, g}, A,
                 B, t);
    }
    s.para(
        "Signal-to-noise ratio of each tensor role after the recipe's quantizers (the analyze section's "
        "aggregates over the trace's tensors; higher is better; an SNR of n/a is an exact or kept set) and the "
        "mean forward-GEMM output error.");
    finish(s, "quantization", tab, "Quantization error", "Neither report has quantization figures for a common recipe.",
           change_note);
    sections.push_back(std::move(s.j));
  }

  void memory_section() {
    Sec s("memory", "Memory per GPU per recipe");
    TableOut tab;
    struct MKey {
      const char* key;
      const char* label;
      Better better;
    };
    const MKey mkeys[] = {
        {"peak_gib", "peak GiB", Better::Lower},
        {"weights_gib", "weights GiB", Better::Lower},
        {"gradients_gib", "gradients GiB", Better::Lower},
        {"optimizer_gib", "optimizer GiB", Better::Lower},
        {"activations_gib", "activations GiB", Better::Lower},
        {"temporaries_gib", "temporaries GiB", Better::Lower},
        {"max_batch", "max micro-batch", Better::Higher},
    };
    for (const auto& r : both)
      for (const auto& k : mkeys) {
        const std::string p = ptr({"data", "memory", r, k.key});
        add_metric(tab, {r, k.key, k.label, false, k.better, p, p}, A, B, t);
      }
    s.para("Memory per GPU from the footprint model at each report's model, GPU count and --batch.");
    finish(s, "memory", tab, "Memory per GPU", "Neither report has memory figures for a common recipe.", change_note);
    sections.push_back(std::move(s.j));
  }

  void speed_section() {
    Sec s("speed", "Step time per recipe");
    TableOut tab;
    struct SKey {
      const char* key;
      const char* label;
      Better better;
    };
    const SKey at_batch[] = {
        {"step_ms", "step ms at --batch", Better::Lower},
        {"comm_unoverlapped_ms", "unoverlapped communication ms", Better::Lower},
        {"optimizer_ms", "optimizer ms", Better::Lower},
        {"tokens_per_s_per_gpu", "tokens/s/GPU at --batch", Better::Higher},
    };
    const SKey at_max[] = {
        {"batch", "max micro-batch (speed)", Better::Neither},
        {"step_ms", "step ms at max micro-batch", Better::Lower},
        {"tokens_per_s_per_gpu", "tokens/s/GPU at max micro-batch", Better::Higher},
    };
    for (const auto& r : both) {
      const std::string ea = list_entry(A, "/data/speed/recipes", r), eb = list_entry(B, "/data/speed/recipes", r);
      for (const auto& k : at_batch)
        add_metric(tab,
                   {r, k.key, k.label, false, k.better, ea.empty() ? "" : ea + "/" + k.key,
                    eb.empty() ? "" : eb + "/" + k.key},
                   A, B, t);
      // The per-kind breakdown (GEMM, attention, quantize, ...), kinds of either side.
      std::vector<std::string> kinds;
      for (const auto& [doc, e] : {std::pair<const Json*, std::string>{&A, ea}, {&B, eb}})
        if (const Json* bd = e.empty() ? nullptr : at_pointer(*doc, e + "/breakdown_ms"); bd && bd->is_object())
          for (const auto& [k, v] : bd->as_object())
            if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
      for (const auto& k : kinds)
        add_metric(
            tab,
            {r, "breakdown_ms:" + k, "step: " + k + " ms", false, Better::Lower,
             ea.empty() ? "" : ea + "/breakdown_ms/" + token(k), eb.empty() ? "" : eb + "/breakdown_ms/" + token(k)},
            A, B, t);
      const std::string ma = list_entry(A, "/data/speed_at_max_batch/recipes", r),
                        mb = list_entry(B, "/data/speed_at_max_batch/recipes", r);
      for (const auto& k : at_max)
        add_metric(tab,
                   {r, std::string("max_batch:") + k.key, k.label, false, k.better, ma.empty() ? "" : ma + "/" + k.key,
                    mb.empty() ? "" : mb + "/" + k.key},
                   A, B, t);
    }
    s.para(
        "Step time per recipe from each report's speed section (measured on a GPU or modelled from a calibration: "
        "see the inputs above), at --batch with its breakdown by kind, and at each recipe's own largest "
        "micro-batch.");
    finish(s, "speed", tab, "Step time", "Neither report has speed figures for a common recipe.", change_note);
    sections.push_back(std::move(s.j));
  }

  Json document() {
    cmp["notes"] = arr(notes);
    cmp["sections"] = std::move(sec_json);
    Json summary;
    summary["differences"] = total_marked;
    summary["better_in_b"] = total_better;
    summary["worse_in_b"] = total_worse;
    summary["changed"] = total_changed;
    cmp["summary"] = summary;

    Json doc;
    doc["fp8sim_report_compare"] = kCompareFormat;
    doc["title"] = "fp8sim report comparison";
    Json meta;
    meta["generated"] = utc_now();
    meta["fp8sim_version"] = o.version;
    meta["command"] = o.command_line;
    doc["meta"] = std::move(meta);
    Json intro = Json::array();
    intro.push_back(fmt::format("Generated {} by `{}` (fp8sim {}).", doc["meta"]["generated"].as_string(),
                                o.command_line.empty() ? std::string("fp8sim report --compare") : o.command_line,
                                o.version));
    intro.push_back(fmt::format("**A:** `{}` ({}). **B:** `{}` ({}).", pa, text_of(at_pointer(A, "/intro/0")), pb,
                                text_of(at_pointer(B, "/intro/0"))));
    for (const auto& n : notes) intro.push_back(n);
    intro.push_back(fmt::format(
        "**{} difference{} beyond {:.3g}%:** {} better in B, {} worse in B, {} changed (no direction, or a number "
        "only one report has). Recipes in both: {}{}{}.",
        total_marked, total_marked == 1 ? "" : "s", t * 100.0, total_better, total_worse, total_changed,
        both.empty() ? std::string("none") : join(both),
        only_a.empty() ? std::string() : "; only in A: " + join(only_a),
        only_b.empty() ? std::string() : "; only in B: " + join(only_b)));
    doc["intro"] = std::move(intro);
    doc["sections"] = std::move(sections);
    Json outro = Json::array();
    outro.push_back(
        "Machine-readable: `compare.json` (`compare.sections.<section>.rows`: each number of A and B with the "
        "JSON pointer into the report it was read from, its ratio or difference and its mark).");
    doc["outro"] = std::move(outro);
    doc["compare"] = std::move(cmp);
    return doc;
  }

  const LoadedReport& la;
  const LoadedReport& lb;
  const CompareOptions& o;
  const Json& A;
  const Json& B;
  const double t;
  std::string pa, pb;
  std::vector<std::string> both, only_a, only_b;
  Json cmp;
  std::vector<std::string> notes;
  Json sections = Json::array();
  Json sec_json = Json::object();
  int total_marked = 0, total_better = 0, total_worse = 0, total_changed = 0;
  std::string change_note;
};

Json build_comparison(const LoadedReport& la, const LoadedReport& lb, const CompareOptions& o) {
  return Comparison(la, lb, o).build();
}

CompareResult run_compare(const CompareOptions& o) {
  if (o.inputs.size() != 2)
    throw UsageError(fmt::format("--compare takes two reports (A and B), got {}", o.inputs.size()));
  if (!(o.threshold > 0) || !std::isfinite(o.threshold))
    throw UsageError(fmt::format("--threshold must be a positive percentage, got {}", o.threshold * 100.0));
  if (o.out_dir.empty()) throw UsageError("--out is empty");
  if (o.out_dir == "-") throw UsageError("--out '-': a comparison is three files; give a folder");
  const LoadedReport a = load_report(o.inputs[0]);
  const LoadedReport b = load_report(o.inputs[1]);
  RunFiles files;
  files.input("--compare", a.path.string());
  files.input("--compare", b.path.string());
  const std::vector<std::string> names = {"compare.json", "compare.md", "compare.html"};
  std::vector<int> ids;
  for (const auto& n : names) ids.push_back(files.output("--out", (o.out_dir / n).string()));
  Json doc = build_comparison(a, b, o);
  files.write(ids[1], render_markdown(doc));
  files.write(ids[2], render_html(doc, [](const std::string&) { return std::string(); }));
  files.write(ids[0], doc.dump(2));
  files.commit();
  CompareResult res;
  res.dir = o.out_dir;
  res.files = names;
  res.differences = static_cast<int>(doc.at("compare").at("summary").at("differences").as_int());
  for (const auto& n : doc.at("compare").at("notes").as_array()) res.notes.push_back(n.as_string());
  return res;
}

}  // namespace fp8sim::report
