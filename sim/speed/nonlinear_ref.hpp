#pragma once
// Plain scalar CPU references for the speed replay's kernels (gpu/speed/kernels.hpp), used by
// tests/test_speed_gpu.cpp. Same formulas and, where the kernel is exact (casts, group
// quantization, adds, RoPE with a given table, transposes), the same fp32 operation order, so
// those compare bit for bit; norms, SiLU and the loss use expf/rsqrt and compare within a bf16
// ulp. bf16 tensors are uint16_t bit patterns; FP8 codes uint8_t; row-major.
#include <cstdint>
#include <vector>

namespace fp8sim::speed::ref {

using Bf16 = std::vector<uint16_t>;

float bf16f(uint16_t h);    // bf16 -> fp32 (exact)
uint16_t to_bf16(float x);  // fp32 -> bf16, round to nearest even

// 1x16 groups of n values (n % 16 == 0) -> codes + bf16 scales (sim/speed/group16.hpp).
void quantize_g16(const float* x, int64_t n, bool e5m2, uint8_t* codes, uint16_t* scales);
std::vector<float> dequantize_g16(const uint8_t* codes, const uint16_t* scales, int64_t n, bool e5m2);

// RMSNorm forward over rows of x (fp32 values of the stored inputs): y bf16, rstd, row max |y|.
void rmsnorm_fwd(const std::vector<float>& x, const Bf16& w, int64_t rows, int64_t cols, float eps, Bf16& y,
                 std::vector<float>& rstd, std::vector<float>& row_amax);
void rmsnorm_bwd(const std::vector<float>& x, const Bf16& w, const std::vector<float>& rstd, const Bf16& dy,
                 int64_t rows, int64_t cols, Bf16& dx, std::vector<float>& dw);

// SiLU(g) * u and its gradients on fp32 values; outputs rounded to bf16. gmax: bf16 rounded-up
// group maxima of the rounded outputs (16 per group).
void silu_mul_fwd(const std::vector<float>& g, const std::vector<float>& u, Bf16& m, std::vector<float>& silu);
void silu_mul_bwd(const std::vector<float>& g, const std::vector<float>& u, const Bf16& dm, Bf16& dg, Bf16& du);
std::vector<uint16_t> group_max(const Bf16& x);

// Per-tensor cast: codes of x * (fp8_max / amax), plus its transpose (cols, rows).
void cast(const Bf16& x, int64_t rows, int64_t cols, float amax, bool e5m2, std::vector<uint8_t>& out,
          std::vector<uint8_t>& out_t);

// RoPE on (tokens, heads, d) with a (seq, d/2) table of {cos, sin}; backward rotates by -angle.
void rope(Bf16& x, int64_t tokens, int64_t heads, int64_t d, int64_t seq, const std::vector<float>& cos_sin,
          bool backward);

// Softmax cross-entropy per row: loss and dlogits = (softmax - onehot) / tokens (bf16).
void cross_entropy(const Bf16& logits, const std::vector<int32_t>& labels, int64_t tokens, int64_t vocab,
                   std::vector<float>& loss, Bf16& dlogits);

}  // namespace fp8sim::speed::ref
