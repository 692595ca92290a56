#include "sim/report/util.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"

extern char** environ;

namespace fp8sim::report {

namespace fs = std::filesystem;

std::string base64_encode(std::string_view bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t w = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) |
                       uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(w >> 18) & 63];
    out += kAlphabet[(w >> 12) & 63];
    out += kAlphabet[(w >> 6) & 63];
    out += kAlphabet[w & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest == 1) {
    const uint32_t w = uint32_t(uint8_t(bytes[i])) << 16;
    out += kAlphabet[(w >> 18) & 63];
    out += kAlphabet[(w >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    const uint32_t w = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += kAlphabet[(w >> 18) & 63];
    out += kAlphabet[(w >> 12) & 63];
    out += kAlphabet[(w >> 6) & 63];
    out += '=';
  }
  return out;
}

// ---- staging folder ---------------------------------------------------------------------------

namespace {

// An absolute, normalised path without a trailing separator ("out/" and "out" are one folder).
fs::path normalise(const fs::path& p) {
  fs::path a = fs::absolute(p).lexically_normal();
  if (a.filename().empty() && a.has_parent_path() && a != a.root_path()) a = a.parent_path();
  return a;
}

}  // namespace

void check_replaceable(const fs::path& target) {
  std::error_code ec;
  const auto st = fs::symlink_status(target, ec);
  if (ec || !fs::exists(st)) return;
  FP8SIM_REQUIRE(fs::is_directory(st), "--out '{}' exists and is not a folder", target.string());
  const bool empty = fs::is_empty(target, ec);
  FP8SIM_REQUIRE(!ec, "cannot read --out folder '{}': {}", target.string(), ec.message());
  FP8SIM_REQUIRE(empty || fs::exists(target / "report.json"),
                 "--out '{}' is a folder that holds no report.json; refusing to replace it (choose a new or "
                 "empty folder, or an earlier report's folder)",
                 target.string());
}

StagingDir::StagingDir(const fs::path& target_in) {
  FP8SIM_REQUIRE(!target_in.empty(), "--out must name a folder");
  target_ = normalise(target_in);
  FP8SIM_REQUIRE(target_ != target_.root_path(), "--out may not be the root folder");
  check_replaceable(target_);
  const fs::path parent = target_.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  FP8SIM_REQUIRE(!ec && fs::is_directory(parent), "cannot create the folder '{}' for --out: {}", parent.string(),
                 ec ? ec.message() : std::string("not a folder"));
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path candidate = parent / fmt::format(".{}.tmp.{}.{}", target_.filename().string(), ::getpid(), attempt);
    if (::mkdir(candidate.c_str(), 0755) == 0) {
      tmp_ = candidate;
      return;
    }
    FP8SIM_REQUIRE(errno == EEXIST, "cannot write the report into '{}': {}", parent.string(), std::strerror(errno));
  }
  throw Error(fmt::format("cannot create a temporary folder in '{}'", parent.string()));
}

StagingDir::~StagingDir() {
  if (!committed_ && !tmp_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
}

void StagingDir::commit() {
  FP8SIM_CHECK(!committed_, "staging folder committed twice");
  check_replaceable(target_);  // it may have changed while the report ran
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_, ec))) {
    // Swap the finished report and the old one in one step, then delete the old one (now at the
    // temporary path). Readers see either the complete old report or the complete new one.
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
      committed_ = true;
      fs::remove_all(tmp_, ec);
      return;
    }
    // File systems without RENAME_EXCHANGE: move the old report aside first.
    const fs::path aside = tmp_.string() + ".old";
    FP8SIM_REQUIRE(::rename(target_.c_str(), aside.c_str()) == 0, "cannot replace '{}': {}", target_.string(),
                   std::strerror(errno));
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      ::rename(aside.c_str(), target_.c_str());  // put the old report back
      throw Error(fmt::format("cannot move the report into '{}': {}", target_.string(), std::strerror(err)));
    }
    committed_ = true;
    fs::remove_all(aside, ec);
    return;
  }
  FP8SIM_REQUIRE(::rename(tmp_.c_str(), target_.c_str()) == 0, "cannot move the report into '{}': {}",
                 target_.string(), std::strerror(errno));
  committed_ = true;
}

// ---- where things are -------------------------------------------------------------------------

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

namespace {

std::vector<fs::path> source_candidates() {
  std::vector<fs::path> c;
  if (const char* env = std::getenv("FP8SIM_SOURCE_DIR"); env && *env) c.emplace_back(env);
#ifdef FP8SIM_SOURCE_DIR
  c.emplace_back(FP8SIM_SOURCE_DIR);
#endif
  // A bundle copied to another machine: the binary sits in the tree or one or two levels below it.
  fs::path d = executable_dir();
  for (int up = 0; up < 3 && !d.empty(); ++up) {
    c.push_back(d);
    if (d == d.parent_path()) break;
    d = d.parent_path();
  }
  return c;
}

}  // namespace

fs::path source_dir() {
  std::error_code ec;
  for (const auto& c : source_candidates())
    if (fs::exists(c / "scripts" / "plots.py", ec)) return c;
  return {};
}

fs::path find_resource(const fs::path& rel) {
  std::error_code ec;
  for (const auto& c : source_candidates())
    if (fs::exists(c / rel, ec)) return c / rel;
  return {};
}

// A path as the report shows it: relative to the fp8sim tree when it is inside it (so committed
// example reports do not carry one machine's folders), else as given.
std::string display_path(const fs::path& p) {
  const fs::path src = source_dir();
  if (src.empty()) return p.string();
  // Lexical, not canonical: a venv's python is a symlink whose target is outside the tree.
  const fs::path rel = fs::absolute(p).lexically_normal().lexically_relative(fs::absolute(src).lexically_normal());
  if (!rel.empty() && *rel.begin() != "..") return rel.string();
  return p.string();
}

namespace {
bool is_executable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p); }
}  // namespace

fs::path find_python(std::string* why_not) {
  if (const char* env = std::getenv("FP8SIM_PYTHON"); env && *env) {
    if (is_executable(env)) return env;
    if (why_not) *why_not = fmt::format("FP8SIM_PYTHON='{}' is not an executable file", env);
    return {};
  }
  for (const auto& c : source_candidates()) {
    const fs::path venv = c / ".venv" / "bin" / "python";
    if (is_executable(venv)) return venv;
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (dir.empty()) continue;
      const fs::path p = fs::path(dir) / "python3";
      if (is_executable(p)) return p;
    }
  }
  if (why_not) *why_not = "no Python found (set FP8SIM_PYTHON, or create the project venv with scripts/setup.sh, or put python3 on PATH)";
  return {};
}

// ---- child processes --------------------------------------------------------------------------

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                          const fs::path& log_file, double timeout_s,
                          const std::function<void(const std::string&)>& on_output) {
  FP8SIM_CHECK(!argv.empty(), "no program to run");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    bool overridden = false;
    for (const auto& x : extra_env)
      if (kv.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0) overridden = true;
    if (!overridden) env_strings.push_back(kv);
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ProcessResult result;
  if (rc != 0) {
    result.output = fmt::format("cannot run '{}': {}", argv[0], std::strerror(rc));
    return result;
  }
  const double start = now_seconds();
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (now_seconds() - start > timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    if (on_output) {
      std::error_code ec;
      if (fs::exists(log_file, ec)) on_output(read_text_file(log_file));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::error_code ec;
  result.output = fs::exists(log_file, ec) ? read_text_file(log_file) : std::string();
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace fp8sim::report
