#pragma once
// PTX div.full.f32 and rcp.approx.f32 as NVIDIA Hopper (sm_90: H100, H200) computes them, bit for
// bit: Triton lowers fp32 `/` and tl.fdiv (ieee_rounding=False) to div.full.f32, so the peers'
// Triton quantizers (COAT's, DeepSeek-V3's) divide this way, not with the IEEE division.
//
// ptxas compiles div.full.f32 a / b (sm_90a SASS) to a range fix-up, the hardware reciprocal
// (MUFU.RCP) and one round-to-nearest product:
//   if |b| > 2^126:  a = RN(a / 4),     b = b / 4
//   if |b| < 2^-126: a = RN(a * 2^24),  b = b * 2^24
//   q = RN(a * rcp(b))
// rcp(b) of a normal b = 1.m * 2^e is T[m] * 2^-e, where T[m] is RN(1/1.m) plus -1, 0 or +1 unit
// in the last place, read off the hardware for all 2^23 significands (scripts/device/rcp_probe.cu
// writes the table; sim/formats/rcp_sm90.bin.gz holds it, one int8 per m). On an H200 the model
// equals the hardware's div.full.f32 on 1.6e9 operand pairs (random bit patterns, bf16 dividends,
// quotients near FP8 midpoints, divisors near 448, subnormal and huge divisors, subnormal
// dividends): 0 differ. rcp(0) = +-Inf, rcp(+-Inf) = +-0, rcp(NaN) = NaN.
//
// On the device these are the instructions themselves; on the host, the model above.
#include <cstdint>

#include "sim/common/hd.hpp"

namespace fp8sim {

// Host model of MUFU.RCP for a normal, zero, infinite or NaN b with |b| <= 2^126 (div_full's
// fix-up guarantees it; other b are outside what the hardware table was read for).
float rcp_sm90_host(float b);

FP8SIM_HD float rcp_sm90(float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(b));
  return r;
#else
  return rcp_sm90_host(b);
#endif
}

// The host's div_full(a, b) as two products whose factors depend on b alone:
// div_full(a, b) = mul_rn(mul_rn(a, fa), r). fa is the range fix-up's scaling of a (0.25 for
// 2^126 < |b| <= Inf, 2^24 for |b| < 2^-126, else 1: a product by 1 is exact) and r the reciprocal
// of b so scaled. For loops that divide many a by one b.
inline void div_full_factors(float b, float& fa, float& r) {
  const uint32_t ab = f32_bits(b) & 0x7FFFFFFFu;
  fa = 1.0f;
  if (ab > 0x7E800000u && ab <= 0x7F800000u) {  // 2^126 < |b| <= Inf
    fa = 0.25f;
    b = mul_rn(b, 0.25f);
  }
  if (ab < 0x00800000u) {  // |b| < 2^-126 (zero and subnormals)
    fa = 0x1p24f;
    b = mul_rn(b, 0x1p24f);
  }
  r = rcp_sm90_host(b);
}

FP8SIM_HD float div_full(float a, float b) {
#if defined(__CUDA_ARCH__)
  float q;
  asm("div.full.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(b));
  return q;
#else
  float fa, r;
  div_full_factors(b, fa, r);
  return mul_rn(fa == 1.0f ? a : mul_rn(a, fa), r);
#endif
}

}  // namespace fp8sim
