// The element loops rely on -fno-trapping-math (set for every C++ file in CMakeLists.txt, with
// -ffp-contract=off) to if-convert and vectorize; it changes no result bit.
#include "sim/quant/quantize.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/hadamard.hpp"
#include "sim/quant/scale.hpp"
// Last: its functions are compiled for AVX2 (see the header), nothing above is.
#include "sim/quant/avx2_kernels.hpp"

namespace fp8sim {

namespace {
std::atomic<bool>& simd_flag() {
  static std::atomic<bool> on{avx2::env_allows_simd()};
  return on;
}
std::atomic<bool>& avx512_flag() {
  static std::atomic<bool> on{avx2::env_allows("FP8SIM_NO_AVX512")};
  return on;
}
}  // namespace

void set_quant_simd(bool enabled) { simd_flag().store(enabled); }
bool quant_simd() { return simd_flag().load() && avx2::available(); }

void set_quant_avx512(bool enabled) { avx512_flag().store(enabled); }
bool quant_avx512() { return avx512_flag().load() && avx512::available(); }

// ---- shapes, geometry, accounting -----------------------------------------------------------------

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UsageError(fmt::format("negative dimension {} in shape", d));
    FP8SIM_REQUIRE(!__builtin_mul_overflow(n, d, &n), "shape has more than 2^63 elements");
  }
  return n;
}

GroupGeometry group_geometry(const QuantSpec& spec, std::span<const int64_t> shape) {
  GroupGeometry g;
  const int64_t numel = shape_numel(shape);
  g.cols = shape.empty() ? 1 : shape.back();
  g.rows = shape.size() <= 1 ? 1 : shape_numel(shape.first(shape.size() - 1));
  if (numel == 0) {
    g.rows = g.cols = 0;
    return g;  // no groups
  }
  switch (spec.granularity) {
    case Granularity::Tensor:
      g.group_rows = g.rows;
      g.group_cols = g.cols;
      break;
    case Granularity::Row:
      g.group_rows = 1;
      g.group_cols = g.cols;
      break;
    case Granularity::Col:
      g.group_rows = g.rows;
      g.group_cols = 1;
      break;
    case Granularity::Group:
      g.group_rows = 1;
      g.group_cols = spec.group_size;
      break;
    case Granularity::Block:
      g.group_rows = spec.block_rows;
      g.group_cols = spec.block_cols;
      break;
  }
  FP8SIM_REQUIRE(g.group_rows >= 1 && g.group_cols >= 1, "invalid group extent for spec {}", spec.to_string());
  g.grid_rows = (g.rows + g.group_rows - 1) / g.group_rows;
  g.grid_cols = (g.cols + g.group_cols - 1) / g.group_cols;
  return g;
}

QuantizedSize quantized_size(const QuantSpec& spec, std::span<const int64_t> shape) {
  spec.validate();
  const GroupGeometry g = group_geometry(spec, shape);
  QuantizedSize q;
  q.numel = shape_numel(shape);
  q.num_groups = spec.is_passthrough() ? 0 : g.num_groups();
  int64_t bits = 0;
  FP8SIM_REQUIRE(!__builtin_mul_overflow(q.numel, int64_t{spec.bits_per_code()}, &bits), "tensor too large");
  q.code_bytes = (bits + 7) / 8;
  const int scale_b = spec.metadata_bytes_per_group() - (spec.has_expand() ? 8 : 0);
  q.scale_bytes = q.num_groups * scale_b + (spec.scale == ScaleMode::E4M3 ? 4 : 0);
  q.expand_bytes = spec.has_expand() ? q.num_groups * 8 : 0;
  return q;
}

size_t QuantizedTensor::code_bytes() const { return (static_cast<size_t>(numel()) * spec.bits_per_code() + 7) / 8; }

size_t QuantizedTensor::metadata_bytes() const {
  if (spec.is_passthrough()) return 0;
  const int scale_b = spec.metadata_bytes_per_group() - (spec.has_expand() ? 8 : 0);
  return scales.size() * static_cast<size_t>(scale_b) + (expand_k.size() + expand_c.size()) * 4 +
         (spec.scale == ScaleMode::E4M3 ? 4 : 0);
}

std::vector<uint8_t> QuantizedTensor::stored_scale_bytes() const {
  std::vector<uint8_t> out;
  if (spec.is_passthrough()) return out;
  for (float s : scales) {
    if (spec.scale == ScaleMode::Bf16) {
      const uint16_t b = f32_to_bf16_rne(s);
      out.push_back(static_cast<uint8_t>(b));
      out.push_back(static_cast<uint8_t>(b >> 8));
    } else if (spec.scale == ScaleMode::E4M3) {
      // the group's E4M3 code: scales hold RN(e4m3 x tensor_scale), whose quotient by the tensor
      // scale is within an fp32 rounding of the E4M3 value, far from any E4M3 tie
      out.push_back(encode_fp8_rne<E4M3Traits>(div_rn(s, tensor_scale), true));
    } else if (spec.scale == ScaleMode::E8M0) {
      out.push_back(std::isnan(s) ? uint8_t{0xFF} : e8m0_from_exponent(floor_log2_f32(s)));
    } else {
      const uint32_t u = f32_bits(s);
      for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
    }
  }
  if (spec.scale == ScaleMode::E4M3) {  // then the fp32 tensor scale, little-endian
    const uint32_t u = f32_bits(tensor_scale);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  return out;
}

float saturation_bound(Format f) {
  switch (f) {
    case Format::E4M3:
      return 464.0f;  // 464 ties to 448 (even); above it overflows
    case Format::E5M2:
      return f32_from_bits(0x476FFFFFu);  // just below 61440, which ties up to 2^16
    case Format::FP16:
      return f32_from_bits(0x477FEFFFu);  // just below 65520, which ties up to 2^16
    case Format::BF16:
      return f32_from_bits(0x7F7F7FFFu);  // just below the tie with 2^128
    // The 4- and 6-bit maxima have an odd last mantissa bit, so the tie above them rounds up
    // (to the next binade) and saturates: the bound is just below the tie.
    case Format::E2M1:
      return f32_from_bits(0x40DFFFFFu);  // just below 7 (6 + half of its step 2)
    case Format::E2M3:
      return f32_from_bits(0x40F7FFFFu);  // just below 7.75 (7.5 + 0.25)
    case Format::E3M2:
      return f32_from_bits(0x41EFFFFFu);  // just below 30 (28 + 2)
    default:
      return static_cast<float>(format_info(f).max);
  }
}

ScaleConsts scale_consts(const QuantSpec& spec) {
  ScaleConsts c;
  c.fmax = spec.fmax();
  c.mode = spec.scale;
  c.eps = spec.eps;
  c.eps_add = spec.eps_add;
  c.amax_floor = spec.amax_floor;
  c.scale_div = spec.scale_div;
  c.apply = spec.apply;
  c.mx = spec.mx;
  c.elem_mbits = static_cast<uint8_t>(format_info(spec.format).mantissa_bits);
  return c;
}

namespace {

int resolve_threads(int t) { return t > 0 ? t : omp_get_max_threads(); }
// Below this many elements a parallel region costs more than it saves (and on a loaded machine
// spinning threads cost far more).
constexpr int64_t kParallelMin = int64_t{1} << 18;
int work_threads(int requested, int64_t numel) { return numel < kParallelMin ? 1 : resolve_threads(requested); }
// Groups narrower than this are handled element by element along the row (col, g1..g15, bRxC
// with small C) instead of one call per segment.
constexpr int64_t kNarrow = 16;

// Element loaders: every input is widened to fp32 exactly before anything else happens.
struct LoadF32 {
  const float* p;
  float operator()(int64_t i) const { return p[i]; }
};
struct LoadBF16 {
  const uint16_t* p;
  float operator()(int64_t i) const { return bf16_to_f32(p[i]); }
};
struct LoadFP16 {
  const uint16_t* p;
  float operator()(int64_t i) const { return fp16_to_f32(p[i]); }
};

// The AVX2 loader of the same data, where there is one (fp16 input keeps the scalar loops).
template <class Load>
struct VecLoad {
  static constexpr bool ok = false;
};
template <>
struct VecLoad<LoadF32> {
  static constexpr bool ok = true;
  static avx2::VLoadF32 make(const LoadF32& l) { return {l.p}; }
};
template <>
struct VecLoad<LoadBF16> {
  static constexpr bool ok = true;
  static avx2::VLoadBF16 make(const LoadBF16& l) { return {l.p}; }
};

// Work split: rows of the 2-D view in tasks that never straddle a band of group rows, so a task
// touches whole group segments. With one-row groups every task is a band; otherwise each band is
// cut into `nsub` row ranges whose partial statistics are merged in order.
struct TaskSplit {
  int64_t nsub = 1;
  int64_t tasks = 0;
  int64_t sub_rows = 0;
  void rows_of(const GroupGeometry& g, int64_t t, int64_t& r0, int64_t& r1) const {
    const int64_t band = t / nsub, sub = t % nsub;
    const int64_t b0 = band * g.group_rows, b1 = std::min(g.rows, b0 + g.group_rows);
    r0 = std::min(b1, b0 + sub * sub_rows);
    r1 = std::min(b1, r0 + sub_rows);
  }
};

TaskSplit make_split(const GroupGeometry& g, int threads) {
  TaskSplit s;
  if (g.num_groups() == 0) return s;
  const int64_t want = 4 * static_cast<int64_t>(threads);
  if (g.group_rows > 1 && g.grid_rows < want) {
    s.nsub = std::min<int64_t>(g.group_rows, (want + g.grid_rows - 1) / g.grid_rows);
  }
  s.sub_rows = (g.group_rows + s.nsub - 1) / s.nsub;
  s.tasks = g.grid_rows * s.nsub;
  return s;
}

// Per-group statistics over finite elements: max |x| and min nonzero |x| kept as fp32 BITS
// (for non-negative floats the bit patterns order like the values, and integer max/min
// vectorize without fast-math), the number of non-finite elements and whether any is +-Inf.
struct Stats {
  std::vector<uint32_t> amax;  // bits
  std::vector<uint32_t> amin;  // bits; 0x7F800000 when no finite nonzero element
  std::vector<int64_t> nonfinite;
  std::vector<uint8_t> has_inf;
  void resize(int64_t n) {
    amax.assign(n, 0u);
    amin.assign(n, 0x7F800000u);
    nonfinite.assign(n, 0);
    has_inf.assign(n, 0);
  }
};

template <class Load>
__attribute__((target_clones("avx2", "default"))) void segment_stats(const Load ld, int64_t base, int64_t n,
                                                                     uint32_t& amax, uint32_t& amin, int64_t& nonfinite,
                                                                     uint8_t& inf) {
  uint32_t m = amax, mn = amin;
  int64_t nf = 0;
  uint32_t anyinf = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = f32_bits(ld(base + i)) & 0x7FFFFFFFu;
    const bool fin = a < 0x7F800000u;
    const uint32_t fa = fin ? a : 0u;
    m = fa > m ? fa : m;
    const uint32_t nz = (fin && a != 0u) ? a : 0x7F800000u;
    mn = nz < mn ? nz : mn;
    nf += fin ? 0 : 1;
    anyinf |= a == 0x7F800000u ? 1u : 0u;
  }
  amax = m;
  amin = mn;
  nonfinite += nf;
  inf = static_cast<uint8_t>(inf | anyinf);
}

// segment_stats through the AVX2 loop when allowed (the n % 8 tail through the scalar one).
template <class Load>
void stats_segment(const Load& ld, int64_t base, int64_t n, bool simd, uint32_t& amax, uint32_t& amin,
                   int64_t& nonfinite, uint8_t& inf) {
  int64_t done = 0;
  if constexpr (VecLoad<Load>::ok) {
    if (simd) {
      done = n - n % 8;
      const avx2::SegStats v = avx2::segment_stats(VecLoad<Load>::make(ld), base, done);
      amax = std::max(amax, v.amax);
      amin = std::min(amin, v.amin);
      nonfinite += v.nonfinite;
      inf = static_cast<uint8_t>(inf | (v.inf ? 1 : 0));
    }
  }
  if (done < n) segment_stats(ld, base + done, n - done, amax, amin, nonfinite, inf);
}

template <class Load>
Stats compute_stats(const Load& ld, const GroupGeometry& g, int threads) {
  const bool simd = quant_simd();
  Stats st;
  st.resize(g.num_groups());
  if (g.num_groups() == 0) return st;
  const TaskSplit sp = make_split(g, threads);
  Stats part;
  const bool merge = sp.nsub > 1;
  if (merge) part.resize(sp.tasks * g.grid_cols);
  Stats& dst = merge ? part : st;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (sp.tasks > 1)
  for (int64_t t = 0; t < sp.tasks; ++t) {
    int64_t r0, r1;
    sp.rows_of(g, t, r0, r1);
    const int64_t slot0 = (merge ? t : t / sp.nsub) * g.grid_cols;
    for (int64_t r = r0; r < r1; ++r) {
      if (g.group_cols < kNarrow) {
        for (int64_t c = 0; c < g.cols; ++c) {
          const int64_t s = slot0 + c / g.group_cols;
          const uint32_t a = f32_bits(ld(r * g.cols + c)) & 0x7FFFFFFFu;
          GroupStatBits b{dst.amax[s], dst.amin[s]};
          group_stat_add(b, f32_from_bits(a));
          dst.amax[s] = b.amax;
          dst.amin[s] = b.amin;
          dst.nonfinite[s] += a >= 0x7F800000u ? 1 : 0;
          dst.has_inf[s] |= a == 0x7F800000u ? 1 : 0;
        }
        continue;
      }
      for (int64_t gj = 0; gj < g.grid_cols; ++gj) {
        const int64_t c0 = gj * g.group_cols, c1 = std::min(g.cols, c0 + g.group_cols);
        const int64_t s = slot0 + gj;
        stats_segment(ld, r * g.cols + c0, c1 - c0, simd, dst.amax[s], dst.amin[s], dst.nonfinite[s], dst.has_inf[s]);
      }
    }
  }
  if (merge) {
    for (int64_t t = 0; t < sp.tasks; ++t) {
      const int64_t band = t / sp.nsub;
      for (int64_t gj = 0; gj < g.grid_cols; ++gj) {
        const int64_t s = t * g.grid_cols + gj, d = band * g.grid_cols + gj;
        st.amax[d] = std::max(st.amax[d], part.amax[s]);
        st.amin[d] = std::min(st.amin[d], part.amin[s]);
        st.nonfinite[d] += part.nonfinite[s];
        st.has_inf[d] |= part.has_inf[s];
      }
    }
  }
  return st;
}

enum class Xform { Div, Mul, Fdiv, Expand };

// The element transform of a plain (non-DE, non-delayed) spec: apply=div / rcp / mul / fdiv.
Xform plain_xform(Apply a) {
  if (a == Apply::Div) return Xform::Div;
  return a == Apply::Fdiv ? Xform::Fdiv : Xform::Mul;
}

// Encodes one contiguous segment. Counts saturated (|v| > fmax) and underflowed (nonzero x, zero
// code) finite elements.
template <class T, class Load, Xform X, bool SR>
__attribute__((always_inline)) inline void encode_range(const Load& ld, int64_t base, int64_t n, float sq,
                                                        const ExpandParams& p, bool sat, float fmax, uint8_t* out,
                                                        uint64_t seed, uint64_t idx0, int64_t& nsat, int64_t& nunder) {
  int64_t sc = 0, uc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = ld(base + i);
    float v;
    if constexpr (X == Xform::Div) v = div_rn(x, sq);
    else if constexpr (X == Xform::Mul) v = mul_rn(x, sq);
    else if constexpr (X == Xform::Fdiv) v = div_full(x, sq);
    else v = expand_value(x, p);
    uint8_t c;
    if constexpr (SR) c = encode_fp8_sr<T>(v, sat, philox_word(seed, idx0 + static_cast<uint64_t>(i)));
    else c = encode_fp8_rne<T>(v, sat);
    out[base + i] = c;
    const uint32_t ax = f32_bits(x) & 0x7FFFFFFFu;
    const bool fin = ax < 0x7F800000u;
    sc += (fin && dmath::abs_bits(v) > fmax) ? 1 : 0;                   // fmax here: saturation_bound()
    uc += (fin && ax != 0u && (c & (T::kSignBit - 1u)) == 0u) ? 1 : 0;  // +-0 code of a nonzero x
  }
  nsat += sc;
  nunder += uc;
}

template <class T, class Load, Xform X, bool SR>
__attribute__((target_clones("avx2", "default"))) void encode_segment(const Load ld, int64_t base, int64_t n, float sq,
                                                                      ExpandParams p, bool sat, float fmax,
                                                                      uint8_t* out, uint64_t seed, uint64_t idx0,
                                                                      int64_t& nsat, int64_t& nunder) {
  encode_range<T, Load, X, SR>(ld, base, n, sq, p, sat, fmax, out, seed, idx0, nsat, nunder);
}

// encode_segment through the AVX2 loop where one exists (round to nearest, FP8, fp32 or bf16
// input), the n % 8 tail and everything else through the scalar loops. Mul and Fdiv run there as
// two products (avx2::Transform::Mul2): x * s * 1, and div_full's factors of s.
template <class T, class Load, Xform X, bool SR>
void encode_dispatch(const Load& ld, int64_t base, int64_t n, float sq, const ExpandParams& p, bool sat, float fmax,
                     uint8_t* out, uint64_t seed, uint64_t idx0, int64_t& nsat, int64_t& nunder, bool simd,
                     bool narrow) {
  int64_t done = 0;
  if constexpr (T::kBits == 8 && VecLoad<Load>::ok && !SR) {
    if (simd && !narrow) {
      done = n - n % 8;
      constexpr avx2::Transform vx = X == Xform::Expand ? avx2::Transform::Expand
                                     : X == Xform::Div  ? avx2::Transform::Div
                                                        : avx2::Transform::Mul2;
      float m1 = sq, m2 = 1.0f;
      if constexpr (X == Xform::Fdiv) div_full_factors(sq, m1, m2);
      avx2::encode_segment<T, decltype(VecLoad<Load>::make(ld)), vx>(VecLoad<Load>::make(ld), base, done, sq, p, m1, m2,
                                                                     sat, fmax, out, nsat, nunder);
    }
  }
  if (done == n) return;
  if (narrow)
    encode_range<T, Load, X, SR>(ld, base + done, n - done, sq, p, sat, fmax, out, seed, idx0 + done, nsat, nunder);
  else
    encode_segment<T, Load, X, SR>(ld, base + done, n - done, sq, p, sat, fmax, out, seed, idx0 + done, nsat, nunder);
}

// Calls f.template operator()<T>() with the encoding traits of a scaled element format (E4M3,
// E5M2 and the 4- and 6-bit formats): one dispatch for the encoders and decoders.
template <class F>
void with_element_traits(Format f, F&& fn) {
  switch (f) {
    case Format::E4M3:
      return fn.template operator()<E4M3Traits>();
    case Format::E5M2:
      return fn.template operator()<E5M2Traits>();
    case Format::E2M1:
      return fn.template operator()<E2M1Traits>();
    case Format::E2M3:
      return fn.template operator()<E2M3Traits>();
    case Format::E3M2:
      return fn.template operator()<E3M2Traits>();
    default:
      throw Error(fmt::format("quantize: {} is not a scaled element format", format_name(f)));
  }
}

struct GroupParams {
  Xform xform = Xform::Div;
  std::vector<float> s_quant;  // Div: divisor; Mul: multiplier
};

template <class T, class Load>
void encode_all(const Load& ld, QuantizedTensor& q, const GroupParams& gp, const QuantizeOptions& opts, int threads) {
  const GroupGeometry& g = q.geometry;
  const QuantSpec& spec = q.spec;
  const TaskSplit sp = make_split(g, threads);
  const bool sat = spec.saturation == Saturation::Finite;
  const bool sr = spec.rounding == Rounding::Stochastic;
  const float fmax = saturation_bound(spec.format);  // what the saturated count compares with
  uint8_t* out = q.codes.data();
  const bool narrow = g.group_cols < kNarrow;
  const bool simd = quant_simd() && is_fp8(spec.format);  // the AVX2 encoders are E4M3 / E5M2 only
  int64_t nsat = 0, nunder = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (sp.tasks > 1) reduction(+ : nsat, nunder)
  for (int64_t t = 0; t < sp.tasks; ++t) {
    int64_t r0, r1;
    sp.rows_of(g, t, r0, r1);
    const int64_t band = t / sp.nsub;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t gj = 0; gj < g.grid_cols; ++gj) {
        const int64_t grp = band * g.grid_cols + gj;
        const int64_t c0 = gj * g.group_cols, c1 = std::min(g.cols, c0 + g.group_cols);
        const int64_t base = r * g.cols + c0, n = c1 - c0;
        const uint64_t idx0 = opts.index_offset + static_cast<uint64_t>(base);
        ExpandParams p;
        if (gp.xform == Xform::Expand) p = {q.expand_k[grp], q.expand_c[grp], q.scales[grp]};
        const float sq = gp.xform == Xform::Expand ? 0.0f : gp.s_quant[grp];
#define FP8SIM_ENC(X, S) \
  encode_dispatch<T, Load, X, S>(ld, base, n, sq, p, sat, fmax, out, spec.seed, idx0, nsat, nunder, simd, narrow)
        switch (gp.xform) {
          case Xform::Div:
            sr ? FP8SIM_ENC(Xform::Div, true) : FP8SIM_ENC(Xform::Div, false);
            break;
          case Xform::Mul:
            sr ? FP8SIM_ENC(Xform::Mul, true) : FP8SIM_ENC(Xform::Mul, false);
            break;
          case Xform::Fdiv:
            sr ? FP8SIM_ENC(Xform::Fdiv, true) : FP8SIM_ENC(Xform::Fdiv, false);
            break;
          case Xform::Expand:
            sr ? FP8SIM_ENC(Xform::Expand, true) : FP8SIM_ENC(Xform::Expand, false);
            break;
        }
#undef FP8SIM_ENC
      }
    }
  }
  q.saturated_count = nsat;
  q.underflow_count = nunder;
}

// Branch-free decode (bit-identical to decode_fp8<T>; the tests compare them): unlike a table
// lookup it vectorizes, which matters for DE where each element also runs a pow.
// The 4- and 6-bit formats (sign in bit kBits-1) have no Inf or NaN codes.
template <class T>
__attribute__((always_inline)) inline float decode_fp8_vec(uint32_t c) {
  const uint32_t sign = (c & T::kSignBit) << T::kSignShift;
  const uint32_t mag = c & (T::kSignBit - 1u);
  const uint32_t e = mag >> T::kMantissaBits;
  const uint32_t m = mag & ((1u << T::kMantissaBits) - 1u);
  const float normal = f32_from_bits(sign | ((e + 127u - T::kBias) << 23) | (m << (23 - T::kMantissaBits)));
  const float sub = f32_from_bits(f32_bits(mul_rn(static_cast<float>(m), pow2f(-T::kSubShift))) | sign);
  float r = dmath::sel(e == 0u, sub, normal);
  if constexpr (!T::kHasSpecials) {
    return r;
  } else if constexpr (T::kOverflowCode == 0x7F) {  // E4M3: only S.1111.111 is NaN
    r = dmath::sel(mag == 0x7Fu, f32_from_bits(sign | 0x7FC00000u), r);
  } else {  // E5M2: S.11111.00 is Inf, S.11111.xx NaN
    r = dmath::sel(e == 31u, f32_from_bits(sign | (m == 0u ? 0x7F800000u : 0x7FC00000u)), r);
  }
  return r;
}

// robust DE's evaluation of one candidate over a gathered group: (optionally) encode, then the
// squared error of the dequantized values, element by element (the sum follows in tree order).
// Returns the number of finite elements whose encoder input exceeded `bound` (saturated).
template <class T, bool ENCODE>
__attribute__((target_clones("avx2", "default"))) int64_t robust_errors(const float* xs, int64_t n, ExpandParams p,
                                                                        bool sat, float bound, uint8_t* codes,
                                                                        double* err) {
  int64_t nsat = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float x = xs[j];
    const float v = expand_value(x, p);
    if constexpr (ENCODE) codes[j] = encode_fp8_rne<T>(v, sat);
    nsat += (is_finite_bits(f32_bits(x)) && dmath::abs_bits(v) > bound) ? 1 : 0;
  }
  for (int64_t j = 0; j < n; ++j) err[j] = sq_err_term(xs[j], compress_value(decode_fp8_vec<T>(codes[j]), p));
  return nsat;
}

// robust DE: per group, quantize with the expansion candidate and with plain scaling, keep the
// one with the smaller fp64 tree-summed squared error (ties: plain).
template <class T, class Load>
void encode_robust(const Load& ld, QuantizedTensor& q, const Stats& st, const QuantizeOptions& opts, int threads) {
  const GroupGeometry& g = q.geometry;
  const QuantSpec& spec = q.spec;
  const bool sat = spec.saturation == Saturation::Finite;
  const bool sr = spec.rounding == Rounding::Stochastic;
  const float fmax = spec.fmax();
  const float fmax_target = static_cast<float>(format_info(spec.expand_target).max);
  const bool simd = quant_simd() && is_fp8(spec.format);  // the AVX2 encoders are E4M3 / E5M2 only
  int64_t nsat = 0, nunder = 0;
#pragma omp parallel num_threads(threads) reduction(+ : nsat, nunder)
  {
    std::vector<float> xs;
    std::vector<uint64_t> idx;
    std::vector<uint8_t> ca, cb;
    std::vector<double> err;
#pragma omp for schedule(dynamic, 16)
    for (int64_t grp = 0; grp < g.num_groups(); ++grp) {
      int64_t r0, r1, c0, c1;
      g.group_bounds(grp, r0, r1, c0, c1);
      const int64_t w = c1 - c0, n = (r1 - r0) * w;
      xs.resize(n);
      idx.resize(n);
      ca.resize(n);
      cb.resize(n);
      err.resize(n);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t j = (r - r0) * w + (c - c0);
          xs[j] = ld(r * g.cols + c);
          idx[j] = static_cast<uint64_t>(r * g.cols + c);
        }
      const float absmax = f32_from_bits(st.amax[grp]);
      const float absmin = st.amin[grp] == 0x7F800000u ? 0.0f : f32_from_bits(st.amin[grp]);
      const float bound = saturation_bound(spec.format);
      // Quantizes the group with p into `codes`; returns the tree-summed squared error and the
      // saturated count.
      auto encode_with = [&](const ExpandParams& p, std::vector<uint8_t>& codes, int64_t& gsat) {
        if (sr) {
          for (int64_t j = 0; j < n; ++j)
            codes[j] =
                encode_fp8_sr<T>(expand_value(xs[j], p), sat, philox_word(spec.seed, opts.index_offset + idx[j]));
          gsat = robust_errors<T, false>(xs.data(), n, p, sat, bound, codes.data(), err.data());
        } else {
          gsat = simd ? avx2::robust_errors<T>(xs.data(), n, p, sat, bound, codes.data(), err.data())
                      : robust_errors<T, true>(xs.data(), n, p, sat, bound, codes.data(), err.data());
        }
        return sq_err_tree_sum(err.data(), n);
      };
      const ExpandParams fb = robust_fallback_params(absmax, fmax);
      bool ok = false;
      const ExpandParams cand = robust_expand_candidate(absmax, absmin, fmax, fmax_target, ok);
      ExpandParams chosen = fb;
      std::vector<uint8_t>* codes = &ca;
      int64_t sat_fb = 0, sat_c = 0;
      const double sse_fb = encode_with(fb, ca, sat_fb);
      int64_t gsat = sat_fb;
      if (ok) {
        const double sse_c = encode_with(cand, cb, sat_c);
        if (sse_c < sse_fb) {
          chosen = cand;
          codes = &cb;
          gsat = sat_c;
        }
      }
      q.scales[grp] = chosen.s;
      q.expand_k[grp] = chosen.k;
      q.expand_c[grp] = chosen.c;
      nsat += gsat;
      const uint8_t* cc = codes->data();
      for (int64_t r = r0, j = 0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c, ++j) {
          q.codes[r * g.cols + c] = cc[j];
          const uint32_t ax = f32_bits(xs[j]) & 0x7FFFFFFFu;
          nunder += (ax != 0u && ax < 0x7F800000u && (cc[j] & 0x7Fu) == 0u) ? 1 : 0;
        }
    }
  }
  q.saturated_count = nsat;
  q.underflow_count = nunder;
}

// bf16 / fp16 storage: q = fp16(x / s) per group (s = 1 when unscaled, and x / 1 is exact).
template <class Load>
void encode_16bit(const Load& ld, QuantizedTensor& q, const std::vector<float>& s_quant, int threads) {
  const GroupGeometry& g = q.geometry;
  const bool sat = q.spec.saturation == Saturation::Finite;
  const bool bf = q.spec.format == Format::BF16;
  const float fmax = saturation_bound(q.spec.format);
  const TaskSplit sp = make_split(g, threads);
  int64_t nsat = 0, nunder = 0;
  uint8_t* out = q.codes.data();
  // Stored as its own format with s = 1 (bf16 input to bf16, fp16 to fp16): a finite element
  // rounds to itself, so its code is its own bits and it neither saturates nor flushes; only the
  // non-finite ones (Inf saturates under sat=finite, NaN is made quiet) take the formula.
  constexpr bool kBf16In = std::is_same_v<Load, LoadBF16>, kFp16In = std::is_same_v<Load, LoadFP16>;
  constexpr InputDtype kIn = kBf16In ? InputDtype::BF16 : kFp16In ? InputDtype::FP16 : InputDtype::F32;
  // The input format's exponent mask where it is q's format.
  [[maybe_unused]] const uint16_t same_exp = !input_in_format(kIn, q.spec.format) ? 0u : kBf16In ? 0x7F80u : 0x7C00u;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (sp.tasks > 1) reduction(+ : nsat, nunder)
  for (int64_t t = 0; t < sp.tasks; ++t) {
    int64_t r0, r1;
    sp.rows_of(g, t, r0, r1);
    const int64_t band = t / sp.nsub;
    // Defined in the parallel region: it adds to this thread's copies of the counts.
    auto encode = [&](int64_t i, float sq) {
      const float x = ld(i);
      const float v = div_rn_nan_kept(x, sq);
      const uint16_t c = bf ? f32_to_bf16_rne(v, sat) : f32_to_fp16_rne(v, sat);
      std::memcpy(out + 2 * i, &c, 2);
      const uint32_t ax = f32_bits(x) & 0x7FFFFFFFu;
      if (ax < 0x7F800000u) {
        nsat += dmath::abs_bits(v) > fmax ? 1 : 0;
        nunder += (ax != 0u && (c & 0x7FFFu) == 0u) ? 1 : 0;
      }
    };
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t gj = 0; gj < g.grid_cols; ++gj) {
        const float sq = s_quant[band * g.grid_cols + gj];
        const int64_t c0 = gj * g.group_cols, c1 = std::min(g.cols, c0 + g.group_cols);
        const int64_t i0 = r * g.cols + c0, i1 = r * g.cols + c1;
        if constexpr (std::is_same_v<Load, LoadBF16> || std::is_same_v<Load, LoadFP16>) {
          if (same_exp != 0 && sq == 1.0f) {
            std::memcpy(out + 2 * i0, ld.p + i0, static_cast<size_t>(2 * (i1 - i0)));
            bool special = false;  // an OR over the segment (vectorised); specials are rare
            for (int64_t i = i0; i < i1; ++i) special |= (ld.p[i] & same_exp) == same_exp;
            if (special)
              for (int64_t i = i0; i < i1; ++i)
                if ((ld.p[i] & same_exp) == same_exp) encode(i, sq);
            continue;
          }
        }
        for (int64_t i = i0; i < i1; ++i) encode(i, sq);
      }
    }
  }
  q.saturated_count = nsat;
  q.underflow_count = nunder;
}

// coat DE parameters of one group from its statistics (the spec's epsilon added in fp64 as COAT's
// kernel does, or in fp32).
ExpandParams coat_group_params(const QuantSpec& spec, float absmax, float absmin, float fmax_target) {
  return coat_group_expand_params(absmax, absmin, spec.fmax(), fmax_target, spec.eps, spec.eps_add == EpsAdd::Fp64);
}

// One pass for one-row groups (per-row, 1xG): each group's statistics, its scale (or DE
// parameters) and its codes are computed while the group is in L1, instead of a statistics pass
// over the whole tensor followed by an encoding pass. Same functions, same order within a group,
// so the same bits as the two-pass path; used with the AVX2 loops (quantize_impl decides).
template <class T, class Load>
void quantize_rowgroups_fused(const Load& ld, QuantizedTensor& q, const ScaleConsts& sc, int threads) {
  const GroupGeometry& g = q.geometry;
  const QuantSpec& spec = q.spec;
  const bool coat = spec.expand == ExpandMode::Coat;
  const bool sat = spec.saturation == Saturation::Finite;
  const float bound = saturation_bound(spec.format);
  const float fmax_target = coat ? static_cast<float>(format_info(spec.expand_target).max) : 0.0f;
  const int64_t ng = g.num_groups();
  uint8_t* out = q.codes.data();
  int64_t nsat = 0, nunder = 0, nonfinite = 0;
  uint32_t tmax = 0;
  const auto vl = VecLoad<Load>::make(ld);
  const bool wide = quant_avx512();
  avx2::CoatConsts cc;
  cc.eps_fp64 = spec.eps_add == EpsAdd::Fp64;
  cc.eps = spec.eps;
  cc.fmax_store = spec.fmax();
  cc.fmax_target = fmax_target;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(+ : nsat, nunder, nonfinite) reduction(max : tmax)
  {
    // Contiguous group ranges per thread (static schedule).
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t g0 = ng * t / nt, g1 = ng * (t + 1) / nt;
    // Any group: statistics, scale or DE parameters, codes (the two-pass path's steps, per group),
    // into this thread's copies of the counters.
    auto general = [&](int64_t grp) {
      int64_t base, n;
      g.row_group_span(grp, base, n);
      uint32_t amax = 0u, amin = 0x7F800000u;
      int64_t nf = 0;
      uint8_t inf = 0;
      stats_segment(ld, base, n, true, amax, amin, nf, inf);
      nonfinite += nf;
      tmax = std::max(tmax, amax);
      ExpandParams p;
      float sq = 0.0f;
      if (coat) {
        p = coat_group_params(spec, f32_from_bits(amax), amin == 0x7F800000u ? 0.0f : f32_from_bits(amin), fmax_target);
        q.scales[grp] = p.s;
        q.expand_k[grp] = p.k;
        q.expand_c[grp] = p.c;
        encode_dispatch<T, Load, Xform::Expand, false>(ld, base, n, sq, p, sat, bound, out, 0, 0, nsat, nunder, true,
                                                       false);
      } else {
        plain_scales(amax_with_eps(f32_from_bits(amax), sc), sc, sq, q.scales[grp]);
        // (narrow = false: the fused path requires group_cols >= kNarrow)
        encode_dispatch<T, Load, Xform::Div, false>(ld, base, n, sq, p, sat, bound, out, 0, 0, nsat, nunder, true,
                                                    false);
      }
    };
    if (coat) {
      avx2::coat_groups<T>(vl, ld, g, g0, g1, bound, sat, wide, out, q.scales.data(), q.expand_k.data(),
                           q.expand_c.data(), nsat, nunder, tmax, cc, general);
    } else {
      avx2::plain_groups<T>(vl, ld, g, g0, g1, sc, bound, sat, wide, out, q.scales.data(), nunder, tmax, general);
    }
  }
  q.tensor_amax = f32_from_bits(tmax);
  q.nonfinite_count = nonfinite;
  q.saturated_count = nsat;
  q.underflow_count = nunder;
}

// NVFP4's two-level scales (sim/quant/scale.hpp: nvfp4_tensor_scale, nvfp4_group_scale).
// Returns S_dec; fills the per-group multipliers and stored (dequantizing) scales.
float nvfp4_scales(float tensor_amax, const Stats& st, float fmax_e, std::vector<float>& mult,
                   std::vector<float>& stored) {
  const Nvfp4TensorScale t = nvfp4_tensor_scale(tensor_amax, fmax_e);
  for (size_t g = 0; g < mult.size(); ++g) nvfp4_group_scale(f32_from_bits(st.amax[g]), fmax_e, t, mult[g], stored[g]);
  return t.s_dec;
}

// Fills q, reusing its buffers (resize keeps capacity: no allocation once q has been sized).
template <class Load>
void quantize_core(const Load& ld, std::span<const int64_t> shape, const QuantSpec& spec, const QuantizeOptions& opts,
                   QuantizedTensor& q) {
  spec.validate();
  const int threads = work_threads(opts.threads, shape_numel(shape));
  q.spec = spec;
  q.shape.assign(shape.begin(), shape.end());
  q.geometry = group_geometry(spec, shape);
  q.scales.clear();
  q.expand_k.clear();
  q.expand_c.clear();
  q.tensor_amax = 0.0f;
  q.delayed_scale = 0.0f;
  q.nonfinite_count = q.saturated_count = q.underflow_count = 0;
  const int64_t numel = shape_numel(shape);
  q.codes.resize(static_cast<size_t>(numel) * spec.code_bytes_per_element());
  if (spec.delayed.enabled())
    FP8SIM_REQUIRE(opts.delayed != nullptr, "spec {} uses delayed scaling: pass a DelayedScaler in QuantizeOptions",
                   spec.to_string());
  if (opts.tensor_amax)
    FP8SIM_REQUIRE(spec.granularity == Granularity::Tensor || spec.scale == ScaleMode::E4M3,
                   "QuantizeOptions::tensor_amax needs per-tensor granularity or scale=e4m3");
  if (numel == 0) return;

  const GroupGeometry& g = q.geometry;
  const int64_t ng = g.num_groups();
  const ScaleConsts sc = scale_consts(spec);
  if constexpr (VecLoad<Load>::ok) {
    const bool fused = quant_simd() && is_fp8(spec.format) && g.group_rows == 1 && g.group_cols >= kNarrow &&
                       (spec.granularity == Granularity::Row || spec.granularity == Granularity::Group) &&
                       !spec.delayed.enabled() && spec.rounding == Rounding::Nearest && spec.apply == Apply::Div &&
                       spec.de_min == DeMin::Nonzero &&
                       (spec.expand == ExpandMode::None || spec.expand == ExpandMode::Coat);
    if (fused) {
      q.scales.resize(ng);
      if (spec.expand == ExpandMode::Coat) {
        q.expand_k.resize(ng);
        q.expand_c.resize(ng);
      }
      if (spec.format == Format::E4M3) quantize_rowgroups_fused<E4M3Traits>(ld, q, sc, threads);
      else quantize_rowgroups_fused<E5M2Traits>(ld, q, sc, threads);
      return;
    }
  }
  const Stats st = compute_stats(ld, g, threads);
  uint32_t tmax = 0;
  for (int64_t i = 0; i < ng; ++i) {
    tmax = std::max(tmax, st.amax[i]);
    q.nonfinite_count += st.nonfinite[i];
  }
  q.tensor_amax = f32_from_bits(tmax);
  if (opts.tensor_amax) q.tensor_amax = *opts.tensor_amax;

  if (spec.is_16bit()) {
    std::vector<float> s_quant(ng), s_stored(ng);
    for (int64_t i = 0; i < ng; ++i) {
      const float amax = (ng == 1 && opts.tensor_amax) ? *opts.tensor_amax : f32_from_bits(st.amax[i]);
      plain_scales(amax_with_eps(amax, sc), sc, s_quant[i], s_stored[i]);
    }
    if (!spec.is_passthrough()) q.scales = s_stored;
    encode_16bit(ld, q, s_quant, threads);
    return;
  }
  q.scales.resize(ng);
  GroupParams gp;
  const bool e4 = spec.format == Format::E4M3;
  if (spec.expand == ExpandMode::Robust) {  // e4m3 / e5m2 only (QuantSpec::validate)
    q.expand_k.resize(ng);
    q.expand_c.resize(ng);
    if (e4) encode_robust<E4M3Traits>(ld, q, st, opts, threads);
    else encode_robust<E5M2Traits>(ld, q, st, opts, threads);
    return;
  }
  if (spec.expand == ExpandMode::Coat) {
    gp.xform = Xform::Expand;
    q.expand_k.resize(ng);
    q.expand_c.resize(ng);
    const float fmax_target = static_cast<float>(format_info(spec.expand_target).max);
    // Each group's parameters depend on that group alone (de_min=kernel's emulated warp reduction
    // is about 700 operations per group): split among the threads.
#pragma omp parallel for schedule(static) num_threads(threads) if (ng >= 1024)
    for (int64_t i = 0; i < ng; ++i) {
      const float absmax = f32_from_bits(st.amax[i]);
      float absmin = st.amin[i] == 0x7F800000u ? 0.0f : f32_from_bits(st.amin[i]);
      if (spec.de_min == DeMin::Kernel) {
        int64_t base, n;
        g.row_group_span(i, base, n);  // validate() holds de_min=kernel to 1x128 groups
        float mags[kCoatKernelLanes];
        for (int64_t j = 0; j < n; ++j) mags[j] = ld(base + j);
        absmin = coat_kernel_group_min(mags, static_cast<int>(n));
      }
      const ExpandParams p = coat_group_params(spec, absmax, absmin, fmax_target);
      q.scales[i] = p.s;
      q.expand_k[i] = p.k;
      q.expand_c[i] = p.c;
    }
  } else if (spec.delayed.enabled()) {
    gp.xform = Xform::Mul;
    gp.s_quant.assign(ng, opts.delayed->scale());
    q.delayed_scale = opts.delayed->scale();
    q.scales.assign(ng, opts.delayed->scale_inv());
  } else if (spec.scale == ScaleMode::E4M3) {
    gp.xform = Xform::Mul;
    gp.s_quant.resize(ng);
    q.tensor_scale = nvfp4_scales(q.tensor_amax, st, spec.fmax(), gp.s_quant, q.scales);
  } else {
    gp.xform = plain_xform(spec.apply);
    gp.s_quant.resize(ng);
    for (int64_t i = 0; i < ng; ++i) {
      const float amax = (ng == 1 && opts.tensor_amax) ? *opts.tensor_amax : f32_from_bits(st.amax[i]);
      plain_scales(amax_with_eps(amax, sc), sc, gp.s_quant[i], q.scales[i]);
    }
  }
  with_element_traits(spec.format, [&]<class T>() { encode_all<T>(ld, q, gp, opts, threads); });

  if (spec.delayed.enabled()) {
    // TE records the tensor's amax (an Inf makes it non-finite and the scale is then kept).
    bool any_inf = false;
    for (int64_t i = 0; i < ng; ++i) any_inf |= st.has_inf[i] != 0;
    opts.delayed->update(any_inf ? std::numeric_limits<float>::infinity() : q.tensor_amax);
  }
}

// The spec's random Hadamard transform over each row of the 2-D view of `data` (numel values), in
// place. Throws UsageError when a row is not a whole number of blocks.
void rht_rows(float* data, const GroupGeometry& g, const QuantSpec& spec, int threads, bool inverse) {
  const int n = spec.rht;
  FP8SIM_REQUIRE(n == 4 || n == 16 || n == 64 || n == 256, "rht={} is not a Hadamard block of 4, 16, 64 or 256", n);
  if (g.cols % n != 0)
    throw UsageError(
        fmt::format("rht={} transforms rows in blocks of {} elements: the last dimension ({}) is not a "
                    "multiple of {}",
                    n, n, g.cols, n));
  const RhtSigns signs = rht_signs(n, spec.rht_seeded, spec.rht_seed);
  const int64_t blocks = g.numel() / n;
#pragma omp parallel for schedule(static) num_threads(threads) if (blocks >= 4096)
  for (int64_t b = 0; b < blocks; ++b) {
    if (inverse) rht_inverse(data + b * n, n, signs);
    else rht_forward(data + b * n, n, signs);
  }
}

// Quantizing with rht=N quantizes the transformed tensor: every element is widened to fp32, each
// row's blocks are transformed, and the result is quantized with the rest of the spec. The
// tensor amax (NVFP4's tensor scale) is therefore the transformed tensor's, as TE's recipe
// computes it after the transform.
template <class Load>
void quantize_impl(const Load& ld, std::span<const int64_t> shape, const QuantSpec& spec, const QuantizeOptions& opts,
                   QuantizedTensor& q) {
  if (!spec.rht) {
    quantize_core(ld, shape, spec, opts, q);
    return;
  }
  FP8SIM_REQUIRE(!opts.tensor_amax, "QuantizeOptions::tensor_amax is the untransformed tensor's: rht does not take it");
  spec.validate();
  const GroupGeometry g = group_geometry(spec, shape);
  const int threads = work_threads(opts.threads, g.numel());
  std::vector<float> t(static_cast<size_t>(g.numel()));
  for (int64_t i = 0; i < g.numel(); ++i) t[static_cast<size_t>(i)] = ld(i);
  rht_rows(t.data(), g, spec, threads, false);
  quantize_core(LoadF32{t.data()}, shape, spec, opts, q);
}

}  // namespace

QuantizedTensor quantize(const float* x, std::span<const int64_t> shape, const QuantSpec& spec,
                         const QuantizeOptions& opts) {
  QuantizedTensor q;
  quantize_impl(LoadF32{x}, shape, spec, opts, q);
  return q;
}
QuantizedTensor quantize(const uint16_t* bf16_bits, std::span<const int64_t> shape, const QuantSpec& spec,
                         const QuantizeOptions& opts) {
  QuantizedTensor q;
  quantize_impl(LoadBF16{bf16_bits}, shape, spec, opts, q);
  return q;
}
QuantizedTensor quantize_fp16(const uint16_t* fp16_bits, std::span<const int64_t> shape, const QuantSpec& spec,
                              const QuantizeOptions& opts) {
  QuantizedTensor q;
  quantize_impl(LoadFP16{fp16_bits}, shape, spec, opts, q);
  return q;
}
void quantize_into(const float* x, std::span<const int64_t> shape, const QuantSpec& spec, QuantizedTensor& out,
                   const QuantizeOptions& opts) {
  quantize_impl(LoadF32{x}, shape, spec, opts, out);
}
QuantizedTensor quantize_any(const void* data, InputDtype dtype, std::span<const int64_t> shape, const QuantSpec& spec,
                             const QuantizeOptions& opts) {
  switch (dtype) {
    case InputDtype::F32:
      return quantize(static_cast<const float*>(data), shape, spec, opts);
    case InputDtype::BF16:
      return quantize(static_cast<const uint16_t*>(data), shape, spec, opts);
    case InputDtype::FP16:
      return quantize_fp16(static_cast<const uint16_t*>(data), shape, spec, opts);
  }
  throw Error("unknown input dtype");
}

std::vector<float> group_absmax(const float* x, std::span<const int64_t> shape, const QuantSpec& spec, int threads) {
  const GroupGeometry g = group_geometry(spec, shape);
  std::vector<float> transformed;  // rht: the maxima are the transformed tensor's
  if (spec.rht) {
    transformed.assign(x, x + g.numel());
    rht_rows(transformed.data(), g, spec, work_threads(threads, g.numel()), false);
    x = transformed.data();
  }
  const Stats st = compute_stats(LoadF32{x}, g, work_threads(threads, g.numel()));
  std::vector<float> out(st.amax.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = f32_from_bits(st.amax[i]);
  return out;
}

// ---- dequantize ----------------------------------------------------------------------------------

namespace {

template <class T, bool EXPAND>
__attribute__((always_inline)) inline void decode_range(const uint8_t* codes, int64_t base, int64_t n, float s,
                                                        const ExpandParams& p, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = decode_fp8_vec<T>(codes[base + i]);
    if constexpr (EXPAND) out[base + i] = compress_value(v, p);
    else out[base + i] = mul_rn(v, s);
  }
}

template <class T, bool EXPAND>
__attribute__((target_clones("avx2", "default"))) void decode_segment(const uint8_t* codes, int64_t base, int64_t n,
                                                                      float s, ExpandParams p, float* out) {
  decode_range<T, EXPAND>(codes, base, n, s, p, out);
}

template <class T>
void decode_group_segment(const uint8_t* codes, int64_t base, int64_t n, float s, const ExpandParams& p, bool expand,
                          float* out, bool simd) {
  if (simd && n >= kNarrow) {
    const int64_t n8 = n - n % 8;
    if (expand) avx2::decode_segment<T, true>(codes, base, n8, s, p, out);
    else avx2::decode_segment<T, false>(codes, base, n8, s, p, out);
    base += n8;
    n -= n8;
    if (expand) decode_range<T, true>(codes, base, n, s, p, out);
    else decode_range<T, false>(codes, base, n, s, p, out);
    return;
  }
  if (n < kNarrow) {
    if (expand) decode_range<T, true>(codes, base, n, s, p, out);
    else decode_range<T, false>(codes, base, n, s, p, out);
  } else {
    if (expand) decode_segment<T, true>(codes, base, n, s, p, out);
    else decode_segment<T, false>(codes, base, n, s, p, out);
  }
}

// Elements [r cols + c_lo, r cols + c_hi) of row r, all in column group gj, into
// out[element - origin]: dequantize's work on one row segment (no rht).
void decode_row_span(const QuantizedTensor& q, int64_t r, int64_t gj, int64_t c_lo, int64_t c_hi, int64_t origin,
                     float* out, bool simd) {
  const GroupGeometry& g = q.geometry;
  const int64_t grp = (r / g.group_rows) * g.grid_cols + gj;
  const int64_t b0 = r * g.cols + c_lo, nn = c_hi - c_lo;
  if (q.spec.is_16bit()) {
    const bool bf = q.spec.format == Format::BF16;
    for (int64_t i = b0; i < b0 + nn; ++i) {
      uint16_t c;
      std::memcpy(&c, q.codes.data() + 2 * i, 2);
      out[i - origin] = mul_rn_nan_kept(bf ? bf16_to_f32(c) : fp16_to_f32(c), q.scales[grp]);
    }
    return;
  }
  const bool expand = q.spec.has_expand();
  const ExpandParams p = expand ? ExpandParams{q.expand_k[grp], q.expand_c[grp], q.scales[grp]} : ExpandParams{};
  const float sg = q.scales[grp];
  // the AVX2 decoders are E4M3 / E5M2 only
  with_element_traits(q.spec.format, [&]<class T>() {
    decode_group_segment<T>(q.codes.data() + origin, b0 - origin, nn, sg, p, expand, out, simd && T::kBits == 8);
  });
}

// Elements [begin, end) of an unscaled 16-bit q into out[element - origin].
void decode_passthrough(const QuantizedTensor& q, int64_t begin, int64_t end, int64_t origin, float* out) {
  const bool bf = q.spec.format == Format::BF16;
  for (int64_t i = begin; i < end; ++i) {
    uint16_t c;
    std::memcpy(&c, q.codes.data() + 2 * i, 2);
    out[i - origin] = bf ? bf16_to_f32(c) : fp16_to_f32(c);
  }
}

// dequantize's checks of q's sizes.
void check_dequantizable(const QuantizedTensor& q) {
  const int64_t n = q.numel();
  FP8SIM_REQUIRE(static_cast<int64_t>(q.codes.size()) == n * q.spec.code_bytes_per_element(),
                 "quantized tensor holds {} code bytes for {} elements", q.codes.size(), n);
  if (n == 0 || q.spec.is_passthrough()) return;
  const GroupGeometry& g = q.geometry;
  FP8SIM_REQUIRE(static_cast<int64_t>(q.scales.size()) == g.num_groups(),
                 "quantized tensor has {} scales for {} groups", q.scales.size(), g.num_groups());
  if (q.spec.has_expand())
    FP8SIM_REQUIRE(static_cast<int64_t>(q.expand_k.size()) == g.num_groups() &&
                       static_cast<int64_t>(q.expand_c.size()) == g.num_groups(),
                   "quantized tensor lacks per-group k and c");
}

}  // namespace

void dequantize_range(const QuantizedTensor& q, int64_t begin, int64_t end, float* out) {
  FP8SIM_REQUIRE(q.spec.rht == 0, "dequantize_range: an rht spec transforms whole blocks back");
  FP8SIM_REQUIRE(0 <= begin && begin <= end && end <= q.numel(), "dequantize_range: [{}, {}) is outside {} elements",
                 begin, end, q.numel());
  check_dequantizable(q);
  if (begin == end) return;
  if (q.spec.is_passthrough()) {
    decode_passthrough(q, begin, end, begin, out);
    return;
  }
  const GroupGeometry& g = q.geometry;
  const bool simd = quant_simd();
  for (int64_t r = begin / g.cols; r * g.cols < end; ++r) {
    const int64_t lo = std::max(begin - r * g.cols, int64_t{0}), hi = std::min(end - r * g.cols, g.cols);
    for (int64_t gj = lo / g.group_cols; gj * g.group_cols < hi; ++gj)
      decode_row_span(q, r, gj, std::max(lo, gj * g.group_cols), std::min(hi, (gj + 1) * g.group_cols), begin, out,
                      simd);
  }
}

void dequantize(const QuantizedTensor& q, float* out, int threads_in) {
  const int threads = work_threads(threads_in, q.numel());
  const int64_t n = q.numel();
  check_dequantizable(q);
  if (n == 0) return;
  if (q.spec.is_passthrough()) {
    constexpr int64_t kBlock = int64_t{1} << 16;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < n; b += kBlock) decode_passthrough(q, b, std::min(n, b + kBlock), 0, out);
    return;
  }
  const GroupGeometry& g = q.geometry;
  const bool simd = quant_simd();
  const TaskSplit sp = make_split(g, threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (sp.tasks > 1)
  for (int64_t t = 0; t < sp.tasks; ++t) {
    int64_t r0, r1;
    sp.rows_of(g, t, r0, r1);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t gj = 0; gj < g.grid_cols; ++gj)
        decode_row_span(q, r, gj, gj * g.group_cols, std::min(g.cols, (gj + 1) * g.group_cols), 0, out, simd);
  }
  if (q.spec.rht) rht_rows(out, g, q.spec, threads, true);
}

std::vector<float> dequantize(const QuantizedTensor& q, int threads) {
  std::vector<float> out(static_cast<size_t>(q.numel()));
  dequantize(q, out.data(), threads);
  return out;
}

void scaled_magnitudes(const float* x, const QuantizedTensor& q, float* out, bool expanded, int threads_in) {
  const int threads = work_threads(threads_in, q.numel());
  const GroupGeometry& g = q.geometry;
  const int64_t n = q.numel();
  if (n == 0) return;
  const QuantSpec& spec = q.spec;
  if (spec.is_passthrough()) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i)
      out[i] = is_finite_bits(f32_bits(x[i])) ? std::fabs(x[i]) : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  std::vector<float> transformed;  // rht: the magnitudes are the transformed tensor's
  if (spec.rht) {
    transformed.assign(x, x + n);
    rht_rows(transformed.data(), g, spec, threads, false);
    x = transformed.data();
  }
  // The divisor (or multiplier) each group used, recomputed where it is not stored.
  const int64_t ng = g.num_groups();
  std::vector<float> sq(ng);
  bool mul = false;
  const bool use_expand = spec.has_expand() && expanded;
  if (spec.delayed.enabled()) {
    mul = true;
    sq.assign(ng, q.delayed_scale);
  } else if (spec.scale == ScaleMode::E4M3 && !spec.has_expand()) {
    // NVFP4: the encoder multiplies by the inverse of the stored two-level scale.
    mul = true;
    for (int64_t i = 0; i < ng; ++i) sq[i] = nvfp4_multiplier(q.scales[i]);
  }
  if (!use_expand) {
    const Stats st = compute_stats(LoadF32{x}, g, threads);
    for (int64_t i = 0; i < ng; ++i) {
      float stored;
      if (spec.has_expand()) {  // "before expansion": plain absmax scaling, no eps
        const float a = f32_from_bits(st.amax[i]);
        sq[i] = a == 0.0f ? 1.0f : div_rn(a, spec.fmax());
        if (sq[i] == 0.0f) sq[i] = f32_from_bits(1u);
      } else if (!mul) {
        const float amax =
            (ng == 1 && spec.granularity == Granularity::Tensor) ? q.tensor_amax : f32_from_bits(st.amax[i]);
        const ScaleConsts sc = scale_consts(spec);
        plain_scales(amax_with_eps(amax, sc), sc, sq[i], stored);
      }
    }
  }
  const TaskSplit sp = make_split(g, threads);
  const ScaleConsts sc_apply = scale_consts(spec);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (sp.tasks > 1)
  for (int64_t t = 0; t < sp.tasks; ++t) {
    int64_t r0, r1;
    sp.rows_of(g, t, r0, r1);
    const int64_t band = t / sp.nsub;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t gj = 0; gj < g.grid_cols; ++gj) {
        const int64_t grp = band * g.grid_cols + gj;
        const int64_t c0 = gj * g.group_cols, c1 = std::min(g.cols, c0 + g.group_cols);
        const ExpandParams p =
            use_expand ? ExpandParams{q.expand_k[grp], q.expand_c[grp], q.scales[grp]} : ExpandParams{};
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t i = r * g.cols + c;
          const float xi = x[i];
          float v;
          if (!is_finite_bits(f32_bits(xi))) v = std::numeric_limits<float>::quiet_NaN();
          else if (use_expand) v = expand_value(xi, p);
          else if (mul) v = mul_rn(xi, sq[grp]);
          else v = apply_scale(xi, sq[grp], sc_apply);
          out[i] = dmath::abs_bits(v);
        }
      }
    }
  }
}

// ---- delayed scaling -----------------------------------------------------------------------------

DelayedScaler::DelayedScaler(const QuantSpec& spec) : params_(spec.delayed), fmax_(spec.fmax()) {
  FP8SIM_REQUIRE(spec.delayed.enabled(), "DelayedScaler needs a spec with delayed=H (got {})", spec.to_string());
  ring_.reserve(static_cast<size_t>(params_.history));
}

float DelayedScaler::scale_inv() const { return div_rn(1.0f, scale_); }

void DelayedScaler::update(float amax) {
  // ring_ holds the last H amaxes, oldest first once full.
  if (static_cast<int>(ring_.size()) < params_.history) {
    ring_.push_back(amax);
  } else {
    ring_[static_cast<size_t>(steps_ % params_.history)] = amax;
  }
  ++steps_;
  float amax_h;
  if (params_.algo == AmaxAlgo::MostRecent) {
    amax_h = amax;
  } else {
    // torch.max over the history propagates NaN; Inf dominates.
    amax_h = 0.0f;
    for (float a : ring_) {
      if (std::isnan(a)) {
        amax_h = a;
        break;
      }
      amax_h = std::max(amax_h, a);
    }
  }
  if (!(amax_h > 0.0f) || !std::isfinite(amax_h)) return;  // keep the previous scale
  // TE divides the margin-reduced maximum (exact: a power-of-two factor of fmax) by the amax, and
  // replaces a scale that overflows fp32 (amax below about fmax / FLT_MAX) by FLT_MAX.
  const float scaled_max = mul_rn(fmax_, pow2_exact(-params_.margin));
  const float sf = div_rn(scaled_max, amax_h);
  scale_ = is_finite_bits(f32_bits(sf)) ? sf : std::numeric_limits<float>::max();
}

std::vector<float> DelayedScaler::history() const {
  std::vector<float> h;
  const int64_t n = static_cast<int64_t>(ring_.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t step = steps_ - 1 - i;  // most recent first
    h.push_back(static_cast<int>(ring_.size()) < params_.history ? ring_[static_cast<size_t>(step)]
                                                                 : ring_[static_cast<size_t>(step % params_.history)]);
  }
  return h;
}

size_t DelayedScaler::state_bytes() const { return static_cast<size_t>(params_.history) * 4 + 8; }

}  // namespace fp8sim
