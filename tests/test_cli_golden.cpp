// The CLI's JSON documents over the committed sample trace, models and calibration, byte for
// byte against tests/data/golden/cli/NAME.json.gz: a changed number, field or order in what
// analyze, memory, speed, optim, recipes or report write fails here, naming the first line that
// differs. The cases are tests/data/golden/cli/cases.txt.
//
// Each case runs in the source tree with the GPU module out of reach (FP8SIM_GPU_MODULE names a
// missing file), so every build computes on the CPU paths alone. Of a report, what depends on the
// machine and the moment is left out before comparing: `meta`, `intro`, the inputs, compare and
// bench sections and the speed document's command line.
//
// FP8SIM_UPDATE_GOLDEN=1 writes every expected document from the binary under test instead
// (FP8SIM_UPDATE_GOLDEN=missing: only the absent ones); scripts/gen_cli_golden.sh does that.
// Review the change (zcat) before committing it.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(FP8SIM_SOURCE_DIR) / "tests" / "data" / "golden" / "cli";

struct Case {
  std::string name;
  std::vector<std::string> args;
  std::string file;  // empty: standard output
};

std::vector<Case> load_cases() {
  std::vector<Case> cases;
  std::ifstream in(kDir / "cases.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Case c;
    ss >> c.name;
    std::string w;
    while (ss >> w) {
      if (w == "=>") {
        ss >> c.file;
        break;
      }
      c.args.push_back(w);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// A report without what depends on the machine and the moment.
std::string normalize_report(const std::string& text) {
  Json doc = Json::parse(text);
  auto& top = doc.as_object();
  std::erase_if(top, [](const auto& kv) { return kv.first == "meta" || kv.first == "intro"; });
  auto& sections = doc["sections"].as_array();
  std::erase_if(sections, [](const Json& s) {
    const std::string id = s.at("id").as_string();
    return id == "inputs" || id == "compare" || id == "bench";
  });
  for (const char* piece : {"speed", "speed_at_max_batch"})
    if (doc["data"].contains(piece))
      std::erase_if(doc["data"][piece].as_object(), [](const auto& kv) { return kv.first == "command_line"; });
  return doc.dump(2) + "\n";
}

std::string gunzip(const fs::path& p) {
  const std::vector<uint8_t> bytes = test::read_file_bytes(p.string());
  return std::string(bytes.begin(), bytes.end());
}

void gzip_to(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  gzFile f = gzopen(tmp.c_str(), "wb9");
  ASSERT_NE(f, nullptr) << tmp;
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
  fs::rename(tmp, p);
}

// "line N: expected ... / got ..." for the first line that differs.
std::string first_difference(const std::string& want, const std::string& got) {
  std::istringstream a(want), b(got);
  std::string la, lb;
  for (int n = 1;; ++n) {
    const bool ha = static_cast<bool>(std::getline(a, la)), hb = static_cast<bool>(std::getline(b, lb));
    if (!ha && !hb) return "the documents differ only in line endings";
    if (ha != hb || la != lb)
      return "line " + std::to_string(n) + ": expected `" + (ha ? la.substr(0, 300) : "<end>") + "`, got `" +
             (hb ? lb.substr(0, 300) : "<end>") + "`";
  }
}

TEST(CliGolden, EveryDocumentIsByteIdenticalToItsGoldenCopy) {
  const std::vector<Case> cases = load_cases();
  ASSERT_GE(cases.size(), 10u) << "no cases in " << (kDir / "cases.txt");
  const char* update_env = std::getenv("FP8SIM_UPDATE_GOLDEN");
  const std::string update = update_env ? update_env : "";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path golden = kDir / (c.name + ".json.gz");
    const bool write = update == "1" || (update == "missing" && !fs::exists(golden));
    const std::string out = test::temp_dir();
    std::vector<std::string> args;
    for (const auto& a : c.args) args.push_back(replace_all(a, "{OUT}", out));
    test::RunOptions o;
    o.cwd = FP8SIM_SOURCE_DIR;
    o.env["FP8SIM_GPU_MODULE"] = out + "/no-gpu-module.so";
    o.timeout_s = 300;
    const test::RunResult r = test::run(args, o);
    std::string doc = c.file.empty() ? r.out : test::file_content(out + "/" + c.file);
    if (r.exit_code != 0 || doc.empty()) {
      ADD_FAILURE() << "fp8sim " << c.args.front() << " exited " << r.exit_code << " with no document: " << r.err;
      continue;
    }
    if (c.args.front() == "report") doc = normalize_report(doc);
    if (write) {
      gzip_to(golden, doc);
      continue;
    }
    if (!fs::exists(golden)) {
      ADD_FAILURE() << golden << " is missing (scripts/gen_cli_golden.sh --missing writes it)";
      continue;
    }
    const std::string want = gunzip(golden);
    EXPECT_TRUE(doc == want) << c.name << ": " << first_difference(want, doc)
                             << " (an intended change: scripts/gen_cli_golden.sh, then review the diff)";
  }
}

}  // namespace
}  // namespace fp8sim
