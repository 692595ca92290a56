#pragma once
// The GPU half of `fp8sim speed`: runs each distinct kernel of a replay plan on device 0 and
// times it with CUDA events (warm-up launches first; before every timed repetition a memset of
// a buffer larger than L2 evicts the inputs, so no kernel is timed out of a warm cache; median,
// min and max of the repetitions). GEMMs go through the project's cuBLASLt wrapper
// (gpu/gemm/cublaslt.hpp, heuristic top-1 algorithm as PyTorch and TransformerEngine use);
// everything else through gpu/speed/kernels.hpp. Attention and the fp32 AdamW baseline are
// PyTorch's (scripts/torch_layer_time.py), not replayed here.
#include <cstddef>
#include <functional>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim::gpu::speed {

struct ReplaySettings {
  int warmup = 3;                          // untimed launches per kernel
  int reps = 10;                           // timed repetitions (x3 for kernels under 50 us)
  size_t flush_bytes = size_t{256} << 20;  // memset before each repetition: > the H200's 50 MB L2
};

// Times every distinct key of `ops` (Attention and Optimizer "adamw_fp32" excepted). A kernel that
// fails without poisoning the context is skipped with a note; a sticky CUDA error throws.
fp8sim::speed::Calibration measure_ops(const std::vector<fp8sim::speed::KernelOp>& ops, const ReplaySettings& settings,
                                       const std::function<void(double, double)>& progress);

// The device as JSON: name, SMs, compute capability, memory, L2, runtime/driver/cuBLASLt versions.
Json device_json();

}  // namespace fp8sim::gpu::speed
