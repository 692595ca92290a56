// docs/cli.md holds the --help output of fp8sim and of every subcommand (scripts/gen_cli_docs.sh
// writes it). This test runs the binary and fails when the document no longer matches it: a
// command without a section, a section for a command that no longer exists, or a help text that
// changed. The fix is always `bash scripts/gen_cli_docs.sh`.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.hpp"

namespace {

const std::string kCliDoc = std::string(FP8SIM_SOURCE_DIR) + "/docs/cli.md";
const char* kFix = "docs/cli.md is stale: run `bash scripts/gen_cli_docs.sh` and commit the result";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Drops trailing blanks from every line and blank lines at the end (the generator does the same).
std::string normalise(const std::string& text) {
  std::vector<std::string> ls = lines_of(text);
  for (auto& l : ls) {
    const size_t end = l.find_last_not_of(" \t\r");
    l = end == std::string::npos ? std::string() : l.substr(0, end + 1);
  }
  while (!ls.empty() && ls.back().empty()) ls.pop_back();
  std::string out;
  for (const auto& l : ls) out += l + "\n";
  return out;
}

// The subcommands `fp8sim --help` lists: the indented names under "commands:".
std::vector<std::string> listed_commands(const std::string& help) {
  std::vector<std::string> cmds;
  bool in_list = false;
  for (const auto& l : lines_of(help)) {
    if (l == "commands:") {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (l.empty()) break;
    if (l.size() > 2 && l[0] == ' ' && l[1] == ' ' && l[2] != ' ') cmds.push_back(l.substr(2, l.find(' ', 2) - 2));
  }
  return cmds;
}

// Sections of docs/cli.md: "## `fp8sim ...`" followed by a ```text block.
std::map<std::string, std::string> doc_sections(const std::string& doc) {
  std::map<std::string, std::string> sections;
  const std::vector<std::string> ls = lines_of(doc);
  for (size_t i = 0; i < ls.size(); ++i) {
    const std::string& l = ls[i];
    if (l.rfind("## `", 0) != 0 || l.size() < 6 || l.back() != '`') continue;
    const std::string title = l.substr(4, l.size() - 5);
    size_t j = i + 1;
    while (j < ls.size() && ls[j].empty()) ++j;
    if (j >= ls.size() || ls[j] != "```text") {
      sections[title] = "<no ```text block after the heading>";
      continue;
    }
    std::string body;
    for (++j; j < ls.size() && ls[j] != "```"; ++j) body += ls[j] + "\n";
    sections[title] = normalise(body);
    i = j;
  }
  return sections;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(DocsCli, EveryCommandHasASectionAndNoSectionIsLeftOver) {
  const auto top = fp8sim::test::run_fp8sim({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const std::vector<std::string> cmds = listed_commands(top.out);
  ASSERT_GE(cmds.size(), 10u) << "fp8sim --help lists too few commands:\n" << top.out;

  const std::string doc = read_text(kCliDoc);
  ASSERT_FALSE(doc.empty()) << kCliDoc << " is missing or empty; " << kFix;
  const auto sections = doc_sections(doc);

  std::set<std::string> expected{"fp8sim"};
  for (const auto& c : cmds) expected.insert("fp8sim " + c);
  std::set<std::string> present;
  for (const auto& [title, body] : sections) present.insert(title);
  for (const auto& e : expected) EXPECT_TRUE(present.count(e)) << "no section for `" << e << "`; " << kFix;
  for (const auto& p : present) EXPECT_TRUE(expected.count(p)) << "section `" << p << "` names no command; " << kFix;
}

TEST(DocsCli, EverySectionIsTheCurrentHelpText) {
  const auto top = fp8sim::test::run_fp8sim({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const auto sections = doc_sections(read_text(kCliDoc));

  auto check = [&](const std::string& title, const fp8sim::test::CommandResult& r) {
    ASSERT_EQ(r.exit_code, 0) << title << " --help failed: " << r.err;
    const auto it = sections.find(title);
    if (it == sections.end()) return;  // reported by the test above
    EXPECT_EQ(it->second, normalise(r.out)) << "`" << title << " --help` differs from docs/cli.md; " << kFix;
  };
  check("fp8sim", top);
  for (const auto& c : listed_commands(top.out)) check("fp8sim " + c, fp8sim::test::run_fp8sim({c, "--help"}));
}

}  // namespace
