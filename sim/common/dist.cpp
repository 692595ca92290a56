#include "sim/common/dist.hpp"

#include <fmt/format.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <new>
#include <numeric>
#include <sstream>

namespace fp8sim::dist {

namespace {

class LocalCounter final : public Counter {
 public:
  uint64_t fetch_add(uint64_t n) override {
    const uint64_t old = value_;
    value_ += n;
    return old;
  }

 private:
  uint64_t value_ = 0;
};

class SingleProcess final : public Comm {
 public:
  std::unique_ptr<Counter> make_counter() override { return std::make_unique<LocalCounter>(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
  std::string name() const override { return "one process"; }
};

std::unique_ptr<Comm>& installed() {
  static std::unique_ptr<Comm> c = std::make_unique<SingleProcess>();
  return c;
}

bool g_failed = false;  // a failure has ended the job's collective part: no more steps
Outcome g_failure;      // that failure

// One collective step: each rank's status (0 ok, else its exit code) and bytes (its payload, or
// its error message), on every rank.
struct Status {
  int code = 0;
  std::string bytes;
};
std::vector<Status> step(int code, const std::string& bytes) {
  std::string mine(1, static_cast<char>(std::clamp(code, 0, 255)));
  mine += bytes;
  std::vector<std::string> all = installed()->all_gather(mine);
  std::vector<Status> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    FP8SIM_CHECK(!all[r].empty(), "rank {} sent no status", r);
    out[r].code = static_cast<unsigned char>(all[r][0]);
    out[r].bytes = all[r].substr(1);
  }
  return out;
}

// The lowest failing rank's outcome, its message naming the rank when the job has several.
Outcome first_failure(const std::vector<Status>& all) {
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].code == 0) continue;
    g_failed = true;
    g_failure = {all[r].code, r == 0 || all.size() == 1 ? all[r].bytes : fmt::format("rank {}: {}", r, all[r].bytes)};
    return g_failure;
  }
  return {};
}

}  // namespace

void set_comm(std::unique_ptr<Comm> comm) {
  installed() = comm ? std::move(comm) : std::make_unique<SingleProcess>();
  g_failed = false;
  g_failure = {};
}
void reset_comm() { set_comm(nullptr); }

namespace {
double g_startup = 0;
}
double startup_seconds() { return g_startup; }
void set_startup_seconds(double s) { g_startup = s; }

double process_age_seconds() {
  // Field 22 of /proc/self/stat: the start time in clock ticks since boot (the fields before it
  // follow the command name, which may hold spaces: parse after its closing parenthesis).
  std::ifstream f("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  int i = 3;
  while (i <= 22 && rest >> field) ++i;
  if (i != 23) return 0;  // fewer fields than the kernel writes
  const long ticks = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  const double started = std::strtod(field.c_str(), nullptr) / static_cast<double>(ticks);
  return std::max(0.0, static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec) - started);
}
int rank() { return installed()->rank(); }
int size() { return installed()->size(); }
std::string comm_name() { return installed()->name(); }
std::unique_ptr<Counter> make_counter() {
  // A step of the failure protocol first: a rank that has already failed is waiting in finish(),
  // and must meet the others in a status exchange, not in the counter's own collective setup.
  check_all_ok();
  return installed()->make_counter();
}

std::vector<int> partition(const std::vector<uint64_t>& cost, int ranks) {
  FP8SIM_CHECK(ranks >= 1, "partition over {} ranks", ranks);
  std::vector<size_t> order(cost.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<uint64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(cost.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equal loads
    owner[i] = static_cast<int>(least - load.begin());
    *least += std::max<uint64_t>(cost[i], 1);
  }
  return owner;
}

std::vector<std::string> exchange(const std::function<std::string()>& work) {
  if (size() == 1) return {work()};  // nothing to exchange: an error propagates as itself
  if (g_failed) throw JobFailure(g_failure.code, g_failure.message);
  int code = 0;
  std::string bytes;
  try {
    bytes = work();
  } catch (...) {
    const Outcome f = current_failure();
    code = f.code;
    bytes = f.message;
  }
  std::vector<Status> all = step(code, bytes);
  if (const Outcome f = first_failure(all); f.code != 0) throw JobFailure(f.code, f.message);
  std::vector<std::string> out(all.size());
  for (size_t r = 0; r < all.size(); ++r) out[r] = std::move(all[r].bytes);
  return out;
}

void check_all_ok() {
  if (size() == 1) return;
  if (g_failed) throw JobFailure(g_failure.code, g_failure.message);
  if (const Outcome f = first_failure(step(0, std::string())); f.code != 0) throw JobFailure(f.code, f.message);
}

Outcome current_failure() {
  try {
    throw;
  } catch (const JobFailure& e) {
    return {e.code(), e.what()};
  } catch (const UsageError& e) {
    return {2, e.what()};
  } catch (const std::bad_alloc&) {
    return {1, "out of memory"};
  } catch (const std::exception& e) {
    return {1, e.what()};
  } catch (...) {
    return {1, "an unexpected internal error (not a standard exception)"};
  }
}

Outcome finish(int code, const std::string& message) {
  if (size() == 1) return {code, message};
  if (g_failed) return g_failure;
  const Outcome f = first_failure(step(code, message));
  g_failed = true;  // no further collectives
  return f;
}

}  // namespace fp8sim::dist
