#pragma once
// The run sizes every command accepts (micro-batch, sequence length, GPUs, gradient
// accumulation), checked in one place: memory, speed and report call validate_run_sizes() with
// what the user gave, so the same number is accepted or refused by every command with the same
// one-line UsageError, before any arithmetic can overflow.
#include <cstdint>
#include <optional>
#include <string>

namespace fp8sim {

inline constexpr int64_t kMaxBatch = int64_t{1} << 20;      // sequences per micro-batch per GPU
inline constexpr int64_t kMaxSeq = int64_t{1} << 24;        // tokens per sequence
inline constexpr int64_t kMaxGpus = 1'000'000;              // data-parallel GPUs
inline constexpr int64_t kMaxGradAccum = int64_t{1} << 20;  // micro-batches per optimizer step
inline constexpr double kMaxTokensPerGpu = 1e10;            // batch x seq of one micro-batch

struct RunSizes {
  std::optional<int64_t> batch{}, seq{}, gpus{}, grad_accum{};
  std::string batch_option{"--batch"};  // how the messages name the batch ("--batch coat=...")
};

// Throws UsageError naming the option when a size is below 1 or above its limit.
void validate_run_sizes(const RunSizes& s);

// Parses a positive size given as text ("--batch 2"): digits only, no sign, no overflow.
// Throws UsageError naming `option`.
int64_t parse_size(const std::string& option, const std::string& text);

}  // namespace fp8sim
