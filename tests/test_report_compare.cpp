// fp8sim report --compare A B: two real reports made by the binary on the sample trace (different
// recipes and micro-batch), compared; every number in compare.json must be the inputs' own number
// at the place it names, the ratios B/A and dB differences must be right, the marks must follow the
// threshold, and bad input must end in one line, the right status and no output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// RFC 6901, as compare.json's *_source fields are written.
const Json* at_pointer(const Json& doc, const std::string& ptr) {
  const Json* cur = &doc;
  size_t i = 1;
  while (cur && i <= ptr.size()) {
    const size_t end = std::min(ptr.find('/', i), ptr.size());
    std::string tok;
    for (size_t k = i; k < end; ++k) {
      if (ptr[k] == '~' && k + 1 < end) tok += ptr[++k] == '1' ? '/' : '~';
      else tok += ptr[k];
    }
    if (cur->is_object()) cur = cur->find(tok);
    else if (cur->is_array())
      cur = std::stoul(tok) < cur->as_array().size() ? &cur->as_array()[std::stoul(tok)] : nullptr;
    else cur = nullptr;
    i = end + 1;
  }
  return cur;
}

Json read_json(const fs::path& p) { return Json::parse(read_text_file(p)); }

void write_text_file(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A speed document's entry for `recipe` in its `recipes` list.
const Json& speed_entry(const Json& report, const char* section, const std::string& recipe) {
  for (const auto& r : report.at("data").at(section).at("recipes").as_array())
    if (r.at("recipe").as_string() == recipe) return r;
  ADD_FAILURE() << "no " << section << " entry for " << recipe;
  static const Json none;
  return none;
}

const Json* row_of(const Json& cmp, const char* section, const std::string& recipe, const std::string& key) {
  for (const auto& r : cmp.at("compare").at("sections").at(section).at("rows").as_array())
    if (r.at("recipe").as_string() == recipe && r.at("key").as_string() == key) return &r;
  return nullptr;
}

void make_report(const fs::path& out, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"report", test::sample_trace(), "--no-plots", "-q", "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = test::run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out / "report.json"));
}

TEST(ReportCompare, NumbersAreTheInputsAndRatiosAreRight) {
  const fs::path dir = test::temp_dir();
  make_report(dir / "A", {"--recipes", "bf16,te,coat"});
  make_report(dir / "B", {"--recipes", "bf16,coat,fp8lm", "--batch", "4"});
  const Json A = read_json(dir / "A/report.json"), B = read_json(dir / "B/report.json");

  // A as a folder, B as its report.json: both forms are accepted.
  const auto r = test::run(
      {"report", "--compare", (dir / "A").string(), (dir / "B/report.json").string(), "--out", (dir / "C").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::listing((dir / "C").string()),
            (std::vector<std::string>{"compare.html", "compare.json", "compare.md"}));
  const Json C = read_json(dir / "C/compare.json");
  ASSERT_EQ(C.at("fp8sim_report_compare").as_int(), 1);
  const Json& cmp = C.at("compare");
  const double t = cmp.at("threshold").as_number();
  EXPECT_EQ(t, 0.05);

  // Recipes in both and in one only.
  auto names = [](const Json& a) {
    std::vector<std::string> v;
    for (const auto& x : a.as_array()) v.push_back(x.as_string());
    return v;
  };
  EXPECT_EQ(names(cmp.at("recipes").at("both")), (std::vector<std::string>{"bf16", "coat"}));
  EXPECT_EQ(names(cmp.at("recipes").at("only_a")), (std::vector<std::string>{"te"}));
  EXPECT_EQ(names(cmp.at("recipes").at("only_b")), (std::vector<std::string>{"fp8lm"}));

  // Every row: A's and B's numbers are the inputs' numbers at the pointers given, and the change
  // and its mark follow from them.
  int rows = 0, marked = 0;
  for (const char* sec : {"verdict", "quantization", "memory", "speed"}) {
    const auto& list = cmp.at("sections").at(sec).at("rows").as_array();
    EXPECT_GT(list.size(), 8u) << sec;
    int sec_marked = 0;
    for (const auto& row : list) {
      ++rows;
      const std::string what = std::string(sec) + " " + row.at("recipe").as_string() + " " + row.at("key").as_string();
      ASSERT_TRUE(row.at("a").is_number() && row.at("b").is_number()) << what;
      const Json* va = at_pointer(A, row.at("a_source").as_string());
      const Json* vb = at_pointer(B, row.at("b_source").as_string());
      ASSERT_TRUE(va && vb) << what;
      EXPECT_EQ(row.at("a").as_number(), va->as_number()) << what;
      EXPECT_EQ(row.at("b").as_number(), vb->as_number()) << what;
      const double a = va->as_number(), b = vb->as_number();
      bool far;
      if (row.at("change").as_string() == "difference_db") {
        EXPECT_EQ(row.at("difference").as_number(), b - a) << what;
        far = std::fabs(b - a) > 20 * std::log10(1 + t);
      } else {
        ASSERT_EQ(row.at("change").as_string(), "ratio") << what;
        if (a != 0) EXPECT_EQ(row.at("ratio").as_number(), b / a) << what;
        else EXPECT_EQ(b, 0.0) << what;  // no such row in these reports
        const double q = a != 0 ? b / a : 1.0;
        far = q > 1 + t || q < 1 / (1 + t);
      }
      EXPECT_EQ(!row.at("highlight").is_null(), far) << what;
      if (far && row.at("better").is_string() && a != b) {
        const bool lower = row.at("better").as_string() == "lower";
        EXPECT_EQ(row.at("highlight").as_string(), (lower == (b < a)) ? "better" : "worse") << what;
      }
      sec_marked += far;
    }
    EXPECT_EQ(cmp.at("sections").at(sec).at("differences").as_int(),
              sec_marked + (std::string(sec) == "verdict" ? 2 : 0))  // + the two changed decisions
        << sec;
    marked += sec_marked;
  }
  EXPECT_GT(rows, 60);
  EXPECT_EQ(cmp.at("summary").at("differences").as_int(), marked + 2);

  // Spot checks against the sections' own documents, not through the pointers.
  const Json* peak = row_of(C, "memory", "coat", "peak_gib");
  ASSERT_NE(peak, nullptr);
  const double pa = A.at("data").at("memory").at("coat").at("peak_gib").as_number();
  const double pb = B.at("data").at("memory").at("coat").at("peak_gib").as_number();
  EXPECT_EQ(peak->at("a").as_number(), pa);
  EXPECT_EQ(peak->at("b").as_number(), pb);
  EXPECT_GT(pb / pa, 1.2);  // twice the micro-batch: more activation memory
  EXPECT_EQ(peak->at("highlight").as_string(), "worse");
  const Json* vpeak = row_of(C, "verdict", "coat", "peak_gib");
  ASSERT_NE(vpeak, nullptr);
  EXPECT_EQ(vpeak->at("b").as_number(), pb);
  const Json* step = row_of(C, "speed", "bf16", "step_ms");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->at("a").as_number(), speed_entry(A, "speed", "bf16").at("step_ms").as_number());
  EXPECT_EQ(step->at("b").as_number(), speed_entry(B, "speed", "bf16").at("step_ms").as_number());
  // Same trace, same recipe: the quantization error is identical.
  const Json* snr = row_of(C, "quantization", "coat", "snr_db:activation");
  ASSERT_NE(snr, nullptr);
  EXPECT_EQ(snr->at("difference").as_number(), 0.0);
  EXPECT_TRUE(snr->at("highlight").is_null());
  // A recipe of one report only keeps its verdict figures.
  EXPECT_EQ(cmp.at("sections").at("verdict").at("only").at("te").at("peak_gib").as_number(),
            A.at("data").at("verdict").at("recipes").at("te").at("peak_gib").at("value").as_number());
  EXPECT_EQ(cmp.at("sections").at("verdict").at("only").at("fp8lm").at("in").as_string(), "B only");
  // What each report was.
  EXPECT_EQ(cmp.at("inputs").at("a").at("batch").as_int(), 2);
  EXPECT_EQ(cmp.at("inputs").at("b").at("batch").as_int(), 4);
  EXPECT_EQ(cmp.at("inputs").at("a").at("generated_by").as_string(), A.at("intro").as_array().at(0).as_string());
  bool size_note = false;
  for (const auto& n : cmp.at("notes").as_array()) size_note |= n.as_string().find("Different run sizes") == 2;
  EXPECT_TRUE(size_note);

  // The renderings mark the same differences: bold in Markdown, a class in HTML.
  const std::string md = read_text_file(dir / "C/compare.md"), html = read_text_file(dir / "C/compare.html");
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const int worse = static_cast<int>(cmp.at("summary").at("worse_in_b").as_int());
  EXPECT_GT(worse, 0);
  EXPECT_EQ(count(md, "(worse in B)**"), worse);
  EXPECT_EQ(count(html, "diff worse\""), 2 * worse);  // B's number and the change
  const size_t line = md.find("| coat | peak GiB | ");
  ASSERT_NE(line, std::string::npos);
  EXPECT_NE(md.substr(line, md.find('\n', line) - line).find("(worse in B)**"), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos);  // self-contained: nothing to fetch

  // A report compared with itself: nothing differs.
  {
    const auto s = test::run(
        {"report", "--compare", (dir / "A").string(), (dir / "A").string(), "--out", (dir / "same").string(), "-q"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const Json S = read_json(dir / "same/compare.json");
    EXPECT_EQ(S.at("compare").at("summary").at("differences").as_int(), 0);
    for (const auto& row : S.at("compare").at("sections").at("memory").at("rows").as_array())
      EXPECT_EQ(row.at("ratio").as_number(), 1.0);
  }

  // Another model and trace are a note at the top, not an error.
  {
    Json M = A;
    M["meta"]["model"] = "llama3-8b";
    M["meta"]["trace"] = "traces/other.h5";
    fs::create_directories(dir / "M");
    write_text_file(dir / "M/report.json", M.dump(2));
    const auto s = test::run(
        {"report", "--compare", (dir / "A").string(), (dir / "M").string(), "--out", (dir / "mismatch").string()});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const Json S = read_json(dir / "mismatch/compare.json");
    std::string notes;
    for (const auto& n : S.at("compare").at("notes").as_array()) notes += n.as_string() + "\n";
    EXPECT_NE(notes.find("**Different models.**"), std::string::npos) << notes;
    EXPECT_NE(notes.find("**Different traces.**"), std::string::npos) << notes;
    EXPECT_NE(s.out.find("note: Different models."), std::string::npos) << s.out;
    const std::string md2 = read_text_file(dir / "mismatch/compare.md");
    EXPECT_LT(md2.find("**Different models.**"), md2.find("## Contents"));
  }
}

// A report document that passes the format check, for the bad-input cases (which never get as
// far as its content).
fs::path minimal_report(const fs::path& dir) {
  fs::create_directories(dir);
  write_text_file(dir / "report.json",
                  R"({"fp8sim_report": 1, "title": "t", "intro": [], "meta": {"recipes": ["bf16"]}, "data": {},)"
                  R"( "sections": [], "outro": []})");
  return dir / "report.json";
}

TEST(ReportCompare, BadInputIsOneLineAndWritesNothing) {
  const fs::path dir = test::temp_dir();
  const std::string a = minimal_report(dir / "A").string();
  const std::string out = (dir / "out").string();
  write_text_file(dir / "notreport.json", R"({"title": "a JSON file, not a report"})");
  write_text_file(dir / "garbage.json", "not json at all");
  write_text_file(dir / "v2.json", R"({"fp8sim_report": 2, "meta": {}, "data": {}, "sections": []})");
  fs::create_directories(dir / "empty");
  write_text_file(dir / "file", "x");
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--compare", a}, 2, "--compare takes two reports (A and B), got 1"},
      {{"--compare", a, a, a}, 2, "got 3"},
      {{"--compare", a, (dir / "missing.json").string()}, 1, "no such file"},
      {{"--compare", a, (dir / "notreport.json").string()}, 1, "is not an fp8sim report (no `fp8sim_report`"},
      {{"--compare", (dir / "garbage.json").string(), a}, 1, "is not an fp8sim report: json:"},
      {{"--compare", a, (dir / "v2.json").string()}, 1, "of format 2"},
      {{"--compare", a, (dir / "empty").string()}, 1, "is a folder without report.json"},
      {{"--compare", a, a, "--recipes", "coat"}, 2, "--recipes cannot be combined with --compare"},
      {{"--compare", a, a, "--model", "llama2-7b"}, 2, "--model cannot be combined"},
      {{"--compare", a, a, "--batch", "4"}, 2, "--batch cannot be combined"},
      {{"--compare", a, a, "--no-plots"}, 2, "--no-plots cannot be combined"},
      {{"--compare", a, a, "--keep-going"}, 2, "--keep-going cannot be combined"},
      {{test::sample_trace(), "--compare", a, a}, 2, "TRACE cannot be combined"},
      {{"--threshold", "3"}, 2, "--threshold applies only with --compare"},
      {{"--compare", a, a, "--threshold", "0"}, 2, "--threshold must be a positive percentage"},
      {{"--compare", a, a, "--threshold", "-5"}, 2, "--threshold must be a positive percentage"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"report"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.push_back("--out");
    args.push_back(out);
    std::string what;
    for (const auto& x : args) what += x + " ";
    const auto r = test::run(args);
    EXPECT_EQ(r.exit_code, c.code) << what << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << what << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << what << ": wanted '" << c.needle << "' in\n" << r.err;
    EXPECT_FALSE(fs::exists(out)) << what << ": left output";
  }
  // --out: standard output, under a file, and over an input.
  {
    const auto r = test::run({"report", "--compare", a, a, "--out", "-"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
  {
    const auto r = test::run({"report", "--compare", a, a, "--out", (dir / "file/sub").string()});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("is not a folder"), std::string::npos) << r.err;
  }
  {
    // An input named compare.json in the --out folder would be overwritten: refused, nothing written.
    fs::create_directories(dir / "D");
    fs::copy_file(a, dir / "D/compare.json");
    const auto r =
        test::run({"report", "--compare", (dir / "D/compare.json").string(), a, "--out", (dir / "D").string()});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(test::listing((dir / "D").string()), std::vector<std::string>{"compare.json"});
    EXPECT_EQ(read_text_file(dir / "D/compare.json"), read_text_file(a));
  }
  // The minimal report compares (every section says it has no figures): the format check is what
  // refused the cases above, not the content.
  {
    const auto r = test::run({"report", "--compare", a, a, "--out", out});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::exists(out + "/compare.html"));
  }
}

}  // namespace
}  // namespace fp8sim
