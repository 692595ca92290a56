// fp8sim: dispatches to the self-registered subcommands (sim/app/cmd_*.cpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "sim/app/cli.hpp"
#include "sim/app/dist_launch.hpp"
#include "sim/common/check.hpp"
#include "sim/common/cleanup.hpp"
#include "sim/common/dist.hpp"
#include "sim/common/io.hpp"
#include "sim/trace/trace.hpp"

namespace {

void print_usage(std::FILE* out) {
  auto cmds = fp8sim::cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  fmt::print(out,
             "fp8sim {} - a memory and numerics simulator for FP8 training with real-kernel validation\n\n"
             "usage: fp8sim <command> [options]    (fp8sim <command> --help for each command's options)\n\n"
             "commands:\n",
             FP8SIM_VERSION);
  for (const auto& c : cmds) fmt::print(out, "  {:<10} {}\n", c.name, c.summary);
  fmt::print(out,
             "\nErrors are one line on stderr; the exit status is 0 on success, 1 for bad data or a failed run,\n"
             "2 for bad usage. Outputs appear only when the whole run succeeds (files are written atomically,\n"
             "'-' is standard output); an interrupted run removes its temporaries. See docs/cli-contract.md.\n");
}

// An error message as one line: embedded line breaks (from a library's message) become spaces.
std::string one_line(const char* what) {
  std::string s(what);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// A rank other than 0 of a distributed run: its stdout and stderr go to /dev/null (rank 0 prints
// the job's tables, progress and its one error line).
void quiet_this_rank() {
  std::fflush(stdout);
  std::fflush(stderr);
  if (const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC); null >= 0) {
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::close(null);
  }
}

std::string distributed_commands() {
  std::vector<std::string> names;
  for (const auto& c : fp8sim::cli::registry())
    if (c.distributed) names.push_back(c.name);
  std::sort(names.begin(), names.end());
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed standard descriptor (`>&-`) would be reused by the next open(), and the tables would
  // land in an output file: each is /dev/null then.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int null = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null >= 0 && null != fd) {
        ::dup2(null, fd);
        ::close(null);
      }
    }
  fp8sim::cleanup::install_signal_handlers();
  std::vector<std::string> args(argv + 1, argv + argc);
  // No command is a usage error: the command list goes to stderr with status 2 (stdout stays
  // empty, so a script that forgot the command does not read the usage as data).
  if (args.empty()) {
    try {
      print_usage(stderr);
    } catch (const std::exception&) {  // an unwritable stderr: the status still says it
    }
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(stdout);
    return 0;
  }
  if (args[0] == "--version") {
    fmt::print("fp8sim {}\n", FP8SIM_VERSION);
    return 0;
  }
  const std::string name = args[0];
  const auto& reg = fp8sim::cli::registry();
  auto it = std::find_if(reg.begin(), reg.end(), [&](const auto& c) { return c.name == name; });
  if (it == reg.end()) {
    fp8sim::eprint("fp8sim: error: unknown command '{}' (run 'fp8sim --help' for the list)\n", name);
    return 2;
  }
  args.erase(args.begin());
  // Under an MPI launcher every rank runs a distributed command and joins the job (MPI); rank 0
  // alone prints and writes. Other commands never start MPI: with several ranks they are a usage
  // error, which the launcher's environment shows without MPI.
  namespace launch = fp8sim::dist_launch;
  if (!it->distributed && launch::under_launcher() && launch::launcher_size() > 1) {
    if (launch::launcher_rank() != 0) quiet_this_rank();
    fp8sim::eprint(
        "fp8sim {}: error: {} runs in one process; under an MPI launcher only {} split their work "
        "(docs/scale-out.md)\n",
        name, name, distributed_commands());
    return 2;
  }
  if (it->distributed) {
    try {
      launch::start();
    } catch (const std::exception& e) {
      fp8sim::eprint("fp8sim {}: error: {}\n", name, one_line(e.what()));
      return 2;
    }
  }
  if (fp8sim::dist::distributed() && !fp8sim::dist::is_root()) quiet_this_rank();
  int code = 0;
  std::string message;
  bool shared = false;  // every rank has seen this failure already
  try {
    code = it->run(args);
  } catch (const fp8sim::dist::JobFailure& e) {
    code = e.code();
    message = e.what();
    shared = true;
  } catch (...) {
    const fp8sim::dist::Outcome f = fp8sim::dist::current_failure();
    code = f.code;
    message = f.message;
  }
  if (!shared) {
    const fp8sim::dist::Outcome o = fp8sim::dist::finish(code, message);
    code = o.code;
    message = o.message;
  }
  // Text printed to stdout sits in its buffer until here: a stdout that cannot take it (a full
  // disk, a closed pipe) fails the run like any other write (stdout silenced by -q is /dev/null).
  if (std::string e = fp8sim::stdout_write_error(); !e.empty() && code == 0) {
    code = 1;
    message = std::move(e);
  }
  if (code != 0 && !message.empty()) fp8sim::eprint("fp8sim {}: error: {}\n", name, one_line(message.c_str()));
  fp8sim::dist::reset_comm();
  // After a trace write that failed, HDF5's teardown at exit would crash (trace.hpp).
  if (fp8sim::trace::hdf5_teardown_unsafe()) std::_Exit(code);
  return code;
}
