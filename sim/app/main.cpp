// fp8sim: dispatches to the self-registered subcommands (sim/app/cmd_*.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/cleanup.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  fp8sim::cleanup::install_signal_handlers();
  std::vector<std::string> args(argv + 1, argv + argc);
  // No command is a usage error: the command list goes to stderr with status 2 (stdout stays
  // empty, so a script that forgot the command does not read the usage as data).
  if (args.empty()) {
    print_usage(stderr);
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
    fmt::print(stderr, "fp8sim: error: unknown command '{}' (run 'fp8sim --help' for the list)\n", name);
    return 2;
  }
  args.erase(args.begin());
  try {
    return it->run(args);
  } catch (const fp8sim::UsageError& e) {
    fmt::print(stderr, "fp8sim {}: error: {}\n", name, one_line(e.what()));
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "fp8sim {}: error: out of memory\n", name);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp8sim {}: error: {}\n", name, one_line(e.what()));
    return 1;
  } catch (...) {
    fmt::print(stderr, "fp8sim {}: error: an unexpected internal error (not a standard exception)\n", name);
    return 1;
  }
}
