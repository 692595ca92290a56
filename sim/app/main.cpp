// fp8sim: dispatches to the self-registered subcommands (sim/app/cmd_*.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"

namespace {

void print_usage() {
  auto cmds = fp8sim::cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  fmt::print(
      "fp8sim {} - a memory and numerics simulator for FP8 training with real-kernel validation\n\n"
      "usage: fp8sim <command> [options]    (fp8sim <command> --help for each command's options)\n\n"
      "commands:\n",
      FP8SIM_VERSION);
  for (const auto& c : cmds) fmt::print("  {:<10} {}\n", c.name, c.summary);
  fmt::print(
      "\nErrors are one line on stderr; the exit status is 0 on success, 1 for bad data or a failed run,\n"
      "2 for bad usage. JSON output (--json FILE) and reports are written atomically.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
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
    fmt::print(stderr, "fp8sim {}: error: {}\n", name, e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "fp8sim {}: error: out of memory\n", name);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp8sim {}: error: {}\n", name, e.what());
    return 1;
  }
}
