#include "sim/report/util.hpp"

#include "sim/common/paths.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
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
#include "sim/common/cleanup.hpp"
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
    const uint32_t w =
        (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint32_t(uint8_t(bytes[i + 2]));
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

fs::path report_target(const fs::path& out) {
  if (out.empty()) throw UsageError("--out is empty: give the report's folder");
  if (out == "-") throw UsageError("--out - : a report is a folder of files and cannot go to standard output");
  // Absolute and normalised without a trailing separator ("out/" and "out" are one folder), the
  // links of the part that exists followed (weakly_canonical), then a dangling link's target.
  fs::path a = fs::absolute(out).lexically_normal();
  if (a.filename().empty() && a.has_parent_path() && a != a.root_path()) a = a.parent_path();
  std::error_code ec;
  fs::path c = fs::weakly_canonical(a, ec);
  if (ec) c = a;
  for (int hop = 0; hop < 40 && fs::is_symlink(fs::symlink_status(c, ec)); ++hop) {
    const fs::path next = fs::read_symlink(c, ec);
    if (ec) break;
    c = (next.is_absolute() ? next : c.parent_path() / next).lexically_normal();
  }
  if (c.filename().empty() && c.has_parent_path() && c != c.root_path()) c = c.parent_path();
  FP8SIM_REQUIRE(c != c.root_path(), "--out may not be the root folder");
  // The folder the shell runs in (or one above it) would be swapped out from under it.
  const fs::path cwd = fs::canonical(fs::current_path(ec), ec);
  if (!ec) {
    const fs::path rel = cwd.lexically_relative(c);
    if (!rel.empty() && *rel.begin() != "..")
      throw UsageError(
          fmt::format("--out '{}' is the current folder or contains it; a report replaces its folder "
                      "whole, so choose a folder below it (e.g. --out report)",
                      out.string()));
  }
  return c;
}

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
  target_ = report_target(target_in);
  check_replaceable(target_);
  const fs::path parent = target_.parent_path();
  std::error_code ec;
  // Create the missing parents one by one, remembering them (removed again if the run fails).
  std::vector<fs::path> missing;
  for (fs::path p = parent; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.root_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      drop_parents();
      throw Error(fmt::format("cannot create the folder '{}' for --out: {}", it->string(), std::strerror(err)));
    }
    created_parents_.insert(created_parents_.begin(), *it);
    parent_slots_.push_back(cleanup::remember_path(*it, cleanup::PathKind::EmptyFolder));
  }
  FP8SIM_REQUIRE(fs::is_directory(parent, ec), "cannot create the folder '{}' for --out: not a folder",
                 parent.string());
  cleanup::remove_stale_temporaries(parent, target_.filename().string());
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path candidate = parent / cleanup::temporary_name(target_, std::to_string(attempt));
    // Registered before it exists: a signal between mkdir and registration leaves nothing.
    const int slot = cleanup::remember_path(candidate, cleanup::PathKind::Folder);
    if (::mkdir(candidate.c_str(), 0755) == 0) {
      tmp_ = candidate;
      slot_ = slot;
      return;
    }
    const int err = errno;
    cleanup::forget_path(slot);
    if (err != EEXIST) {
      drop_parents();
      throw Error(fmt::format("cannot write the report into '{}': {}", parent.string(), std::strerror(err)));
    }
  }
  drop_parents();
  throw Error(fmt::format("cannot create a temporary folder in '{}'", parent.string()));
}

void StagingDir::drop_parents() {
  for (const auto& made : created_parents_) ::rmdir(made.c_str());  // only while still empty
  for (int slot : parent_slots_) cleanup::forget_path(slot);
  created_parents_.clear();
  parent_slots_.clear();
}

StagingDir::~StagingDir() {
  if (!committed_ && !tmp_.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
    drop_parents();
  }
  cleanup::forget_path(slot_);
  for (int slot : parent_slots_) cleanup::forget_path(slot);
}

void StagingDir::commit() {
  FP8SIM_CHECK(!committed_, "staging folder committed twice");
  check_replaceable(target_);  // it may have changed while the report ran
  // The old folder is deleted below: no file the run read may be in it (a recipe file, say; the
  // trace, the model and the calibration are refused before the run starts).
  for (const InputRead& r : inputs_read()) {
    std::error_code ec;
    const fs::path rel = fs::weakly_canonical(r.path, ec).lexically_relative(target_);
    if (!ec && !rel.empty() && *rel.begin() != "..")
      throw UsageError(
          fmt::format("--out '{}' holds '{}', an input of this run, which the report would delete; "
                      "choose another folder",
                      target_.string(), r.path.string()));
  }
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
    const int slot = cleanup::remember_path(aside, cleanup::PathKind::Folder);
    if (::rename(target_.c_str(), aside.c_str()) != 0) {
      const int err = errno;
      cleanup::forget_path(slot);
      throw Error(fmt::format("cannot replace '{}': {}", target_.string(), std::strerror(err)));
    }
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      ::rename(aside.c_str(), target_.c_str());  // put the old report back
      cleanup::forget_path(slot);
      throw Error(fmt::format("cannot move the report into '{}': {}", target_.string(), std::strerror(err)));
    }
    committed_ = true;
    fs::remove_all(aside, ec);
    cleanup::forget_path(slot);
    return;
  }
  FP8SIM_REQUIRE(::rename(tmp_.c_str(), target_.c_str()) == 0, "cannot move the report into '{}': {}", target_.string(),
                 std::strerror(errno));
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
  c.push_back(data_root());
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
  if (why_not)
    *why_not =
        "no Python found (set FP8SIM_PYTHON, or create the project venv with scripts/setup.sh, or put python3 on PATH)";
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

  ProcessResult result;
  const int log_fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    result.output = fmt::format("cannot write the log '{}': {}", log_file.string(), std::strerror(errno));
    return result;
  }
  // The child reports a failed exec through this pipe (closed by a successful exec).
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(log_fd);
    result.output = fmt::format("cannot run '{}': {}", argv[0], std::strerror(errno));
    return result;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec. The child dies with fp8sim (PR_SET_PDEATHSIG);
    // if fp8sim ended before prctl took effect, the child ends at once.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGXFSZ, &dfl, nullptr);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execve(args[0], args.data(), envp.data());
    const int err = errno;
    ssize_t ignored = ::write(err_pipe[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  ::close(log_fd);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(err_pipe[0]);
    result.output = fmt::format("cannot run '{}': {}", argv[0], std::strerror(errno));
    return result;
  }
  const int slot = cleanup::remember_child(pid);
  int exec_err = 0;
  ssize_t got;
  do {
    got = ::read(err_pipe[0], &exec_err, sizeof exec_err);
  } while (got < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  int status = 0;
  if (got == static_cast<ssize_t>(sizeof exec_err)) {
    ::waitpid(pid, &status, 0);
    cleanup::forget_child(slot);
    result.output = fmt::format("cannot run '{}': {}", argv[0], std::strerror(exec_err));
    return result;
  }
  const double start = now_seconds();
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
  cleanup::forget_child(slot);
  std::error_code ec;
  result.output = fs::exists(log_file, ec) ? read_text_file(log_file) : std::string();
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace fp8sim::report
