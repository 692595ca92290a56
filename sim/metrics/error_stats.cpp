#include "sim/metrics/error_stats.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "sim/formats/avx2_fp8.hpp"
#include "sim/formats/fp8.hpp"

namespace fp8sim {

namespace {
constexpr size_t kChunk = static_cast<size_t>(kErrorChunk);
constexpr double kInf = std::numeric_limits<double>::infinity();

// One sequential pass in double over a chunk (error_sums_add, as the GPU adds them).
ErrorSums accumulate(const float* x, const float* y, size_t n) {
  ErrorSums e;
  for (size_t i = 0; i < n; ++i) error_sums_add(e, x[i], y[i]);
  return e;
}

std::atomic<bool> g_simd{avx2::env_allows_simd() && avx2::available()};

// The work units over n elements: groups of four whole chunks (one AVX2 call each, when the SIMD
// sums are on), then the other chunks one by one. Each unit's sums depend on its chunks alone.
struct ChunkUnits {
  size_t chunks, groups, units;
  explicit ChunkUnits(size_t n)
      : chunks((n + kChunk - 1) / kChunk),
        groups(g_simd.load() ? n / kChunk / 4 : 0),
        units(groups + (chunks - 4 * groups)) {}
  bool four(size_t u) const { return u < groups; }
  size_t first_chunk(size_t u) const { return u < groups ? 4 * u : 4 * groups + (u - groups); }
};

// A 4-lane float mask as a 4-lane 64-bit one (-1 / 0 per lane).
__attribute__((target("avx2"), always_inline)) inline __m256i wide(__m128 mask) {
  return _mm256_cvtepi32_epi64(_mm_castps_si128(mask));
}

// Four whole chunks (x, x + kChunk, x + 2 kChunk, x + 3 kChunk) at once, chunk k in lane k of
// each AVX2 vector: every lane performs error_sums_add's operations on its chunk's elements in
// element order (the products of two floats are exact in double; the sums are the same additions
// in the same order), so each lane's ErrorSums are those of accumulate(). 4 x 4 blocks are
// transposed so that one vector holds the same element of the four chunks. A term error_sums_add
// leaves out is +0.0 here too (masked), and the maxima are of non-negative values (any order). The
// relative error's division runs only for lanes where it can raise the maximum: RN(a / b) > M
// requires a > M b, and a >= RN(RN(M b) (1 - 2^-52)) holds whenever a > M b.
__attribute__((target("avx2"))) void accumulate4_avx2(const float* x, const float* y, ErrorSums* out) {
  const __m128 abs_f = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  const __m128 inf_f = _mm_set1_ps(std::numeric_limits<float>::infinity());
  const __m128 zero_f = _mm_setzero_ps();
  const __m256d abs_d = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFFFFFFFFFFFFFF));
  const __m256d inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
  const __m256d below_one = _mm256_set1_pd(1.0 - 0x1p-52);
  const __m256d zero = _mm256_setzero_pd();
  __m256d s_ref = zero, s_approx = zero, s_err = zero, s_dot = zero, m_abs = zero, m_rel = zero;
  __m256i c_count = _mm256_setzero_si256(), c_nonzero = c_count, c_nonfinite = c_count, c_nonfinite_out = c_count,
          c_underflow = c_count;
  for (size_t i = 0; i < kChunk; i += 4) {
    __m128 x0 = _mm_loadu_ps(x + i), x1 = _mm_loadu_ps(x + kChunk + i), x2 = _mm_loadu_ps(x + 2 * kChunk + i),
           x3 = _mm_loadu_ps(x + 3 * kChunk + i);
    __m128 y0 = _mm_loadu_ps(y + i), y1 = _mm_loadu_ps(y + kChunk + i), y2 = _mm_loadu_ps(y + 2 * kChunk + i),
           y3 = _mm_loadu_ps(y + 3 * kChunk + i);
    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
    _MM_TRANSPOSE4_PS(y0, y1, y2, y3);
    for (const auto& [xf, yf] : {std::pair{x0, y0}, std::pair{x1, y1}, std::pair{x2, y2}, std::pair{x3, y3}}) {
      const __m128 x_fin = _mm_cmplt_ps(_mm_and_ps(xf, abs_f), inf_f);  // false for NaN
      const __m128 y_fin = _mm_cmplt_ps(_mm_and_ps(yf, abs_f), inf_f);
      const __m128 ok = _mm_and_ps(x_fin, y_fin);
      const __m128 bad_y = _mm_andnot_ps(y_fin, x_fin);
      const __m128 x_nz = _mm_and_ps(x_fin, _mm_cmpneq_ps(xf, zero_f));
      const __m128 under = _mm_and_ps(_mm_and_ps(ok, x_nz), _mm_cmpeq_ps(yf, zero_f));
      const __m256i w_x_fin = wide(x_fin), w_ok = wide(ok), w_bad_y = wide(bad_y), w_x_nz = wide(x_nz);
      c_count = _mm256_sub_epi64(c_count, w_x_fin);
      c_nonfinite = _mm256_add_epi64(c_nonfinite, _mm256_add_epi64(w_x_fin, _mm256_set1_epi64x(1)));
      c_nonzero = _mm256_sub_epi64(c_nonzero, w_x_nz);
      c_nonfinite_out = _mm256_sub_epi64(c_nonfinite_out, w_bad_y);
      c_underflow = _mm256_sub_epi64(c_underflow, wide(under));
      const __m256d m_ok = _mm256_castsi256_pd(w_ok);
      const __m256d m_bad_y = _mm256_castsi256_pd(w_bad_y), m_x_nz = _mm256_castsi256_pd(w_x_nz);
      const __m256d xd = _mm256_cvtps_pd(xf), yd = _mm256_cvtps_pd(yf);
      const __m256d d = _mm256_sub_pd(xd, yd);
      const __m256d ad = _mm256_and_pd(d, abs_d);
      const __m256d bad_inf = _mm256_and_pd(m_bad_y, inf);
      s_ref = _mm256_add_pd(s_ref, _mm256_and_pd(m_ok, _mm256_mul_pd(xd, xd)));
      s_approx = _mm256_add_pd(s_approx, _mm256_and_pd(m_ok, _mm256_mul_pd(yd, yd)));
      s_err = _mm256_add_pd(s_err, _mm256_or_pd(_mm256_and_pd(m_ok, _mm256_mul_pd(d, d)), bad_inf));
      s_dot = _mm256_add_pd(s_dot, _mm256_and_pd(m_ok, _mm256_mul_pd(xd, yd)));
      m_abs = _mm256_max_pd(m_abs, _mm256_or_pd(_mm256_and_pd(m_ok, ad), bad_inf));
      const __m256d ax = _mm256_and_pd(xd, abs_d);
      const __m256d bound = _mm256_mul_pd(_mm256_mul_pd(m_rel, ax), below_one);
      const __m256d need = _mm256_and_pd(_mm256_and_pd(m_ok, m_x_nz), _mm256_cmp_pd(ad, bound, _CMP_GE_OQ));
      if (_mm256_movemask_pd(need)) m_rel = _mm256_max_pd(m_rel, _mm256_and_pd(need, _mm256_div_pd(ad, ax)));
      m_rel = _mm256_max_pd(m_rel, _mm256_and_pd(m_x_nz, bad_inf));
    }
  }
  alignas(32) double v[6][4];
  alignas(32) int64_t c[5][4];
  for (auto [dst, src] : {std::pair{v[0], s_ref}, std::pair{v[1], s_approx}, std::pair{v[2], s_err},
                          std::pair{v[3], s_dot}, std::pair{v[4], m_abs}, std::pair{v[5], m_rel}})
    _mm256_store_pd(dst, src);
  for (auto [dst, src] : {std::pair{c[0], c_count}, std::pair{c[1], c_nonzero}, std::pair{c[2], c_nonfinite},
                          std::pair{c[3], c_nonfinite_out}, std::pair{c[4], c_underflow}})
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst), src);
  for (int k = 0; k < 4; ++k) {
    ErrorSums& e = out[k];
    e.count = c[0][k];
    e.nonzero = c[1][k];
    e.nonfinite = c[2][k];
    e.nonfinite_out = c[3][k];
    e.underflow = c[4][k];
    e.sum_sq_ref = v[0][k];
    e.sum_sq_approx = v[1][k];
    e.sum_sq_err = v[2][k];
    e.sum_dot = v[3][k];
    e.max_abs_err = v[4][k];
    e.max_rel_err = v[5][k];
  }
}
float stored_value(const void* values, InputDtype type, size_t i) {
  switch (type) {
    case InputDtype::F32:
      return static_cast<const float*>(values)[i];
    case InputDtype::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(values)[i]);
    case InputDtype::FP16:
      return fp16_to_f32(static_cast<const uint16_t*>(values)[i]);
  }
  return 0.0f;
}

// Elements [b, e) compared with themselves, in order, as error_sums_add(x, x) adds them: the sums
// of x^2, y^2 and x y are one sum; the error sum and the maxima stay +0.0.
ErrorSums self_chunk(const void* values, InputDtype type, size_t b, size_t e) {
  ErrorSums s;
  for (size_t i = b; i < e; ++i) {
    const float x = stored_value(values, type, i);
    if (!is_finite_bits(f32_bits(x))) {
      ++s.nonfinite;
      continue;
    }
    ++s.count;
    const double xv = x;
    if (xv != 0.0) ++s.nonzero;
    s.sum_sq_ref += xv * xv;
  }
  s.sum_sq_approx = s.sum_dot = s.sum_sq_ref;
  return s;
}

// Elements i..i+3 of chunk k (chunk k at base + k kChunk elements), widened exactly.
template <InputDtype kType>
__attribute__((target("avx2"), always_inline)) inline __m128 load4(const void* base, size_t k, size_t i) {
  if constexpr (kType == InputDtype::F32) {
    return _mm_loadu_ps(static_cast<const float*>(base) + k * kChunk + i);
  } else if constexpr (kType == InputDtype::BF16) {
    const auto* p = static_cast<const uint16_t*>(base) + k * kChunk + i;
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));  // the bits << 16
  } else {
    const auto* p = static_cast<const uint16_t*>(base) + k * kChunk + i;
    return _mm_setr_ps(fp16_to_f32(p[0]), fp16_to_f32(p[1]), fp16_to_f32(p[2]), fp16_to_f32(p[3]));
  }
}

// Four whole chunks at once, chunk k in lane k, each lane adding its chunk's elements in order
// (self_chunk's operations; the non-finite lanes add +0.0, as there).
template <InputDtype kType>
__attribute__((target("avx2"))) void self4_avx2(const void* base, ErrorSums* out) {
  const __m128 abs_f = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  const __m128 inf_f = _mm_set1_ps(std::numeric_limits<float>::infinity());
  const __m128 zero_f = _mm_setzero_ps();
  __m256d sum = _mm256_setzero_pd();
  __m256i c_count = _mm256_setzero_si256(), c_nonzero = c_count;
  for (size_t i = 0; i < kChunk; i += 4) {
    __m128 x0 = load4<kType>(base, 0, i), x1 = load4<kType>(base, 1, i), x2 = load4<kType>(base, 2, i),
           x3 = load4<kType>(base, 3, i);
    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
    for (const __m128 xf : {x0, x1, x2, x3}) {
      const __m128 fin = _mm_cmplt_ps(_mm_and_ps(xf, abs_f), inf_f);  // false for NaN
      const __m128 nz = _mm_and_ps(fin, _mm_cmpneq_ps(xf, zero_f));
      const __m256i w_fin = wide(fin);
      c_count = _mm256_sub_epi64(c_count, w_fin);
      c_nonzero = _mm256_sub_epi64(c_nonzero, wide(nz));
      const __m256d xd = _mm256_cvtps_pd(xf);
      sum = _mm256_add_pd(sum, _mm256_and_pd(_mm256_castsi256_pd(w_fin), _mm256_mul_pd(xd, xd)));
    }
  }
  alignas(32) double v[4];
  alignas(32) int64_t c[2][4];
  _mm256_store_pd(v, sum);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c[0]), c_count);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c[1]), c_nonzero);
  for (size_t k = 0; k < 4; ++k) {
    out[k] = ErrorSums{};
    out[k].count = c[0][k];
    out[k].nonzero = c[1][k];
    out[k].nonfinite = static_cast<int64_t>(kChunk) - c[0][k];
    out[k].sum_sq_ref = out[k].sum_sq_approx = out[k].sum_dot = v[k];
  }
}

}  // namespace

double ErrorStats::mse() const { return count ? sum_sq_err / static_cast<double>(count) : 0.0; }

double ErrorStats::nmse() const {
  if (sum_sq_err == 0.0) return 0.0;
  if (sum_sq_ref == 0.0) return kInf;
  return std::sqrt(sum_sq_err / sum_sq_ref);
}

double ErrorStats::snr_db() const {
  if (sum_sq_err == 0.0) return kInf;
  if (sum_sq_ref == 0.0) return -kInf;
  return 10.0 * std::log10(sum_sq_ref / sum_sq_err);
}

double ErrorStats::cosine() const {
  if (sum_sq_ref == 0.0 && sum_sq_approx == 0.0) return 1.0;
  if (sum_sq_ref == 0.0 || sum_sq_approx == 0.0) return 0.0;
  return sum_dot / std::sqrt(sum_sq_ref * sum_sq_approx);
}

double ErrorStats::underflow_frac() const {
  return nonzero ? static_cast<double>(underflow) / static_cast<double>(nonzero) : 0.0;
}

double ErrorStats::saturated_frac() const {
  return scaled_count ? static_cast<double>(saturated) / static_cast<double>(scaled_count) : 0.0;
}

Json ErrorStats::to_json() const {
  Json j = Json::object();
  j["mse"] = mse();
  j["nmse"] = nmse();
  j["snr_db"] = snr_db();
  j["max_abs_err"] = max_abs_err;
  j["max_rel_err"] = max_rel_err;
  j["cosine"] = cosine();
  j["underflow_frac"] = underflow_frac();
  j["saturated_frac"] = saturated_frac();
  j["count"] = count;
  j["nonzero"] = nonzero;
  j["nonfinite"] = nonfinite;
  j["nonfinite_out"] = nonfinite_out;
  j["underflow"] = underflow;
  j["saturated"] = saturated;
  return j;
}

void ErrorStats::merge(const ErrorStats& o) {
  count += o.count;
  nonzero += o.nonzero;
  nonfinite += o.nonfinite;
  nonfinite_out += o.nonfinite_out;
  underflow += o.underflow;
  saturated += o.saturated;
  scaled_count += o.scaled_count;
  sum_sq_ref += o.sum_sq_ref;
  sum_sq_approx += o.sum_sq_approx;
  sum_sq_err += o.sum_sq_err;
  sum_dot += o.sum_dot;
  max_abs_err = std::max(max_abs_err, o.max_abs_err);
  max_rel_err = std::max(max_rel_err, o.max_rel_err);
}

void ErrorStats::add_sums(const ErrorSums& e) {
  ErrorStats p;
  p.count = e.count;
  p.nonzero = e.nonzero;
  p.nonfinite = e.nonfinite;
  p.nonfinite_out = e.nonfinite_out;
  p.underflow = e.underflow;
  p.sum_sq_ref = e.sum_sq_ref;
  p.sum_sq_approx = e.sum_sq_approx;
  p.sum_sq_err = e.sum_sq_err;
  p.sum_dot = e.sum_dot;
  p.max_abs_err = e.max_abs_err;
  p.max_rel_err = e.max_rel_err;
  merge(p);
}

void ErrorAccumulator::add_chunk_sums(const ErrorSums* sums, size_t chunks) {
  for (size_t c = 0; c < chunks; ++c) stats_.add_sums(sums[c]);
}

void set_error_sums_simd(bool enabled) { g_simd.store(enabled && avx2::available()); }
bool error_sums_simd() { return g_simd.load(); }

void ErrorAccumulator::add(const float* x, const float* y, size_t n) {
  const ChunkUnits cu(n);
  std::vector<ErrorSums> part(cu.chunks);
  const int nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (cu.units > 1)
  for (size_t u = 0; u < cu.units; ++u) {
    const size_t c = cu.first_chunk(u), b = c * kChunk;
    if (cu.four(u)) accumulate4_avx2(x + b, y + b, &part[c]);
    else part[c] = accumulate(x + b, y + b, std::min(n, b + kChunk) - b);
  }
  add_chunk_sums(part.data(), cu.chunks);  // fixed order: independent of the thread count
}

void ErrorAccumulator::add_filled(size_t n, const std::function<void(size_t, size_t, float*, float*)>& fill) {
  const ChunkUnits cu(n);
  std::vector<ErrorSums> part(cu.chunks);
  const int nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#pragma omp parallel num_threads(nt) if (cu.units > 1)
  {
    const size_t m = std::min(n, kFillElements);
    const std::unique_ptr<float[]> x(new float[m]), y(new float[m]);  // written by fill before read
#pragma omp for schedule(static)
    for (size_t u = 0; u < cu.units; ++u) {
      const size_t c = cu.first_chunk(u), b = c * kChunk, e = std::min(n, b + (cu.four(u) ? 4 : 1) * kChunk);
      fill(b, e, x.get(), y.get());
      if (cu.four(u)) accumulate4_avx2(x.get(), y.get(), &part[c]);
      else part[c] = accumulate(x.get(), y.get(), e - b);
    }
  }
  add_chunk_sums(part.data(), cu.chunks);  // fixed order: independent of the thread count
}

void ErrorAccumulator::add_scaled(const float* scaled, size_t n, double fmax) {
  int64_t sat = 0, cnt = 0;
  const int nt = threads_ > 0 ? threads_ : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) reduction(+ : sat, cnt) if (n > kChunk)
  for (size_t i = 0; i < n; ++i) {
    const double v = scaled[i];
    if (std::isnan(v)) continue;
    ++cnt;
    sat += std::fabs(v) > fmax ? 1 : 0;
  }
  stats_.saturated += sat;
  stats_.scaled_count += cnt;
}

ErrorStats compute_error_stats(const float* x, const float* y, size_t n, int threads) {
  ErrorAccumulator acc(threads);
  acc.add(x, y, n);
  return acc.stats();
}

ErrorStats self_error_stats(const void* values, InputDtype type, size_t n, int threads) {
  const ChunkUnits cu(n);
  std::vector<ErrorSums> part(cu.chunks);
  const size_t width = type == InputDtype::F32 ? sizeof(float) : sizeof(uint16_t);
  const int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (cu.units > 1)
  for (size_t u = 0; u < cu.units; ++u) {
    const size_t c = cu.first_chunk(u), b = c * kChunk;
    if (cu.four(u)) {
      const void* base = static_cast<const char*>(values) + b * width;
      if (type == InputDtype::F32) self4_avx2<InputDtype::F32>(base, &part[c]);
      else if (type == InputDtype::BF16) self4_avx2<InputDtype::BF16>(base, &part[c]);
      else self4_avx2<InputDtype::FP16>(base, &part[c]);
    } else {
      part[c] = self_chunk(values, type, b, std::min(n, b + kChunk));
    }
  }
  ErrorAccumulator acc(threads);
  acc.add_chunk_sums(part.data(), cu.chunks);  // the chunks merged in order, as add() merges them
  return acc.stats();
}

}  // namespace fp8sim
