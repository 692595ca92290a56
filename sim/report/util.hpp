#pragma once
// Small pieces of `fp8sim report` that are useful on their own and tested on their own:
// base64 for data URIs, the staging folder that makes a report appear all at once, where the
// project's files (scripts, sample traces, venv) are, and running a child process.
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8sim::report {

// RFC 4648 base64 with padding (what a data: URI expects).
std::string base64_encode(std::string_view bytes);

// A fresh temporary folder beside `target` (same file system, so the final rename is atomic).
// commit() puts it at `target`: if `target` exists it must be an earlier report (it holds
// report.json) or empty, and it is swapped out in one rename and then deleted; anything else is
// refused, so a mistyped --out never deletes a user's folder. A symbolic link is followed (the
// folder it leads to is replaced, never the link); the current folder and its ancestors are
// refused (replacing them would pull the folder out from under the shell). Missing parent folders
// are created. Without commit() the destructor removes the temporary folder and the parents it
// created: a failed run leaves no partial report and the old one intact. The temporary is
// registered for removal on SIGINT/SIGTERM, and stale temporaries of dead runs beside the target
// are removed first.
class StagingDir {
 public:
  explicit StagingDir(const std::filesystem::path& target);  // throws Error (one line) if unusable
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  const std::filesystem::path& path() const { return tmp_; }
  const std::filesystem::path& target() const { return target_; }
  void commit();

 private:
  void drop_parents();  // removes the parents this staging created (while empty)
  std::filesystem::path target_, tmp_;
  std::vector<std::filesystem::path> created_parents_;  // deepest first
  std::vector<int> parent_slots_;                       // their signal-cleanup registrations
  int slot_ = -1;
  bool committed_ = false;
};

// The folder a report for --out `out` replaces: absolute, links followed, no trailing separator.
std::filesystem::path report_target(const std::filesystem::path& out);

// Throws Error when `target` exists and may not be replaced by a report (see StagingDir).
void check_replaceable(const std::filesystem::path& target);

// The project's source tree (scripts/, traces/, models/): $FP8SIM_SOURCE_DIR, else the tree
// this binary was built from, else a folder at or above the binary's that has scripts/plots.py.
// Empty when none is found.
std::filesystem::path source_dir();
// `rel` under the candidates of source_dir(), first existing one; empty when none exists.
std::filesystem::path find_resource(const std::filesystem::path& rel);
std::filesystem::path executable_dir();
// A path as a report shows it: relative to source_dir() when inside it (so committed example
// reports carry no machine's folders), else unchanged.
std::string display_path(const std::filesystem::path& p);

// The Python that draws the plots: $FP8SIM_PYTHON, else <source>/.venv/bin/python, else python3
// on PATH. `why_not` says why none was found (empty path returned).
std::filesystem::path find_python(std::string* why_not);

// Children run_process starts die with fp8sim: they get SIGKILL when fp8sim ends (also when it
// is killed), and fp8sim's signal handler kills them before it removes its temporaries.
struct ProcessResult {
  int exit_code = -1;  // -1: killed (timeout or signal)
  bool timed_out = false;
  std::string output;  // stdout and stderr together (tail kept)
};
// Runs argv[0] with argv and `extra_env` (NAME=VALUE) added to the environment; stdout and stderr
// go to `log_file`. `on_output` is called about every 100 ms with the log so far (for progress).
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                          const std::filesystem::path& log_file, double timeout_s,
                          const std::function<void(const std::string&)>& on_output = {});

}  // namespace fp8sim::report
