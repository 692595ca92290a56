#pragma once
// The speed replay's own kernels: the non-linear ops of a Llama layer (RMSNorm, SiLU*Mul,
// residual add, RoPE) in BF16 and in COAT's FP8 forms (E4M3 with 1x16 bf16 group scales, BF16
// outputs with per-group maxima for Group Scaling), the cast / transpose / group-max / reduce
// kernels the FP8 recipes add, the loss and embedding kernels, and fills for realistic inputs.
// Numerics of the group scales: sim/speed/group16.hpp (shared with the CPU references in
// sim/speed/nonlinear_ref.hpp).
//
// Conventions: bf16 values are uint16_t bit patterns, FP8 codes uint8_t; tensors are row-major
// and come from cudaMalloc (256-byte aligned). A 1x16 group tensor of (rows, cols) has codes
// (rows, cols) and scales (rows, cols/16). Every launcher only enqueues on `stream` and returns
// false (launching nothing) when the shape is outside what the kernel supports (see each
// *_supported); the caller turns that into an error. No fmt, no exceptions other than CUDA
// failures (FP8SIM_CUDA_CHECK): this header is included from .cu files.
#include <cuda_runtime.h>

#include <cstdint>

#include "sim/quant/scale.hpp"

namespace fp8sim::gpu::speed {

// ---- RMSNorm (rows = tokens, cols = hidden; cols % 16 == 0, cols <= 16384) ----------------------
bool rmsnorm_supported(int64_t cols);
// y = x * rstd * w (bf16), rstd = 1/sqrt(mean(x^2) + eps) per row.
bool rmsnorm_fwd_bf16(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t rows, int64_t cols,
                      float eps, cudaStream_t stream);
// COAT: x given as E4M3 codes + 1x16 scales; y bf16 and row_amax[r] = max |y[r, :]| (stage 1).
bool rmsnorm_fwd_g16(const uint8_t* xq, const uint16_t* xs, const uint16_t* w, uint16_t* y, float* rstd,
                     float* row_amax, int64_t rows, int64_t cols, float eps, cudaStream_t stream);
// dx (bf16) and dw (fp32, cols): per-block partial sums in dw_partial (rmsnorm_bwd_partial_rows(rows)
// x cols floats), then a column reduction into dw.
int64_t rmsnorm_bwd_partial_rows(int64_t rows);
bool rmsnorm_bwd_bf16(const uint16_t* x, const uint16_t* w, const float* rstd, const uint16_t* dy, uint16_t* dx,
                      float* dw_partial, float* dw, int64_t rows, int64_t cols, cudaStream_t stream);
bool rmsnorm_bwd_g16(const uint8_t* xq, const uint16_t* xs, const uint16_t* w, const float* rstd, const uint16_t* dy,
                     uint16_t* dx, float* dw_partial, float* dw, int64_t rows, int64_t cols, cudaStream_t stream);

// ---- SiLU(gate) * up, elementwise over n elements (n % 16 == 0) -----------------------------------
bool silu_mul_fwd_bf16(const uint16_t* g, const uint16_t* u, uint16_t* m, int64_t n, cudaStream_t stream);
// COAT: gate and up as E4M3 1x16; writes SiLU(gate) as E4M3 1x16 (saved for backward), the
// product in bf16 and its per-group maxima (bf16, n/16).
bool silu_mul_fwd_g16(const uint8_t* gq, const uint16_t* gs, const uint8_t* uq, const uint16_t* us, uint8_t* silu_q,
                      uint16_t* silu_s, uint16_t* m, uint16_t* m_gmax, int64_t n, cudaStream_t stream);
bool silu_mul_bwd_bf16(const uint16_t* g, const uint16_t* u, const uint16_t* dm, uint16_t* dg, uint16_t* du, int64_t n,
                       cudaStream_t stream);
// COAT: gate and up as E4M3 1x16, dm bf16; dg and du bf16 with per-group maxima.
bool silu_mul_bwd_g16(const uint8_t* gq, const uint16_t* gs, const uint8_t* uq, const uint16_t* us, const uint16_t* dm,
                      uint16_t* dg, uint16_t* dg_gmax, uint16_t* du, uint16_t* du_gmax, int64_t n, cudaStream_t stream);

// ---- residual add (n % 16 == 0) --------------------------------------------------------------------
bool add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* c, int64_t n, cudaStream_t stream);
// c = a + b in bf16, and c again as E4M3 1x16 (COAT's forward residual: input of the next norm).
bool add_bf16_g16(const uint16_t* a, const uint16_t* b, uint16_t* c, uint8_t* cq, uint16_t* cs, int64_t n,
                  cudaStream_t stream);
// c = a + b in bf16 with per-group maxima (COAT's backward residual, before the E5M2 cast).
bool add_bf16_gmax(const uint16_t* a, const uint16_t* b, uint16_t* c, uint16_t* c_gmax, int64_t n, cudaStream_t stream);

// ---- quantization helpers ---------------------------------------------------------------------------
// x (bf16, n % 16 == 0) -> codes + 1x16 bf16 scales.
bool quantize_g16(const uint16_t* x, uint8_t* q, uint16_t* s, int64_t n, bool e5m2, cudaStream_t stream);
// Per-group maxima of |x| (bf16 rounded up), standalone stage 1.
bool group_max(const uint16_t* x, uint16_t* gmax, int64_t n, cudaStream_t stream);
// *out = max over n non-negative bf16 maxima / fp32 row maxima / |bf16 x| (zeroes *out first).
bool reduce_max_bf16(const uint16_t* v, int64_t n, float* out, cudaStream_t stream);
bool reduce_max_f32(const float* v, int64_t n, float* out, cudaStream_t stream);
bool amax_bf16(const uint16_t* x, int64_t n, float* out, cudaStream_t stream);

// Per-tensor cast of x (rows, cols) bf16 with inv = fp8_max / *amax_in: `out` (rows, cols) and/or
// `out_t` (cols, rows) the transpose; `amax_out` (may be null) receives max(|x|, *amax_out)
// (delayed scaling records the amax of what it casts). rows % 16 == 0 when out_t is given,
// cols % 16 == 0 always.
bool cast_transpose_supported(int64_t rows, int64_t cols, bool transposed);
bool cast_transpose(const uint16_t* x, int64_t rows, int64_t cols, const float* amax_in, bool e5m2, uint8_t* out,
                    uint8_t* out_t, float* amax_out, cudaStream_t stream);
// FP8 codes (rows, cols) -> (cols, rows). rows % 16 == 0, cols % 16 == 0.
bool transpose_fp8(const uint8_t* x, int64_t rows, int64_t cols, uint8_t* xt, cudaStream_t stream);

// ---- block-scaled quantization (DeepSeek-V3's 1x128 / 128x128, MXFP8's 1x32 / 32x1) --------------------
// One pass over x (rows, cols) bf16 writes two E4M3 copies with the numerics of sim/quant (scales by
// scale.hpp's plain_scales from `sc`, elements by apply_scale and the RNE encoder): a row-wise copy
// q_row (rows, cols) with 1xG groups along the row (scales (rows, cols/G)), and a column-wise copy
// with Gx1 groups along the column, either in place, q_col (rows, cols) with scales (rows/G, cols)
// (MXFP8), or transposed, q_col (cols, rows) with scales (cols, rows/G) (DeepSeek-V3: the wgrad's
// operand). block2d: one scale per 128x128 block for both copies instead (DeepSeek's weights): row
// scales (rows/128, cols/128), transposed column scales (cols/128, rows/128). Scales are fp32, or
// E8M0 bytes (the biased exponent) with e8m0. Version: kBlockQuantizeKernelVersion.
struct BlockQuantizeParams {
  int64_t rows = 0, cols = 0;
  int group = 128;              // G: 32 or 128 (128 with block2d)
  bool block2d = false;         // 128x128 blocks
  bool col_transposed = false;  // the column-wise copy written transposed
  bool e8m0 = false;            // E8M0 scale bytes instead of fp32
  bool saturate = true;         // the encoder's saturation (the spec's)
  ScaleConsts sc{};             // the spec's scale constants (scale_consts)
};
// rows and cols multiples of G, rows x cols < 2^62; G = 32 with block2d or col_transposed is not one.
bool block_quantize_supported(const BlockQuantizeParams& p);
bool block_quantize(const uint16_t* x, const BlockQuantizeParams& p, uint8_t* q_row, void* s_row, uint8_t* q_col,
                    void* s_col, cudaStream_t stream);
// MXFP8 E4M3 codes (rows, cols) with E8M0 scales of 1x32 groups (scales (rows, cols/32)) or, columnwise,
// 32x1 groups (scales (rows/32, cols)) -> bf16: RNE of decode(q) * 2^(s - 127), sim/quant's dequantize
// rounded to bf16. rows % 32 == 0 (columnwise), cols % 32 == 0. Version: kDequantizeKernelVersion.
bool dequantize_mx(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t cols, bool columnwise, uint16_t* y,
                   cudaStream_t stream);

// ---- RoPE (rotate-half convention), in place on q (tokens, heads, d) and k (tokens, kv_heads, d) --
// cos_sin: (seq, d/2) pairs {cos, sin}; token t is at position t % seq. d % 16 == 0.
bool rope(uint16_t* q, uint16_t* k, const float2* cos_sin, int64_t tokens, int64_t heads, int64_t kv_heads,
          int64_t head_dim, int64_t seq, bool backward, cudaStream_t stream);
// The table for rope(): cos_sin[p][i] = {cos, sin}(p * theta^(-2i/d)).
void rope_table(float2* cos_sin, int64_t seq, int64_t head_dim, float theta, cudaStream_t stream);

// ---- loss and embedding -------------------------------------------------------------------------------
// Softmax cross-entropy of logits (tokens, vocab) bf16 against labels: loss per row (fp32) and
// dlogits = (softmax - onehot) / tokens (bf16). vocab % 8 == 0.
bool cross_entropy(const uint16_t* logits, const int32_t* labels, float* loss, uint16_t* dlogits, int64_t tokens,
                   int64_t vocab, cudaStream_t stream);
// out[t, :] = table[ids[t], :]; dtable = 0 then dtable[ids[t], :] += dy[t, :] (fp32). hidden % 8 == 0.
bool embedding_fwd(const int32_t* ids, const uint16_t* table, uint16_t* out, int64_t tokens, int64_t hidden,
                   cudaStream_t stream);
bool embedding_bwd(const int32_t* ids, const uint16_t* dy, float* dtable, int64_t tokens, int64_t hidden, int64_t vocab,
                   cudaStream_t stream);

// ---- fills (inputs for timing and tests: never time on zeros) --------------------------------------------
void fill_bf16_normal(uint16_t* x, int64_t n, uint64_t seed, float stddev, cudaStream_t stream);
void fill_fp8_codes(uint8_t* x, int64_t n, uint64_t seed, bool e5m2, cudaStream_t stream);  // finite codes
void fill_bf16_scales(uint16_t* x, int64_t n, uint64_t seed, cudaStream_t stream);          // positive, 2^-12..2^-4
void fill_f32_uniform(float* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
void fill_i32_below(int32_t* x, int64_t n, uint64_t seed, int32_t bound, cudaStream_t stream);

// The device's multiprocessor count (cached); grids are sized from it.
int sm_count();

}  // namespace fp8sim::gpu::speed
