#pragma once
// The version of every kernel family the speed replay times (gpu/speed/replay.cpp). A calibration
// records with each measurement the version of its kernel; `fp8sim speed` warns, one line per
// family, where the calibration's version is not this build's, so a time measured before a kernel
// changed is never taken for the current kernel's without saying so.
//
// Bump a family's constant in the same change as its kernels (what they compute, how they move
// data, their launch configuration or the library call they make); each kernel's source names its
// constant. Attention and the fused fp32 AdamW baseline are PyTorch's (scripts/torch_layer_time.py)
// and have no fp8sim version: their measurements carry PyTorch's version instead.
#include <string_view>
#include <vector>

#include "sim/speed/plan.hpp"

namespace fp8sim::speed {

inline constexpr int kGemmKernelVersion = 1;           // gpu/gemm/cublaslt.cpp, gpu/speed/replay.cpp's prepare_gemm
inline constexpr int kRmsNormKernelVersion = 1;        // gpu/speed/kernels.cu: rmsnorm_fwd_*, rmsnorm_bwd_*
inline constexpr int kSiluMulKernelVersion = 1;        // gpu/speed/kernels.cu: silu_mul_fwd_*, silu_mul_bwd_*
inline constexpr int kAddKernelVersion = 1;            // gpu/speed/kernels.cu: add_bf16, add_bf16_g16, add_bf16_gmax
inline constexpr int kRopeKernelVersion = 1;           // gpu/speed/kernels.cu: rope
inline constexpr int kCastTransposeKernelVersion = 1;  // gpu/speed/kernels.cu: cast_transpose
inline constexpr int kTransposeKernelVersion = 1;      // gpu/speed/kernels.cu: transpose_fp8
inline constexpr int kQuantizeG16KernelVersion = 1;    // gpu/speed/kernels.cu: quantize_g16
inline constexpr int kGroupMaxKernelVersion = 1;       // gpu/speed/kernels.cu: group_max
inline constexpr int kReduceMaxKernelVersion = 1;      // gpu/speed/kernels.cu: reduce_max_bf16, reduce_max_f32
inline constexpr int kAmaxKernelVersion = 1;           // gpu/speed/kernels.cu: amax_bf16
inline constexpr int kCrossEntropyKernelVersion = 1;   // gpu/speed/kernels.cu: cross_entropy
inline constexpr int kEmbeddingKernelVersion = 1;      // gpu/speed/kernels.cu: embedding_fwd, embedding_bwd
inline constexpr int kAdamwFp8DeKernelVersion = 2;     // gpu/optim/adamw.cu: the fused FP8 AdamW with DE
inline constexpr int kAdamwLowpKernelVersion = 5;      // gpu/optim/adamw.cu: the elementwise-state AdamW (fp8lm)
inline constexpr int kAdamwBf16mKernelVersion = 3;     // gpu/optim/adamw.cu: the elementwise-state AdamW, BF16 moments
inline constexpr int kBlockQuantizeKernelVersion = 1;  // gpu/speed/kernels.cu: block_quantize
inline constexpr int kDequantizeKernelVersion = 1;     // gpu/speed/kernels.cu: dequantize_mx

struct KernelFamily {
  const char* name;  // "rmsnorm", "gemm", ...
  int version;
  const char* code;  // where its kernels live
};

// Every family, in a fixed order.
const std::vector<KernelFamily>& kernel_families();

// The family a kernel of the replay belongs to; nullptr for PyTorch's (attention, the fp32 AdamW
// baseline). Error for a kind and variant no family covers.
const KernelFamily* kernel_family(Kind kind, std::string_view variant);

}  // namespace fp8sim::speed
