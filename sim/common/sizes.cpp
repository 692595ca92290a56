#include "sim/common/sizes.hpp"

#include <fmt/format.h>

#include "sim/common/check.hpp"

namespace fp8sim {

namespace {
void check(const std::string& option, const std::optional<int64_t>& v, int64_t max, const char* what) {
  if (!v) return;
  if (*v < 1) throw UsageError(fmt::format("{} must be >= 1, not {}", option, *v));
  if (*v > max)
    throw UsageError(fmt::format("{} {} is more {} than fp8sim models (at most {})", option, *v, what, max));
}
}  // namespace

void validate_run_sizes(const RunSizes& s) {
  check(s.batch_option, s.batch, kMaxBatch, "sequences per micro-batch");
  check("--seq", s.seq, kMaxSeq, "tokens per sequence");
  check("--gpus", s.gpus, kMaxGpus, "GPUs");
  check("--grad-accum", s.grad_accum, kMaxGradAccum, "micro-batches per step");
  if (s.batch && s.seq && static_cast<double>(*s.batch) * static_cast<double>(*s.seq) > kMaxTokensPerGpu)
    throw UsageError(fmt::format("{} x --seq = {} x {} tokens per GPU is more than fp8sim models (at most {:.0e})",
                                 s.batch_option, *s.batch, *s.seq, kMaxTokensPerGpu));
}

int64_t parse_size(const std::string& option, const std::string& text) {
  int64_t v = 0;
  bool ok = !text.empty() && text.size() <= 18;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) {
    for (char c : text) v = v * 10 + (c - '0');
  } else if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    throw UsageError(fmt::format("{} {} is too large", option, text));
  }
  if (!ok || v < 1) throw UsageError(fmt::format("{} must be a positive integer, not '{}'", option, text));
  return v;
}

}  // namespace fp8sim
