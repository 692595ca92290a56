#include "sim/common/io.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sim/common/check.hpp"

namespace fp8sim {

namespace fs = std::filesystem;

std::string read_text_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  FP8SIM_REQUIRE(in.good(), "cannot open '{}': {}", p.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
fs::path temp_beside(const fs::path& target) {
  return target.parent_path() / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid());
}
}  // namespace

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)), tmp_(temp_beside(target_)) {
  if (target_.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target_.parent_path(), ec);
  }
  f_ = std::fopen(tmp_.c_str(), "wb");
  FP8SIM_REQUIRE(f_ != nullptr, "cannot write '{}': {}", target_.string(), std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) {
    std::fclose(f_);
    std::error_code ec;
    fs::remove(tmp_, ec);
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  FP8SIM_REQUIRE(std::fwrite(data, 1, bytes, f_) == bytes, "write to '{}' failed: {}", target_.string(),
                 std::strerror(errno));
}

void AtomicFile::commit() {
  FP8SIM_REQUIRE(std::fflush(f_) == 0, "write to '{}' failed: {}", target_.string(), std::strerror(errno));
  const int rc = std::fclose(f_);
  f_ = nullptr;
  FP8SIM_REQUIRE(rc == 0, "write to '{}' failed: {}", target_.string(), std::strerror(errno));
  std::error_code ec;
  fs::rename(tmp_, target_, ec);
  if (ec) {
    fs::remove(tmp_, ec);
    throw Error(fmt::format("cannot move output into place at '{}': {}", target_.string(), ec.message()));
  }
}

void write_file_atomic(const fs::path& p, std::string_view data) {
  AtomicFile f(p);
  f.write(data.data(), data.size());
  f.commit();
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Progress::Progress(std::string label, double total) : label_(std::move(label)), total_(total), start_(now_seconds()) {
  const char* env = std::getenv("FP8SIM_PROGRESS");
  enabled_ = env ? std::strcmp(env, "0") != 0 : ::isatty(STDERR_FILENO) != 0;
}

Progress::~Progress() { finish(); }

void Progress::update(double done) {
  if (!enabled_ || finished_) return;
  const double t = now_seconds() - start_;
  if (t < 1.0 || t - last_draw_ < 0.1) return;  // quiet for short work, at most 10 redraws/s
  last_draw_ = t;
  const double frac = total_ > 0 ? std::min(1.0, done / total_) : 0.0;
  const int width = 30;
  const int fill = static_cast<int>(frac * width);
  const double eta = frac > 0 ? t * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r%-24s [%.*s%*s] %5.1f%%  %5.1fs elapsed  eta %5.1fs", label_.c_str(), fill,
               "##############################", width - fill, "", 100 * frac, t, eta);
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && last_draw_ >= 0) {
    std::fprintf(stderr, "\r%-24s done in %.1fs%*s\n", label_.c_str(), now_seconds() - start_, 40, "");
    std::fflush(stderr);
  }
}

}  // namespace fp8sim
