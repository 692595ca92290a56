#pragma once
// Running fp8sim as a child process with full control: arguments without a shell, extra
// environment, standard input from a string or a pipe the test keeps writing to, a working
// folder, a time limit, and the raw wait status (so a test can tell "exit 1" from "killed by a
// signal").
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fp8sim::test {

// The fp8sim binary under test: $FP8SIM_TEST_BINARY when set (to run the CLI tests against
// another build), else the one this tree built.
std::string fp8sim_binary();

struct RunOptions {
  std::map<std::string, std::string> env;  // added to (or replacing in) the environment
  std::optional<std::string> stdin_data;   // else standard input is /dev/null
  std::string cwd;                         // empty: the test's own
  double timeout_s = 120;                  // then SIGKILL (timed_out = true)
  long rlimit_as_mib = 0;                  // > 0: RLIMIT_AS of the child, MiB (ignored under ASan)
  long rlimit_fsize = 0;                   // > 0: RLIMIT_FSIZE (largest file) of the child, bytes
};

struct RunResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};

RunResult run(const std::vector<std::string>& args, const RunOptions& o = {});

// A child started in the background; the test decides when it ends.
class Background {
 public:
  // stdin_pipe: the child's standard input is a pipe the test writes with feed()/close_stdin().
  Background(const std::vector<std::string>& args, const RunOptions& o = {}, bool stdin_pipe = false);
  ~Background();  // kills the child if it still runs
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return pid_; }
  bool feed(const std::string& bytes);
  void close_stdin();
  // Waits at most timeout_s; returns the result (timed_out when the child is still running).
  RunResult wait(double timeout_s);

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  std::string out_path_, err_path_;
  double start_ = 0;
  bool done_ = false;
};

// Whether process `pid` still runs (a zombie or a missing process does not).
bool process_alive(pid_t pid);
// The processes whose parent is `pid` (from /proc).
std::vector<pid_t> children_of(pid_t pid);
// Seconds since an arbitrary start (steady clock).
double seconds_now();

// The whole content of a file ("" when it cannot be read).
std::string file_content(const std::string& path);
// Names under `dir` (recursively, relative) that look like fp8sim temporaries (".NAME.tmp.PID...").
std::vector<std::string> temporaries_in(const std::string& dir);
// Every name under `dir` (recursively, relative, sorted).
std::vector<std::string> listing(const std::string& dir);
// The committed sample trace (under $FP8SIM_TEST_SOURCE_DIR when set, else the source tree).
std::string sample_trace();

}  // namespace fp8sim::test
