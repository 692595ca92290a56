#pragma once
// FP8SIM_HD marks numerics shared bit-for-bit between the CPU reference and the CUDA kernels.
// Code under it uses only correctly rounded IEEE operations (+ - * / sqrt) and integer bit
// manipulation; both sides compile with contraction off (-ffp-contract=off, --fmad=false).
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP8SIM_HD __host__ __device__ __forceinline__
#else
#define FP8SIM_HD inline
#endif

namespace fp8sim {

FP8SIM_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

FP8SIM_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// Correctly rounded fp32 operations that the compiler may not fuse or reorder. On the host
// -ffp-contract=off already guarantees this; on the device the intrinsics make it explicit.
FP8SIM_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FP8SIM_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FP8SIM_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FP8SIM_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}

// Fused multiply-add a*b+c with ONE rounding (IEEE 754 fusedMultiplyAdd, correctly rounded on
// both sides). Use it only where the emulated code itself fuses (e.g. PyTorch's CPU lerp and
// addcmul kernels use vectorized fmadd); never let the compiler decide.
FP8SIM_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

FP8SIM_HD bool is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// x / s and x * s (s a finite scale) where a NaN x comes out as x quieted, its sign and payload
// kept: what x86's SSE arithmetic gives, while CUDA's gives its one NaN 0x7FFFFFFF. The 16-bit
// formats carry a NaN's payload (f32_to_bf16_rne / f32_to_fp16_rne keep its top bits), so their
// scaled encode and decode use these, on the CPU and the GPU alike.
FP8SIM_HD float div_rn_nan_kept(float x, float s) {
  const uint32_t u = f32_bits(x);
  return is_nan_bits(u) ? f32_from_bits(u | 0x00400000u) : div_rn(x, s);
}
FP8SIM_HD float mul_rn_nan_kept(float x, float s) {
  const uint32_t u = f32_bits(x);
  return is_nan_bits(u) ? f32_from_bits(u | 0x00400000u) : mul_rn(x, s);
}
FP8SIM_HD bool is_finite_bits(uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }

}  // namespace fp8sim
