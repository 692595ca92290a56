#pragma once
// The random Hadamard transform (RHT) that NVFP4 training applies to the operands of the
// weight-gradient GEMM before quantizing them (NVIDIA, "Pretraining Large Language Models with
// NVFP4", arXiv 2509.25149; TransformerEngine's NVFP4BlockScaling recipe).
//
// A row of the tensor's 2-D view is cut into blocks of n consecutive elements (n = 4, 16, 64 or
// 256; the spec key rht=n) and each block v becomes
//     y = H_n (D v) / sqrt(n)
// with H_n the Sylvester Hadamard matrix, H[i][j] = (-1)^popcount(i & j), and D = diag(+-1) the
// sign vector. H_n H_n = n I, so the inverse is v = D (H_n y) / sqrt(n). Restricting n to powers
// of four makes 1/sqrt(n) a power of two, so the transform is orthonormal with no rounded
// constant. The signs: TransformerEngine's fixed weight-gradient vector for n = 16 unless the
// spec names rht_seed=S; otherwise sign i is bit 0 of philox_word(S, i) (1 = negate).
//
// Arithmetic order (the CPU's, and the one a GPU kernel must follow to give the same bits): the
// signs are applied first (exact), then log2(n) butterfly stages in place, stage h = 1, 2, 4, ...:
// for each pair (j, j + h) with j's bit h clear, (a, b) -> (a + b, a - b), each a correctly
// rounded fp32 add; before every second stage (h = 2, 8, 32, 128) every element is multiplied by
// 1/2 (exact unless the result is subnormal). No partial sum then exceeds the largest magnitude
// the transform can produce, and in the normal range the bits equal one multiplication by
// 1/sqrt(n) at the end. The
// inverse runs the same stages on y, then the signs. A NaN or an infinity in a block makes every
// element of that block NaN or infinite: the transform mixes all of them. TransformerEngine
// computes the product as a BF16 tensor-core matrix multiply with fp32 accumulation, whose
// summation order differs: its values agree with these to fp32 rounding, not bit for bit.
#include <cstdint>

#include "sim/common/hd.hpp"
#include "sim/formats/philox.hpp"

namespace fp8sim {

inline constexpr int kRhtMaxBlock = 256;

// The sign vector of one block: bit i of word i / 64 set = negate element i.
struct RhtSigns {
  uint64_t words[kRhtMaxBlock / 64] = {};
  FP8SIM_HD bool negate(int i) const { return (words[i >> 6] >> (i & 63)) & 1u; }
};

// TransformerEngine's fixed sign vector for 16-element blocks, as a mask (bit i = element i is
// negated): +1 +1 +1 -1 +1 -1 -1 -1 -1 -1 -1 +1 -1 +1 -1 -1.
inline constexpr uint64_t kRhtTeSigns16 = 0xD7E8;

inline RhtSigns rht_signs(int n, bool seeded, uint64_t seed) {
  RhtSigns s;
  if (!seeded && n == 16) {
    s.words[0] = kRhtTeSigns16;
    return s;
  }
  for (int i = 0; i < n; ++i)
    if (philox_word(seed, static_cast<uint64_t>(i)) & 1u) s.words[i >> 6] |= uint64_t{1} << (i & 63);
  return s;
}

// H v / sqrt(n), in place: the butterfly stages with a halving before every second one.
FP8SIM_HD void rht_butterfly(float* v, int n) {
  int stage = 0;
  for (int h = 1; h < n; h <<= 1, ++stage) {
    if (stage % 2 == 1)
      for (int i = 0; i < n; ++i) v[i] = mul_rn(v[i], 0.5f);
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = add_rn(a, b);
        v[j + h] = add_rn(a, -b);
      }
  }
}

// y = H (D v) / sqrt(n), in place.
FP8SIM_HD void rht_forward(float* v, int n, const RhtSigns& s) {
  for (int i = 0; i < n; ++i)
    if (s.negate(i)) v[i] = -v[i];
  rht_butterfly(v, n);
}

// v = D (H y) / sqrt(n), in place.
FP8SIM_HD void rht_inverse(float* v, int n, const RhtSigns& s) {
  rht_butterfly(v, n);
  for (int i = 0; i < n; ++i)
    if (s.negate(i)) v[i] = -v[i];
}

}  // namespace fp8sim
