#include "tests/support/proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/test_util.hpp"

extern char** environ;

namespace fp8sim::test {

std::string fp8sim_binary() {
  const char* e = std::getenv("FP8SIM_TEST_BINARY");
  return e && *e ? std::string(e) : std::string(FP8SIM_BINARY);
}

double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// fork + exec of fp8sim with the options; returns the pid. `in_fd` becomes the child's stdin.
pid_t spawn(const std::vector<std::string>& args, const RunOptions& o, int in_fd, const std::string& out_path,
            const std::string& err_path) {
  std::vector<std::string> argv_s = {fp8sim_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    if (!o.env.count(key)) env_s.push_back(kv);
  }
  for (const auto& [k, v] : o.env) env_s.push_back(k + "=" + v);
#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer would add its suppression statistics to stderr, which the tests count.
  bool have_lsan = false;
  for (auto& kv : env_s)
    if (kv.rfind("LSAN_OPTIONS=", 0) == 0) {
      kv += ":print_suppressions=0";
      have_lsan = true;
    }
  if (!have_lsan) env_s.push_back("LSAN_OPTIONS=print_suppressions=0");
#endif
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
#if defined(__SANITIZE_ADDRESS__)
  const long as_mib = 0;  // AddressSanitizer reserves terabytes of address space for its shadow
#else
  const long as_mib = o.rlimit_as_mib;
#endif
  const long fsize = o.rlimit_fsize;
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(126);
    if (as_mib > 0) {
      const struct rlimit lim = {static_cast<rlim_t>(as_mib) << 20, static_cast<rlim_t>(as_mib) << 20};
      ::setrlimit(RLIMIT_AS, &lim);
    }
    if (fsize > 0) {
      const struct rlimit lim = {static_cast<rlim_t>(fsize), static_cast<rlim_t>(fsize)};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    ::dup2(in_fd, STDIN_FILENO);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

RunResult collect(pid_t pid, int status, bool timed_out, double start, const std::string& out_path,
                  const std::string& err_path) {
  RunResult r;
  r.timed_out = timed_out;
  r.seconds = seconds_now() - start;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  (void)pid;
  return r;
}

// Waits for `pid` at most timeout_s; kills it (SIGKILL) after that.
int wait_for(pid_t pid, double timeout_s, bool* timed_out) {
  const double start = seconds_now();
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) return status;
    if (w < 0 && errno != EINTR) return 0;
    if (seconds_now() - start > timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      *timed_out = true;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

RunResult run(const std::vector<std::string>& args, const RunOptions& o) {
  const std::string dir = temp_dir();
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr", in_path = dir + "/stdin";
  {
    std::ofstream in(in_path, std::ios::binary);
    if (o.stdin_data) in << *o.stdin_data;
  }
  const int in_fd = ::open(o.stdin_data ? in_path.c_str() : "/dev/null", O_RDONLY);
  const double start = seconds_now();
  const pid_t pid = spawn(args, o, in_fd, out_path, err_path);
  ::close(in_fd);
  bool timed_out = false;
  const int status = wait_for(pid, o.timeout_s, &timed_out);
  return collect(pid, status, timed_out, start, out_path, err_path);
}

Background::Background(const std::vector<std::string>& args, const RunOptions& o, bool stdin_pipe) {
  const std::string dir = temp_dir();
  out_path_ = dir + "/stdout";
  err_path_ = dir + "/stderr";
  int child_in = -1;
  if (stdin_pipe) {
    int p[2];
    if (::pipe(p) != 0) return;
    child_in = p[0];
    in_ = p[1];
    ::fcntl(in_, F_SETFD, FD_CLOEXEC);
  } else {
    child_in = ::open("/dev/null", O_RDONLY);
  }
  start_ = seconds_now();
  pid_ = spawn(args, o, child_in, out_path_, err_path_);
  ::close(child_in);
}

Background::~Background() {
  close_stdin();
  if (pid_ > 0 && !done_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

bool Background::feed(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(in_, bytes.data() + off, bytes.size() - off);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void Background::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

RunResult Background::wait(double timeout_s) {
  const double start = seconds_now();
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid_, &status, WNOHANG);
    if (w == pid_) break;
    if (seconds_now() - start > timeout_s) {
      RunResult r;
      r.timed_out = true;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  done_ = true;
  return collect(pid_, status, false, start_, out_path_, err_path_);
}

bool process_alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

std::string file_content(const std::string& path) { return slurp(path); }

std::vector<std::string> listing(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    out.push_back(fs::relative(it->path(), dir, ec).string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> temporaries_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& name : listing(dir)) {
    const std::string base = std::filesystem::path(name).filename().string();
    if (!base.empty() && base[0] == '.' && base.find(".tmp.") != std::string::npos) out.push_back(name);
  }
  return out;
}

std::string sample_trace() {
  // FP8SIM_TEST_SOURCE_DIR: the checkout's root where the tests run from a bundle on another host
  const char* root = std::getenv("FP8SIM_TEST_SOURCE_DIR");
  return std::string(root && *root ? root : FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";
}

}  // namespace fp8sim::test
