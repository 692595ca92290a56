// Nothing the project ships may point at a document it does not contain, name a tracker issue by
// number, or narrate runs by the clock. This test reads the repository's files (git's list of
// tracked and untracked-but-not-ignored files, or a walk of the source tree without git) and fails
// on any of:
//   the background documents, the shared-notes folder and the development machine's checkout root
//   (forbidden_names(); assembled from parts so that this file does not name them itself)
//   "issue 12", "issue #12", "issues 3", "(#6)"              tracker numbers
//   "the run of 21:40", "run at 01:16", "the 01:16 run"      run narratives (allowed in docs/dev-notes/)
//
// Scope: every folder of the project (kCheckedNow), generated documents and reports included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/test_util.hpp"

namespace {

namespace fs = std::filesystem;

// A path is in a list when it equals an entry or lies under an entry that ends in '/'.
const std::vector<std::string> kCheckedNow = {
    "README.md",
    "ARCHITECTURE.md",
    "docs/",
    "reports/",
    "sim/",
    "gpu/",
    "tests/",
    "scripts/",
    "traces/",
    "models/",
    "recipes/",  // the training recipes (recipes/*.json)
    ".ci/",
    "CMakeLists.txt",
    "CMakePresets.json",
};
// Run narratives are history, and docs/dev-notes/ is where history lives.
const std::vector<std::string> kRunTimesAllowed = {"docs/dev-notes/"};
// This file and its notes spell the patterns out.
const std::vector<std::string> kSelf = {"tests/test_docs_references.cpp"};

bool in_list(const std::string& path, const std::vector<std::string>& list) {
  for (const auto& e : list) {
    if (path == e) return true;
    if (!e.empty() && e.back() == '/' && path.rfind(e, 0) == 0) return true;
  }
  return false;
}

bool has_binary_extension(const std::string& path) {
  static const char* kExt[] = {".png", ".jpg", ".h5", ".gz", ".bin", ".npy", ".pdf", ".whl", ".so"};
  for (const char* e : kExt) {
    const std::string_view ext(e);
    if (path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) return true;
  }
  return false;
}

// Repository files, relative to the source directory, sorted.
std::vector<std::string> repository_files() {
  const std::string src = FP8SIM_SOURCE_DIR;
  std::vector<std::string> files;
  const auto r =
      fp8sim::test::run_shell("cd '" + src + "' && git ls-files --cached --others --exclude-standard 2>/dev/null");
  if (r.exit_code == 0 && !r.out.empty()) {
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && fs::is_regular_file(fs::path(src) / line)) files.push_back(line);
  } else {  // no git: walk the tree, leaving out build outputs and tool folders
    for (auto it = fs::recursive_directory_iterator(src); it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (it->is_directory() && (name.rfind(".", 0) == 0 || name.rfind("build", 0) == 0 || name == "out" ||
                                 name == "report" || name == "__pycache__")) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) files.push_back(fs::relative(it->path(), src).generic_string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const std::string& rel) {
  std::ifstream in(fs::path(FP8SIM_SOURCE_DIR) / rel, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "issue 12", "issue #12", "issues 3", "Issue 6's" (case-insensitive, word start; not a decimal
// such as "issues 0.34 warps"); "(#6)".
bool has_issue_number(std::string_view line) {
  const std::string l = lower(line);
  for (size_t p = l.find("issue"); p != std::string::npos; p = l.find("issue", p + 1)) {
    if (p > 0 && is_word(l[p - 1])) continue;
    size_t q = p + 5;
    if (q < l.size() && l[q] == 's') ++q;
    if (q < l.size() && l[q] == ' ') ++q;
    if (q < l.size() && l[q] == '#') ++q;
    if (q >= l.size() || !is_digit(l[q])) continue;
    while (q < l.size() && is_digit(l[q])) ++q;
    const bool decimal = q + 1 < l.size() && l[q] == '.' && is_digit(l[q + 1]);  // "issues 0.34 warps"
    if (!decimal) return true;
  }
  for (size_t p = l.find("(#"); p != std::string::npos; p = l.find("(#", p + 1)) {
    size_t q = p + 2;
    while (q < l.size() && is_digit(l[q])) ++q;
    if (q > p + 2 && q < l.size() && l[q] == ')') return true;
  }
  return false;
}

// A clock time (H:MM or HH:MM, not part of HH:MM:SS) narrated as a run: "run of 21:40",
// "Device run 2 (14:06)", "session of 22:49", "the 01:16 run": the words run(s) or session(s)
// within the 24 characters before the time, or right after it.
bool has_run_time(std::string_view line) {
  const std::string l = lower(line);
  for (size_t p = 1; p + 2 < l.size(); ++p) {
    if (l[p] != ':' || !is_digit(l[p - 1]) || !is_digit(l[p + 1]) || !is_digit(l[p + 2])) continue;
    if (p + 3 < l.size() && (is_digit(l[p + 3]) || l[p + 3] == ':')) continue;
    size_t start = p - 1;
    if (start > 0 && is_digit(l[start - 1])) --start;
    if (start > 0 && (is_digit(l[start - 1]) || l[start - 1] == ':')) continue;
    const size_t from = start >= 24 ? start - 24 : 0;
    const std::string before = l.substr(from, start - from);
    for (const char* w : {"run", "runs", "session", "sessions"}) {
      const std::string_view word(w);
      for (size_t q = before.find(word); q != std::string::npos; q = before.find(word, q + 1)) {
        const bool starts = q == 0 || !is_word(before[q - 1]);
        const bool ends = q + word.size() >= before.size() || !is_word(before[q + word.size()]);
        if (starts && ends) return true;
      }
    }
    const std::string after = l.substr(p + 3, 12);
    if (after.rfind(" run", 0) == 0 || after.rfind(" utc run", 0) == 0 || after.rfind(" session", 0) == 0) return true;
  }
  return false;
}

// The development machine's checkout root, and every name a shipped file must not contain.
const std::string kWorkRoot = std::string("/") + "work/";
const std::vector<std::string>& forbidden_names() {
  static const std::vector<std::string> names = {std::string("REFER") + "ENCE.md", std::string("DES") + "IGN.md",
                                                 std::string("sha") + "red/", std::string("../sha") + "red", kWorkRoot};
  return names;
}

// Whether `line` names `f`; the checkout root counts only where a path starts with it (not inside
// a longer path such as an output folder on another machine).
bool names(std::string_view line, std::string_view f) {
  if (f != kWorkRoot) return line.find(f) != std::string_view::npos;
  for (size_t p = line.find(f); p != std::string_view::npos; p = line.find(f, p + 1)) {
    const char c = p == 0 ? ' ' : line[p - 1];
    if (!(is_word(c) || c == '.' || c == '/' || c == '-' || c == '~')) return true;
  }
  return false;
}

struct Hit {
  std::string where;  // path:line
  std::string what;
};

std::vector<Hit> scan(const std::string& rel, bool check_run_times) {
  std::vector<Hit> hits;
  const std::string text = read_text(rel);
  if (text.find('\0') != std::string::npos) return hits;  // binary
  size_t line_no = 0, pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    ++line_no;
    auto add = [&](const std::string& what) {
      std::string excerpt(line.substr(0, 160));
      hits.push_back({rel + ":" + std::to_string(line_no), what + ": " + excerpt});
    };
    for (const auto& f : forbidden_names())
      if (names(line, f)) add("names '" + f + "'");
    if (has_issue_number(line)) add("names an issue number");
    if (check_run_times && has_run_time(line)) add("narrates a run by its time");
    if (end == text.size()) break;
    pos = end + 1;
  }
  return hits;
}

// Every hit in the files selected by `pick`.
template <class Pick>
std::vector<Hit> scan_repository(Pick pick) {
  std::vector<Hit> all;
  for (const auto& f : repository_files()) {
    if (in_list(f, kSelf) || has_binary_extension(f) || !pick(f)) continue;
    const auto hits = scan(f, !in_list(f, kRunTimesAllowed));
    all.insert(all.end(), hits.begin(), hits.end());
  }
  return all;
}

std::string describe(const std::vector<Hit>& hits) {
  std::string s;
  for (const auto& h : hits) s += "  " + h.where + ": " + h.what + "\n";
  return s;
}

TEST(DocsReferences, TheMatchersFindWhatTheyShould) {
  EXPECT_TRUE(has_issue_number("the targets of issue 6"));
  EXPECT_TRUE(has_issue_number("Issue 6's targets"));
  EXPECT_TRUE(has_issue_number("see issue #12"));
  EXPECT_TRUE(has_issue_number("fixed (#6) here"));
  EXPECT_FALSE(has_issue_number("the issue's tolerances"));
  EXPECT_FALSE(has_issue_number("issue slots per cycle"));
  EXPECT_FALSE(has_issue_number("the kernel issues 0.34 warps per cycle"));
  EXPECT_FALSE(has_issue_number("tissue 5"));
  EXPECT_FALSE(has_issue_number("a (#) sign"));
  EXPECT_TRUE(has_run_time("the run of 21:40 took"));
  EXPECT_TRUE(has_run_time("in the 01:16 run"));
  EXPECT_TRUE(has_run_time("(run at 1:07)"));
  EXPECT_TRUE(has_run_time("Device run 2 (14:06) ... root cause not found"));
  EXPECT_FALSE(has_run_time("date: 2026-12-01 01:15:21 UTC"));
  EXPECT_FALSE(has_run_time("ratio 16:9 of the screen"));
  EXPECT_FALSE(has_run_time("the launch lead runs eight flushes of the whole cache; lunch at 12:30"));
  EXPECT_TRUE(names("see " + kWorkRoot + "main/README.md", kWorkRoot));
  EXPECT_TRUE(names("'" + kWorkRoot + "x'", kWorkRoot));
  EXPECT_FALSE(names("--out /root/out" + kWorkRoot + "report", kWorkRoot));
}

TEST(DocsReferences, TheRepositoryPointsOnlyInsideItself) {
  const auto files = repository_files();
  ASSERT_FALSE(files.empty()) << "no files found under " << FP8SIM_SOURCE_DIR;
  ASSERT_TRUE(std::find(files.begin(), files.end(), "README.md") != files.end());
  const auto hits = scan_repository([](const std::string& f) { return in_list(f, kCheckedNow); });
  EXPECT_TRUE(hits.empty()) << hits.size() << " dangling reference(s):\n" << describe(hits);
}

}  // namespace
