// No list of recipe names outside the registry: the names of the recipes in recipes/ may appear
// together only in sim/recipe/ and recipes/ themselves. Everything else takes them from the
// registry (sim/recipe/recipe.hpp), so that a new recipe is one file.
//
// The scan reads the C++ and CUDA sources under sim/ (but sim/recipe/) and gpu/, and the Python
// and shell scripts under scripts/, with comments removed, and fails on
//   - a statement (C++: up to the next ';'; Python and shell: a line outside brackets) holding two
//     or more different recipe names as whole string literals: {"bf16", "te"}, r == "a" || r == "b";
//   - one string literal naming two or more recipes as words: "valid: bf16, te, coat",
//     "bf16 | te | coat" (a name followed by '=' or ':' is a key or a spec, not a name).
// Other vocabularies share some of these names (bf16 is also a format and an optimizer-state
// preset, coat a preset and a speed plan); a statement that lists such a vocabulary carries a
// comment with the word NOT-RECIPES and the reason, which exempts it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(FP8SIM_SOURCE_DIR) / "recipes"))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Token {
  enum Kind { Str, Comment, End } kind;
  std::string text;
};

// String literals, comments and statement ends of a source, in order. `script`: Python or shell
// (# comments, statements end at a newline outside brackets, triple quotes); else C++ (// and
// /* */ comments, raw strings, character literals, statements end at ';').
std::vector<Token> tokenize(const std::string& s, bool script) {
  std::vector<Token> out;
  size_t i = 0;
  int depth = 0;
  const size_t n = s.size();
  auto until = [&](size_t from, const std::string& end) {
    const size_t j = s.find(end, from);
    return j == std::string::npos ? n : j;
  };
  while (i < n) {
    const char c = s[i];
    if (!script && s.compare(i, 2, "//") == 0) {
      const size_t j = until(i, "\n");
      out.push_back({Token::Comment, s.substr(i, j - i)});
      i = j;
    } else if (!script && s.compare(i, 2, "/*") == 0) {
      const size_t j = std::min(n, until(i + 2, "*/") + 2);
      out.push_back({Token::Comment, s.substr(i, j - i)});
      i = j;
    } else if (script && c == '#') {
      const size_t j = until(i, "\n");
      out.push_back({Token::Comment, s.substr(i, j - i)});
      i = j;
    } else if (!script && s.compare(i, 2, "R\"") == 0 &&
               (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
      const size_t open = until(i + 2, "(");
      const std::string delim = ")" + s.substr(i + 2, open - i - 2) + "\"";
      const size_t j = until(open, delim);
      out.push_back({Token::Str, s.substr(std::min(n, open + 1), j - std::min(n, open + 1))});
      i = std::min(n, j + delim.size());
    } else if (script && (s.compare(i, 3, "\"\"\"") == 0 || s.compare(i, 3, "'''") == 0)) {
      const size_t j = until(i + 3, s.substr(i, 3));
      out.push_back({Token::Str, s.substr(i + 3, j - std::min(n, i + 3))});
      i = std::min(n, j + 3);
    } else if (c == '"' || (c == '\'' && script)) {
      std::string text;
      size_t j = i + 1;
      while (j < n && s[j] != c && !(s[j] == '\n' && !script)) {
        if (s[j] == '\\' && j + 1 < n) {
          text += s.substr(j, 2);
          j += 2;
        } else {
          text += s[j++];
        }
      }
      out.push_back({Token::Str, text});
      i = j + 1;
    } else if (c == '\'') {  // a C++ character literal ('"', '\'') or a digit separator
      size_t j = i + 1;
      if (j < n && s[j] == '\\') j += 2;
      else ++j;
      i = j < n && s[j] == '\'' ? j + 1 : i + 1;
    } else {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') depth = std::max(0, depth - 1);
      if ((!script && c == ';') || (script && c == '\n' && depth == 0)) out.push_back({Token::End, ""});
      ++i;
    }
  }
  out.push_back({Token::End, ""});
  return out;
}

// The findings in one source: "list {a, b}" or "string \"...\"".
std::vector<std::string> scan(const std::string& text, bool script, const std::vector<std::string>& names) {
  std::vector<std::regex> words;
  for (const auto& nm : names) words.emplace_back("(^|[^A-Za-z0-9_=:.-])" + nm + "($|[^A-Za-z0-9_=:-])");
  std::vector<std::string> found;
  std::set<std::string> statement;
  bool exempt = false;
  for (const Token& t : tokenize(text, script)) {
    if (t.kind == Token::Comment) {
      exempt = exempt || t.text.find("NOT-RECIPES") != std::string::npos;
    } else if (t.kind == Token::Str) {
      if (std::find(names.begin(), names.end(), t.text) != names.end()) statement.insert(t.text);
      int in_text = 0;
      for (const auto& w : words) in_text += std::regex_search(t.text, w) ? 1 : 0;
      if (in_text >= 2 && !exempt) found.push_back("string \"" + t.text.substr(0, 120) + "\"");
    } else {
      if (statement.size() >= 2 && !exempt) {
        std::string l;
        for (const auto& s : statement) l += (l.empty() ? "" : ", ") + s;
        found.push_back("list {" + l + "}");
      }
      statement.clear();
      exempt = false;
    }
  }
  return found;
}

const std::vector<std::string> kNames = {"bf16", "coat", "deepseek", "fp8lm", "mxfp8", "te"};

TEST(RecipeNameLists, TheScanFindsListsAndLeavesOtherUsesAlone) {
  // What the registry replaced.
  EXPECT_EQ(
      scan(R"x(std::vector<std::string> f() { return {"bf16", "te", "coat", "fp8lm", "deepseek"}; })x", false, kNames)
          .size(),
      1u);
  EXPECT_EQ(scan(R"x(if (r == "bf16" || r == "te" || r == "coat") x.push_back(r);)x", false, kNames).size(), 1u);
  EXPECT_EQ(scan(R"x(m = {
      {"bf16", "fp32"},
      {"te", "te-fp8"}};)x",
                 false, kNames)
                .size(),
            1u);
  EXPECT_EQ(scan(R"x(throw UsageError("unknown recipe (valid: bf16, te, coat)");)x", false, kNames).size(), 1u);
  EXPECT_EQ(scan(R"x(o("recipe", "bf16 | te | coat | fp8lm | deepseek");)x", false, kNames).size(), 1u);
  EXPECT_EQ(scan("COLOURS = {\n    \"bf16\": \"#4c72b0\", \"te\": \"#dd8452\",\n}\nx = 1\n", true, kNames).size(), 1u);
  // One name per statement, names inside specs and keys, prose in comments, an exempt vocabulary.
  EXPECT_TRUE(scan(R"x(if (a == "bf16") f(); g("coat"); // bf16, te, coat)x", false, kNames).empty());
  EXPECT_TRUE(scan(R"x(h("e4m3:g16:scale=bf16", "de=coat", "--batch bf16=2,te=2,coat=4");)x", false, kNames).empty());
  EXPECT_TRUE(scan(R"x(char q = '"'; auto s = "bf16"; auto t = "coat";)x", false, kNames).empty());
  EXPECT_TRUE(scan(R"x(// NOT-RECIPES: optimizer-state presets.
      for (auto n : {"coat", "fp8lm", "bf16"}) f(n);)x",
                   false, kNames)
                  .empty());
  EXPECT_TRUE(scan("x = 'bf16'  # te, coat\ny = 'coat'\n", true, kNames).empty());
}

TEST(RecipeNameLists, NoSourceOutsideTheRegistryListsRecipeNames) {
  const std::vector<std::string> names = recipe_names();
  ASSERT_GE(names.size(), 2u) << "no recipes in " << FP8SIM_SOURCE_DIR << "/recipes";
  const fs::path root(FP8SIM_SOURCE_DIR);
  std::vector<std::pair<fs::path, bool>> files;  // path, script
  for (const char* dir : {"sim", "gpu"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (e.path().string().find("/sim/recipe/") != std::string::npos) continue;
      if (ext == ".cpp" || ext == ".hpp" || ext == ".cu" || ext == ".cuh") files.emplace_back(e.path(), false);
    }
  for (const auto& e : fs::recursive_directory_iterator(root / "scripts")) {
    const std::string ext = e.path().extension().string();
    if (ext == ".py" || ext == ".sh") files.emplace_back(e.path(), true);
  }
  ASSERT_GT(files.size(), 50u);
  bool saw_plots = false;
  for (const auto& [path, script] : files) {
    saw_plots = saw_plots || path.filename() == "plots.py";
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    for (const auto& f : scan(ss.str(), script, names))
      ADD_FAILURE() << fs::relative(path, root).string() << ": " << f
                    << " (take recipe names from the registry, sim/recipe/recipe.hpp; a list of another "
                       "vocabulary carries a NOT-RECIPES comment saying which)";
  }
  EXPECT_TRUE(saw_plots);
}

}  // namespace
