#pragma once
// A bit-exact model of Hopper's (sm_90) tensor-core inner product, D = A * B + C with fp32
// accumulation, for FP8 (E4M3 / E5M2, any pairing) and BF16 operands; docs/numerics.md
// ("Tensor-core accumulation") gives each feature with the test that shows it on the H200.
//
// One instruction step sums L products and C in one fused operation (the truncated fused
// dot-product-add of Xie et al., "MMA-Sim", arXiv 2511.10909):
//  1. every operand is split into an integer significand and an exponent (subnormals at the
//     format's minimum exponent); products are exact and keep the exponent ea + eb of their
//     factors (not renormalized: the product's significand lies in [0, 4));
//  2. e_max is the largest exponent among the nonzero products and C (a zero term counts as
//     2^-133);
//  3. each term is truncated (its magnitude rounded toward zero) to a multiple of 2^(e_max - F);
//  4. the truncated terms are added exactly;
//  5. the sum is rounded toward zero to P fraction bits (exponent clamped at fp32's -126, so
//     small results keep P bits below 2^-126), an exact zero is +0, and a magnitude of 2^128 or
//     more is Inf.
// Specials: a NaN operand, Inf x 0 or Inf - Inf gives the canonical NaN 0x7FFFFFFF; otherwise an
// Inf (E5M2, BF16 or C) passes with its sign.
// sm_90 parameters: FP8 L = 32, F = 13, P = 13 (each wgmma k32 step leaves 14 significant bits in
// the accumulator); BF16 L = 16, F = 25, P = 23. A GEMM main loop chains steps: C of step s + 1
// is D of step s.
#include <cstdint>

#include "sim/common/hd.hpp"
#include "sim/formats/fp8.hpp"

namespace fp8sim::gemm {

struct TcArith {
  int group = 32;      // L: products per fused step
  int frac_bits = 13;  // F: bits kept below the largest term's exponent
  int out_bits = 13;   // P: fraction bits of each step's result (round toward zero)
};
// Operand type codes: 0 = E4M3, 1 = E5M2, 2 = BF16 (the probes' codes).
FP8SIM_HD TcArith tc_arith_sm90(int a_type) { return a_type == 2 ? TcArith{16, 25, 23} : TcArith{32, 13, 13}; }

// An operand split for the fused sum. kind: 0 finite, 1 +-Inf, 2 NaN. value = sig * 2^(exp - mbits).
struct TcTerm {
  int32_t sig;  // unsigned significand (0 for zero)
  int32_t exp;  // exponent of the significand's unit bit (subnormals: the format's minimum)
  int32_t neg;
  int32_t kind;
};

FP8SIM_HD TcTerm tc_split(uint32_t code, int type) {
  // E4M3: 3 mantissa bits, bias 7, no Inf, NaN = S.1111.111; E5M2: 2 bits, bias 15, IEEE specials;
  // BF16: 7 bits, bias 127, IEEE specials.
  const int mb = type == 0 ? 3 : (type == 1 ? 2 : 7);
  const int eb = type == 0 ? 4 : (type == 1 ? 5 : 8);
  const int bias = (1 << (eb - 1)) - 1;
  const uint32_t sign = (code >> (eb + mb)) & 1u;
  const uint32_t e = (code >> mb) & ((1u << eb) - 1u);
  const uint32_t m = code & ((1u << mb) - 1u);
  TcTerm t{0, 1 - bias, static_cast<int32_t>(sign), 0};
  if (type == 0) {
    if (e == 15 && m == 7) t.kind = 2;
  } else if (e == (1u << eb) - 1u) {
    t.kind = m == 0 ? 1 : 2;
  }
  if (t.kind != 0) return t;
  if (e == 0) {
    t.sig = static_cast<int32_t>(m);
  } else {
    t.sig = static_cast<int32_t>(m | (1u << mb));
    t.exp = static_cast<int32_t>(e) - bias;
  }
  return t;
}

// The step's exact sum, sum * 2^unit, rounded toward zero to P fraction bits (exponent clamped at
// -126), +0 for zero, Inf from 2^128 up.
FP8SIM_HD float tc_round_step(const TcArith& t, int64_t sum, int unit) {
  if (sum == 0) return 0.0f;
  const uint32_t sign = sum < 0 ? 0x80000000u : 0u;
  uint64_t mag = static_cast<uint64_t>(sum < 0 ? -sum : sum);
#if defined(__CUDA_ARCH__)
  const int top = 63 - __clzll(static_cast<long long>(mag));  // leading bit of mag
#else
  const int top = 63 - __builtin_clzll(mag);
#endif
  const int e = unit + top;  // the result's exponent
  if (e >= 128) return f32_from_bits(sign | 0x7F800000u);
  const int lsb = (e < -126 ? -126 : e) - t.out_bits;  // round toward zero to P fraction bits
  int u = unit;
  if (lsb > u) {
    mag >>= (lsb - u);
    u = lsb;
  }
  // mag * 2^u is exact in fp32 (at most P + 1 <= 24 significant bits, u >= -149).
  if (e >= -126) {
    const int shift = 23 - (e - u);  // e - u = leading bit position of mag, <= 23
    const uint32_t frac = static_cast<uint32_t>(mag << shift) & 0x7FFFFFu;
    return f32_from_bits(sign | (static_cast<uint32_t>(e + 127) << 23) | frac);
  }
  return f32_from_bits(sign | static_cast<uint32_t>(mag << (u + 149)));
}

// One fused step: sum over i < n of x_i * y_i, plus c, for split operands of mantissa widths mbx
// and mby (3 E4M3, 2 E5M2, 7 BF16). x and y are read at x[i * xs], y[i * ys].
FP8SIM_HD float tc_fdpa_terms(const TcArith& t, const TcTerm* x, int xs, int mbx, const TcTerm* y, int ys, int mby,
                              int n, float c) {
  const uint32_t cu = f32_bits(c);
  const uint32_t ce = (cu >> 23) & 0xFFu, cm = cu & 0x7FFFFFu;
  bool nan = ce == 0xFF && cm != 0, pos_inf = ce == 0xFF && cm == 0 && !(cu >> 31),
       neg_inf = ce == 0xFF && cm == 0 && (cu >> 31);
  constexpr int kZeroExp = -133;
  int e_max = kZeroExp;
  // C: significand 24 bits, unit exponent ec - 23.
  const int64_t c_sig = ce == 0 ? cm : (cm | 0x800000u);
  const int c_exp = ce == 0 ? -126 : static_cast<int>(ce) - 127;
  if (ce != 0xFF && c_sig != 0) e_max = c_exp;
  for (int i = 0; i < n; ++i) {
    const TcTerm& a = x[i * xs];
    const TcTerm& b = y[i * ys];
    if ((a.kind | b.kind) == 0) {
      if (a.sig != 0 && b.sig != 0 && a.exp + b.exp > e_max) e_max = a.exp + b.exp;
    } else if (a.kind == 2 || b.kind == 2 || (a.kind == 0 && a.sig == 0) || (b.kind == 0 && b.sig == 0)) {
      nan = true;  // NaN operand, or Inf x 0
    } else if (a.neg ^ b.neg) {
      neg_inf = true;
    } else {
      pos_inf = true;
    }
  }
  if (nan || (pos_inf && neg_inf)) return f32_from_bits(0x7FFFFFFFu);
  if (pos_inf) return f32_from_bits(0x7F800000u);
  if (neg_inf) return f32_from_bits(0xFF800000u);

  // Sum in units of 2^(e_max - F): a term sig * 2^lsb moves by lsb - unit bits (truncating).
  const int unit = e_max - t.frac_bits;
  int64_t sum = 0;
  if (c_sig != 0) {
    const int sh = c_exp - 23 - unit;
    const int64_t v = sh >= 0 ? (c_sig << sh) : (-sh >= 63 ? 0 : (c_sig >> -sh));
    sum += (cu >> 31) ? -v : v;
  }
  for (int i = 0; i < n; ++i) {
    const TcTerm& a = x[i * xs];
    const TcTerm& b = y[i * ys];
    const int64_t p = static_cast<int64_t>(a.sig) * b.sig;
    if (p == 0) continue;
    const int sh = a.exp + b.exp - mbx - mby - unit;
    const int64_t v = sh >= 0 ? (p << sh) : (-sh >= 63 ? 0 : (p >> -sh));
    sum += (a.neg ^ b.neg) ? -v : v;
  }
  return tc_round_step(t, sum, unit);
}

FP8SIM_HD int tc_mantissa_bits(int type) { return type == 0 ? 3 : (type == 1 ? 2 : 7); }

// The same step on codes (types ta, tb), read at a[i * a_stride] and b[i * b_stride]; n <= 32.
template <class Code>
FP8SIM_HD float tc_fdpa(const TcArith& t, const Code* a, int a_stride, int ta, const Code* b, int b_stride, int tb,
                        int n, float c) {
  TcTerm x[32], y[32];
  for (int i = 0; i < n; ++i) {
    x[i] = tc_split(a[i * a_stride], ta);
    y[i] = tc_split(b[i * b_stride], tb);
  }
  return tc_fdpa_terms(t, x, 1, tc_mantissa_bits(ta), y, 1, tc_mantissa_bits(tb), n, c);
}

// mma.sync m16n8k32 with FP8 operands on sm_90, as measured (tests/test_gemm_tc_gpu.cpp): the
// compiler converts the operands to FP16 and issues two FP16 tensor-core steps (SASS HMMA.16816,
// the BF16 arithmetic above: L = 16, F = 25, P = 23), the K positions k % 4 < 2 first and then the
// others, chained from +0, and adds C at the end with an fp32 add (round to nearest even; a NaN
// result is the canonical 0x7FFFFFFF). a and b: the instruction's 32 codes of one output.
FP8SIM_HD float tc_mma_sync_fp8_sm90(const uint8_t* a, int ta, const uint8_t* b, int tb, float c) {
  const TcArith half{16, 25, 23};
  uint8_t a0[16], b0[16], a1[16], b1[16];
  for (int i = 0, n0 = 0, n1 = 0; i < 32; ++i) {
    if (i % 4 < 2) {
      a0[n0] = a[i];
      b0[n0++] = b[i];
    } else {
      a1[n1] = a[i];
      b1[n1++] = b[i];
    }
  }
  const float s = tc_fdpa(half, a1, 1, ta, b1, 1, tb, 16, tc_fdpa(half, a0, 1, ta, b0, 1, tb, 16, 0.0f));
  const float d = add_rn(c, s);
  return d != d ? f32_from_bits(0x7FFFFFFFu) : d;
}

// ---- cuBLASLt's schedule around the steps (tc_gemm.hpp; scaling codes: 0 none, 1 per tensor,
// 2 row-wise, 3 1x128 x 128x128, 4 1x128 x 1x128). Scale tables are row-major as GemmRequest holds
// them; k_blocks = ceil(K / 128).

// The dequantization scale of element (row, k) of X (is_w false) or W (true).
FP8SIM_HD float tc_operand_scale(const float* s, int scaling, bool is_w, int64_t row, int64_t k, int64_t k_blocks) {
  switch (scaling) {
    case 1:
      return s[0];
    case 2:
      return s[row];
    case 3:
      return is_w ? s[(row / 128) * k_blocks + k / 128] : s[row * k_blocks + k / 128];
    case 4:
      return s[row * k_blocks + k / 128];
    default:
      return 1.0f;
  }
}

// Adds the tensor cores' sum of the block starting at K index b0 to the fp32 accumulator of
// output (i, j): block scaling applies the block's scales here, the others add it (or start with it).
FP8SIM_HD float tc_promote(int scaling, float acc, float blk, const float* xs, const float* ws, int64_t i, int64_t j,
                           int64_t b0, int64_t k_blocks) {
  if (scaling == 3)
    return fma_rn(
        blk, mul_rn(tc_operand_scale(xs, 3, false, i, b0, k_blocks), tc_operand_scale(ws, 3, true, j, b0, k_blocks)),
        acc);
  if (scaling == 4)
    return fma_rn(mul_rn(blk, tc_operand_scale(xs, 4, false, i, b0, k_blocks)),
                  tc_operand_scale(ws, 4, true, j, b0, k_blocks), acc);
  return b0 == 0 ? blk : add_rn(acc, blk);
}

// The epilogue of output (i, j): per-tensor and row-wise scales, then the output rounding.
FP8SIM_HD float tc_epilogue(int scaling, float acc, const float* xs, const float* ws, int64_t i, int64_t j,
                            bool y_bf16) {
  if (scaling == 1) acc = mul_rn(acc, mul_rn(xs[0], ws[0]));
  if (scaling == 2) acc = mul_rn(mul_rn(acc, ws[j]), xs[i]);
  return y_bf16 ? bf16_to_f32(f32_to_bf16_rne(acc)) : acc;
}

// D (64, 8) = A (64, K) * B (K, 8) + C for one probe case (tc_cases.hpp layouts), K / L steps.
template <class Code>
FP8SIM_HD float tc_dot_chain(const TcArith& t, const Code* a_row, int ta, const Code* b_col, int tb, int64_t k,
                             float c) {
  for (int64_t k0 = 0; k0 < k; k0 += t.group) {
    const int n = static_cast<int>(k - k0 < t.group ? k - k0 : t.group);
    c = tc_fdpa(t, a_row + k0, 1, ta, b_col + k0, 1, tb, n, c);
  }
  return c;
}

}  // namespace fp8sim::gemm
