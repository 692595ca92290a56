#include "sim/common/io.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "sim/common/check.hpp"
#include "sim/common/interrupt.hpp"

namespace fp8sim {

namespace fs = std::filesystem;

std::string read_text_file(const fs::path& p) { return read_input_file(p, kMaxTextFileBytes); }

void write_stderr(std::string_view text) noexcept {
  std::fflush(stdout);  // what the run printed comes before its message
  if (std::fwrite(text.data(), 1, text.size(), stderr) != text.size() || std::fflush(stderr) != 0)
    std::clearerr(stderr);
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
  check_interrupt();
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
