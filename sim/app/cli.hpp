#pragma once
// The fp8sim command line: one binary, subcommands that register themselves. Each subcommand
// lives in sim/app/cmd_<name>.cpp and declares
//   FP8SIM_COMMAND(name, "one-line summary", run_fn)
// with `int run_fn(const std::vector<std::string>& args)` (args excludes the program and
// subcommand names). Errors are thrown as fp8sim::Error / UsageError; main prints them as one
// line, "fp8sim <cmd>: error: ...", and exits 1 (runtime) or 2 (usage).
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fp8sim::cli {

namespace po = boost::program_options;

using RunFn = int (*)(const std::vector<std::string>& args);

struct Command {
  std::string name;
  std::string summary;
  RunFn run;
  bool distributed = false;  // splits its work among MPI ranks (sim/common/dist.hpp)
};

std::vector<Command>& registry();

struct Registrar {
  Registrar(const char* name, const char* summary, RunFn run, bool distributed = false) {
    registry().push_back({name, summary, run, distributed});
  }
};

// Parses args against `opts` (+ positional names). Handles --help by printing
// "usage: fp8sim <cmd> <usage>\n\n<description>\n\n<options>" and returning false (caller exits 0).
// Translates Boost errors into UsageError with a one-line message. Every subcommand gets
// --quiet: the tables and other text it prints on stdout are discarded (errors and warnings
// still go to stderr; data written to "-" still goes to stdout).
bool parse(const std::string& cmd, const std::vector<std::string>& args, po::options_description& opts,
           const po::positional_options_description& pos, po::variables_map& vm, const std::string& usage,
           const std::string& description);

// --quiet was given.
bool quiet();
// A line for stderr that is not an error or a warning ("wrote FILE"); dropped under --quiet.
void note(const std::string& line);
// An unsigned count given as text: digits only (no sign, so "-1" never wraps to 2^64-1).
uint64_t parse_u64(const std::string& option, const std::string& text);

// A comma-separated list given to `option` (--k 128,256): UsageError for an empty list or an
// empty entry ("128,,256", "128,").
std::vector<std::string> comma_list(const std::string& option, const std::string& s);

// --threads: 0 (every core) up to kMaxThreads; anything else is a UsageError. (A pool of tens of
// thousands of threads exhausts memory inside the threading runtime instead of failing cleanly.)
inline constexpr int kMaxThreads = 1024;
void check_threads(int threads);

// Recipe names for a help text, `names` being one of the registry's lists (sim/recipe), joined
// with ", "; when the registry cannot be read, a pointer to `fp8sim recipes` instead, so that
// --help works whatever the recipes folder holds.
std::string recipe_names_for_help(std::vector<std::string> (*names)());

// Prints a human table: header row, separator, rows. Columns right-aligned except the first.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 std::FILE* out = stdout);

}  // namespace fp8sim::cli

#define FP8SIM_CONCAT_(a, b) a##b
#define FP8SIM_CONCAT(a, b) FP8SIM_CONCAT_(a, b)
#define FP8SIM_COMMAND(name, summary, fn) \
  static ::fp8sim::cli::Registrar FP8SIM_CONCAT(fp8sim_cmd_, __LINE__)(name, summary, fn)
// A command that runs under an MPI launcher, its work split among the ranks (docs/scale-out.md).
#define FP8SIM_DISTRIBUTED_COMMAND(name, summary, fn) \
  static ::fp8sim::cli::Registrar FP8SIM_CONCAT(fp8sim_cmd_, __LINE__)(name, summary, fn, true)
