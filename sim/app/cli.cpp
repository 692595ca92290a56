#include "sim/app/cli.hpp"
#include "sim/common/io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <sstream>

#include "sim/common/check.hpp"
#include "sim/common/output.hpp"
#include "sim/recipe/recipe.hpp"

namespace fp8sim::cli {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

namespace {
bool g_quiet = false;
}  // namespace

bool quiet() { return g_quiet; }

std::string recipe_names_for_help(std::vector<std::string> (*names)()) {
  try {
    return recipe::join(names());
  } catch (const Error&) {
    return "see `fp8sim recipes`";
  }
}

void note(const std::string& line) {
  if (!g_quiet) fp8sim::eprint("{}\n", line);
}

std::vector<std::string> comma_list(const std::string& option, const std::string& s) {
  if (s.empty()) throw UsageError(fmt::format("{} is empty", option));
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (out.back().empty()) throw UsageError(fmt::format("{} '{}' has an empty entry", option, s));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

void check_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw UsageError(fmt::format("--threads must be 0 (every core) to {}, not {}", kMaxThreads, threads));
}

uint64_t parse_u64(const std::string& option, const std::string& text) {
  uint64_t v = 0;
  bool ok = !text.empty();
  for (char c : text) {
    if (c < '0' || c > '9' || v > (UINT64_MAX - static_cast<uint64_t>(c - '0')) / 10) {
      ok = false;
      break;
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok) throw UsageError(fmt::format("{} must be an integer from 0 to 2^64-1, not '{}'", option, text));
  return v;
}

bool parse(const std::string& cmd, const std::vector<std::string>& args, po::options_description& opts,
           const po::positional_options_description& pos, po::variables_map& vm, const std::string& usage,
           const std::string& description) {
  opts.add_options()("help,h", "show this help and exit");
  opts.add_options()("quiet,q", "print no tables or other text on stdout (errors and warnings still go to stderr)");
  try {
    po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::ostringstream ss;
      ss << opts;
      fmt::print("usage: fp8sim {} {}\n\n{}\n\n{}", cmd, usage, description, ss.str());
      return false;
    }
    po::notify(vm);
    if (vm.count("quiet")) {
      g_quiet = true;
      silence_stdout();
    }
  } catch (const po::error& e) {
    throw UsageError(fmt::format("{} (see 'fp8sim {} --help')", e.what(), cmd));
  }
  return true;
}

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                 std::FILE* out) {
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string& cell = c < r.size() ? r[c] : std::string();
      if (c) s += "  ";
      s += c == 0 ? fmt::format("{:<{}}", cell, w[c]) : fmt::format("{:>{}}", cell, w[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print(out, "{}\n", s);
  };
  line(header);
  size_t total = 0;
  for (size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
  fmt::print(out, "{}\n", std::string(total, '-'));
  for (const auto& r : rows) line(r);
}

}  // namespace fp8sim::cli
