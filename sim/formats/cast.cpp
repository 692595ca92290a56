#include "sim/formats/cast.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"
// Last: its functions are compiled for AVX2 (see the header).
#include "sim/formats/avx2_fp8.hpp"

#pragma GCC push_options
#pragma GCC target("avx2")

namespace fp8sim::avx2 {

// fp32 or bf16 -> 8-bit codes, 32 elements per iteration (four lane encodes, one 32-byte store,
// streaming where the output is aligned): the compiler's vectorisation of the scalar loop packs and
// stores 8 codes at a time. Returns how many elements it converted (n rounded down to a multiple
// of 32); the caller does the rest.
template <class T, class VL>
size_t cast_rne(const VL& ld, uint8_t* out, size_t n, bool sat) {
  const size_t n32 = n - n % 32;
  for (size_t i = 0; i < n32; i += 32) {
    const int64_t j = static_cast<int64_t>(i);
    store32(out + i, pack_codes32(encode_rne<T>(ld.load8(j), sat), encode_rne<T>(ld.load8(j + 8), sat),
                                  encode_rne<T>(ld.load8(j + 16), sat), encode_rne<T>(ld.load8(j + 24), sat)));
  }
  _mm_sfence();
  return n32;
}

}  // namespace fp8sim::avx2

#pragma GCC pop_options

namespace fp8sim {

namespace {

std::atomic<bool>& cast_simd_flag() {
  static std::atomic<bool> on{avx2::env_allows_simd()};
  return on;
}

}  // namespace

void set_cast_simd(bool enabled) { cast_simd_flag().store(enabled); }
bool cast_simd() { return cast_simd_flag().load() && avx2::available(); }

namespace {

constexpr size_t kChunk = 1 << 16;  // elements per OpenMP work item

// The hot loops. target_clones builds an AVX2 copy beside the baseline one and picks at load
// time; both are compiled from the same branch-free scalar code, so the bits cannot differ.
template <class T>
__attribute__((target_clones("avx2", "default"))) void rne_loop(const float* in, uint8_t* out, size_t n, bool sat) {
  for (size_t i = 0; i < n; ++i) out[i] = encode_fp8_rne<T>(in[i], sat);
}

template <class T>
__attribute__((target_clones("avx2", "default"))) void rne_loop_bf16(const uint16_t* in, uint8_t* out, size_t n,
                                                                     bool sat) {
  for (size_t i = 0; i < n; ++i) out[i] = encode_fp8_rne<T>(bf16_to_f32(in[i]), sat);
}

template <class T>
__attribute__((target_clones("avx2", "default"))) void decode_loop(const uint8_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = decode_fp8<T>(in[i]);
}

template <class Load>
void run_chunks(size_t n, int threads, Load&& body) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  const int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * kChunk;
    body(begin, std::min(n, begin + kChunk));
  }
}

template <class T, class Widen>
void sr_range(const float* in_f32, const uint16_t* in_16, Widen widen, uint8_t* out, size_t b, size_t e,
              const CastOptions& o) {
  const bool sat = o.saturation == Saturation::Finite;
  for (size_t i = b; i < e; ++i) {
    const float x = in_f32 ? in_f32[i] : widen(in_16[i]);
    out[i] = encode_fp8_sr<T>(x, sat, philox_word(o.seed, o.index_offset + i));
  }
}

template <class T>
void cast_any(const float* f32, const uint16_t* b16, const uint16_t* h16, uint8_t* out, size_t n,
              const CastOptions& o) {
  const bool sat = o.saturation == Saturation::Finite;
  run_chunks(n, o.threads, [&](size_t b, size_t e) {
    if (o.rounding == Rounding::Stochastic) {
      if (f32) sr_range<T>(f32, nullptr, bf16_to_f32, out, b, e, o);
      else if (b16) sr_range<T>(nullptr, b16, bf16_to_f32, out, b, e, o);
      else sr_range<T>(nullptr, h16, fp16_to_f32, out, b, e, o);
    } else if (f32) {
      size_t done = 0;
      if constexpr (T::kBits == 8)
        if (cast_simd()) done = avx2::cast_rne<T>(avx2::VLoadF32{f32 + b}, out + b, e - b, sat);
      rne_loop<T>(f32 + b + done, out + b + done, e - b - done, sat);
    } else if (b16) {
      size_t done = 0;
      if constexpr (T::kBits == 8)
        if (cast_simd()) done = avx2::cast_rne<T>(avx2::VLoadBF16{b16 + b}, out + b, e - b, sat);
      rne_loop_bf16<T>(b16 + b + done, out + b + done, e - b - done, sat);
    } else {
      for (size_t i = b; i < e; ++i) out[i] = encode_fp8_rne<T>(fp16_to_f32(h16[i]), sat);
    }
  });
}

// Calls body(T{}) with the traits of format f (one of is_small_float's).
template <class Body>
void with_traits(Format f, Body&& body) {
  switch (f) {
    case Format::E4M3:
      return body(E4M3Traits{});
    case Format::E5M2:
      return body(E5M2Traits{});
    case Format::E2M1:
      return body(E2M1Traits{});
    case Format::E2M3:
      return body(E2M3Traits{});
    case Format::E3M2:
      return body(E3M2Traits{});
    default:
      throw UsageError(fmt::format("{} is not a cast format", format_name(f)));
  }
}

void dispatch(const float* f32, const uint16_t* b16, const uint16_t* h16, uint8_t* out, size_t n,
              const CastOptions& o) {
  validate_cast_options(o);
  with_traits(o.format, [&](auto t) { cast_any<decltype(t)>(f32, b16, h16, out, n, o); });
}

}  // namespace

void validate_cast_options(const CastOptions& o) {
  if (!is_small_float(o.format))
    throw UsageError(fmt::format("cast target must be e4m3, e5m2, e2m1, e2m3 or e3m2, not {}", format_name(o.format)));
  if (is_fp4_fp6(o.format) && o.saturation == Saturation::None)
    throw UsageError(fmt::format("{} has no Inf or NaN, so its conversions always saturate (drop --no-saturate)",
                                 format_name(o.format)));
}

void cast_f32_to_fp8(const float* in, uint8_t* out, size_t n, const CastOptions& o) {
  dispatch(in, nullptr, nullptr, out, n, o);
}
void cast_bf16_to_fp8(const uint16_t* in, uint8_t* out, size_t n, const CastOptions& o) {
  dispatch(nullptr, in, nullptr, out, n, o);
}
void cast_fp16_to_fp8(const uint16_t* in, uint8_t* out, size_t n, const CastOptions& o) {
  dispatch(nullptr, nullptr, in, out, n, o);
}

void cast_fp8_to_f32(const uint8_t* in, float* out, size_t n, Format format, int threads) {
  if (!is_small_float(format))
    throw UsageError(fmt::format("decode source must be e4m3, e5m2, e2m1, e2m3 or e3m2, not {}", format_name(format)));
  with_traits(format, [&](auto t) {
    run_chunks(n, threads, [&](size_t b, size_t e) { decode_loop<decltype(t)>(in + b, out + b, e - b); });
  });
}

void cast_f32_to_fp8_scalar(const float* in, uint8_t* out, size_t n, const CastOptions& o) {
  validate_cast_options(o);
  const bool sat = o.saturation == Saturation::Finite;
  with_traits(o.format, [&](auto t) {
    using T = decltype(t);
    for (size_t i = 0; i < n; ++i)
      out[i] = o.rounding == Rounding::Nearest ? encode_fp8_rne<T>(in[i], sat)
                                               : encode_fp8_sr<T>(in[i], sat, philox_word(o.seed, o.index_offset + i));
  });
}

}  // namespace fp8sim
