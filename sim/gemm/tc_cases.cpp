#include "sim/gemm/tc_cases.hpp"
#include "sim/common/mix.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_model.hpp"

namespace fp8sim::gemm {

std::string_view tc_family_name(TcFamily f) {
  switch (f) {
    case TcFamily::Exact:
      return "exact";
    case TcFamily::Random:
      return "random";
    case TcFamily::RandomC:
      return "random-c";
    case TcFamily::Cancel:
      return "cancel";
    case TcFamily::BigSmall:
      return "big-small";
    case TcFamily::Narrow:
      return "narrow";
    case TcFamily::Special:
      return "special";
  }
  return "?";
}

namespace {

// splitmix64: a fixed, portable stream (the cases must be the same on every machine).
struct Rng {
  uint64_t s;
  uint64_t next() { return splitmix64_mix(s += 0x9E3779B97F4A7C15ull); }
  int uniform(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  bool chance(int one_in) { return next() % static_cast<uint64_t>(one_in) == 0; }
};

float f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The format's exponent field width and mantissa width (FP8 and BF16).
struct Layout {
  int ebits, mbits;
};
Layout layout(Format f) {
  switch (f) {
    case Format::E4M3:
      return {4, 3};
    case Format::E5M2:
      return {5, 2};
    default:
      return {8, 7};
  }
}

// A finite code with exponent field in [elo, ehi] (clamped to the format's finite fields), random
// sign and mantissa. For BF16 the fields are biased exponents of bfloat16.
uint32_t code_in(Rng& r, Format f, int elo, int ehi) {
  const Layout l = layout(f);
  const int emax_field = f == Format::E4M3 ? 15 : (1 << l.ebits) - 2;
  elo = std::max(elo, 0);
  ehi = std::min(ehi, emax_field);
  for (;;) {
    const uint32_t e = static_cast<uint32_t>(r.uniform(elo, ehi));
    const uint32_t m = static_cast<uint32_t>(r.next() & ((1u << l.mbits) - 1));
    const uint32_t s = static_cast<uint32_t>(r.next() & 1);
    if (f == Format::E4M3 && e == 15 && m == 7) continue;  // NaN
    return (s << (l.ebits + l.mbits)) | (e << l.mbits) | m;
  }
}

// Any finite code (BF16: exponents within 2^+-40 so that sums of products stay normal in fp32).
uint32_t any_code(Rng& r, Format f) {
  if (f == Format::BF16) return code_in(r, f, 127 - 40, 127 + 40);
  return code_in(r, f, 0, 31);
}

uint32_t code_of(Format f, float v) {
  if (f == Format::BF16) return bits(v) >> 16;  // callers pass values exact in BF16
  return encode_fp8(v, f == Format::E4M3 ? 0 : 1, true);
}

uint32_t nan_code(Rng& r, Format f) {
  switch (f) {
    case Format::E4M3:
      return 0x7F | (r.next() & 1 ? 0x80 : 0);
    case Format::E5M2:
      return (r.chance(2) ? 0x7C : 0x7E) | (r.next() & 1 ? 0x80 : 0);  // Inf or NaN
    default:
      return (r.chance(2) ? 0x7F80 : 0x7FC0) | (r.next() & 1 ? 0x8000 : 0);
  }
}

void put(std::vector<uint8_t>& m, Format f, int64_t i, uint32_t code) {
  if (f == Format::BF16) {
    m[2 * i] = static_cast<uint8_t>(code);
    m[2 * i + 1] = static_cast<uint8_t>(code >> 8);
  } else {
    m[i] = static_cast<uint8_t>(code);
  }
}

float random_f32(Rng& r, int elo, int ehi) {
  const uint32_t e = static_cast<uint32_t>(r.uniform(elo, ehi) + 127);
  return f32(static_cast<uint32_t>(r.next() & 1) << 31 | e << 23 | static_cast<uint32_t>(r.next() & 0x7FFFFF));
}

}  // namespace

float tc_element(const std::vector<uint8_t>& m, Format f, int64_t i) {
  if (f == Format::BF16) return bf16_to_f32(static_cast<uint16_t>(m[2 * i] | (m[2 * i + 1] << 8)));
  return decode_fp8(m[i], f == Format::E4M3 ? 0 : 1);
}

TcCases make_tc_cases(TcFamily family, Format af, Format bf, int nk, int64_t cases, uint64_t seed) {
  FP8SIM_REQUIRE((af == Format::BF16) == (bf == Format::BF16) && (af == Format::BF16 || (is_fp8(af) && is_fp8(bf))),
                 "tensor-core cases: formats must be E4M3/E5M2 each or both BF16");
  FP8SIM_REQUIRE(nk >= 1 && cases >= 0, "tensor-core cases: nk >= 1 and cases >= 0");
  TcCases t;
  t.a_format = af;
  t.b_format = bf;
  t.nk = nk;
  t.cases = cases;
  const int64_t K = t.k(), eb = t.element_bytes();
  t.a.assign(static_cast<size_t>(cases * 64 * K * eb), 0);
  t.bt.assign(static_cast<size_t>(cases * 8 * K * eb), 0);
  t.c.assign(static_cast<size_t>(cases * 512), 0.0f);
  Rng r{seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(family) * 1000003 + static_cast<uint64_t>(nk)};
  const Layout la = layout(af), lb = layout(bf);
  const int a_top = af == Format::BF16 ? 127 + 40 : (1 << la.ebits) - 1;
  const int b_top = bf == Format::BF16 ? 127 + 40 : (1 << lb.ebits) - 1;
  const int a_low = af == Format::BF16 ? 127 - 40 : 0;
  const int b_low = bf == Format::BF16 ? 127 - 40 : 0;

  for (int64_t cs = 0; cs < cases; ++cs) {
    const int64_t a0 = cs * 64 * K, b0 = cs * 8 * K, c0 = cs * 512;
    switch (family) {
      case TcFamily::Exact:
        for (int64_t i = 0; i < 64 * K; ++i) put(t.a, af, a0 + i, code_of(af, static_cast<float>(r.uniform(-3, 3))));
        for (int64_t i = 0; i < 8 * K; ++i) put(t.bt, bf, b0 + i, code_of(bf, static_cast<float>(r.uniform(-3, 3))));
        for (int i = 0; i < 512; ++i) t.c[c0 + i] = static_cast<float>(r.uniform(-8, 8));
        break;
      case TcFamily::Random:
      case TcFamily::RandomC:
      case TcFamily::Cancel:
      case TcFamily::Special:
        for (int64_t i = 0; i < 64 * K; ++i) put(t.a, af, a0 + i, any_code(r, af));
        for (int64_t i = 0; i < 8 * K; ++i) put(t.bt, bf, b0 + i, any_code(r, bf));
        break;
      case TcFamily::BigSmall:
        // Small elements in a 2-binade window at the bottom of A's range; per row, one element
        // (at a random position) g binades higher. B within 2 binades of 1.
        for (int row = 0; row < 64; ++row) {
          const int span = a_top - a_low - 3;
          const int g = r.uniform(0, span);
          const int lo = r.uniform(a_low, a_top - 2 - g);
          const int64_t p = r.uniform(0, static_cast<int>(K) - 1);
          for (int64_t k = 0; k < K; ++k)
            put(t.a, af, a0 + row * K + k, k == p ? code_in(r, af, lo + g, lo + g + 1) : code_in(r, af, lo, lo + 1));
        }
        {
          const int one = bf == Format::BF16 ? 127 : (bf == Format::E4M3 ? 7 : 15);
          for (int64_t i = 0; i < 8 * K; ++i) put(t.bt, bf, b0 + i, code_in(r, bf, one - 1, one + 1));
        }
        break;
      case TcFamily::Narrow: {
        const int ea = r.uniform(a_low + 1, a_top - 4), eb2 = r.uniform(b_low + 1, b_top - 4);
        for (int64_t i = 0; i < 64 * K; ++i) put(t.a, af, a0 + i, code_in(r, af, ea, ea + 3));
        for (int64_t i = 0; i < 8 * K; ++i) put(t.bt, bf, b0 + i, code_in(r, bf, eb2, eb2 + 3));
        break;
      }
    }
    // C.
    if (family == TcFamily::RandomC || family == TcFamily::BigSmall || family == TcFamily::Narrow) {
      for (int i = 0; i < 512; ++i) {
        if (r.chance(8)) continue;  // some zeros
        const int span = af == Format::BF16 ? 90 : 50;
        t.c[c0 + i] = random_f32(r, -span, span);
      }
    } else if (family == TcFamily::Cancel) {
      for (int row = 0; row < 64; ++row)
        for (int col = 0; col < 8; ++col) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += static_cast<double>(tc_element(t.a, af, a0 + row * K + k)) * tc_element(t.bt, bf, b0 + col * K + k);
          uint32_t u = bits(static_cast<float>(-s));
          if ((u & 0x7FFFFFFF) != 0) u = static_cast<uint32_t>(static_cast<int64_t>(u) + r.uniform(-4, 4));
          t.c[c0 + row * 8 + col] = f32(u);
        }
    } else if (family == TcFamily::Special) {
      for (int64_t i = 0; i < 64 * K; ++i)
        if (r.chance(200)) put(t.a, af, a0 + i, nan_code(r, af));
      for (int64_t i = 0; i < 8 * K; ++i)
        if (r.chance(400)) put(t.bt, bf, b0 + i, nan_code(r, bf));
      for (int i = 0; i < 512; ++i) {
        const int kind = r.uniform(0, 9);
        const float sign = r.chance(2) ? -1.0f : 1.0f;
        if (kind == 0) t.c[c0 + i] = sign * INFINITY;
        if (kind == 1) t.c[c0 + i] = NAN;
        if (kind == 2) t.c[c0 + i] = sign * f32(0x7F7FFFFFu - static_cast<uint32_t>(r.uniform(0, 1 << 22)));
        if (kind == 3) t.c[c0 + i] = sign * f32(static_cast<uint32_t>(r.next() & 0x7FFFFF));  // subnormal
        if (kind == 4) t.c[c0 + i] = random_f32(r, -126, -100);
        if (kind == 5) t.c[c0 + i] = sign * 0.0f;
      }
      // Some rows of tiny products only (results near the bottom of fp32's range).
      for (int row = 0; row < 64; row += 7)
        for (int64_t k = 0; k < K; ++k) put(t.a, af, a0 + row * K + k, code_in(r, af, a_low, a_low + 1));
    }
  }
  return t;
}

std::string TcGemmCase::name() const {
  return config.describe() + " K=" + std::to_string(k) + " " + std::string(tc_family_name(family));
}

std::vector<TcGemmCase> tc_gemm_suite() {
  std::vector<TcGemmCase> out;
  uint64_t seed = 100;
  auto add = [&](Format xf, Format wf, int scaling, bool fast, int64_t k) {
    TcGemmConfig c;
    c.x_format = xf;
    c.w_format = wf;
    c.scaling = scaling;
    c.fast_accum = fast;
    const int64_t mn = k >= 16384 ? 128 : 256;
    for (const TcFamily f : {TcFamily::Random, TcFamily::Narrow, TcFamily::BigSmall})
      out.push_back({c, mn, mn, k, f, ++seed});
  };
  for (const int64_t k : {16, 32, 48, 96, 128, 160, 384, 1024, 4096, 16384}) {
    add(Format::E4M3, Format::E4M3, 1, true, k);
    add(Format::E4M3, Format::E4M3, 1, false, k);
    add(Format::E5M2, Format::E4M3, 1, true, k);
    add(Format::E5M2, Format::E4M3, 1, false, k);
    add(Format::E4M3, Format::E4M3, 2, false, k);
    add(Format::E4M3, Format::E4M3, 2, true, k);
    add(Format::BF16, Format::BF16, 0, false, k);
    if (k % 128 == 0) {
      add(Format::E4M3, Format::E4M3, 3, false, k);
      add(Format::E4M3, Format::E4M3, 4, false, k);
    }
  }
  // BF16 outputs (the epilogue's rounding) at two K.
  for (const int64_t k : {128, 4096}) {
    const size_t first = out.size();
    add(Format::E4M3, Format::E4M3, 1, false, k);
    add(Format::E5M2, Format::E4M3, 1, true, k);
    add(Format::E4M3, Format::E4M3, 3, false, k);
    add(Format::BF16, Format::BF16, 0, false, k);
    for (size_t i = first; i < out.size(); ++i) out[i].config.y_format = Format::BF16;
  }
  return out;
}

TcGemmOperands make_tc_gemm_operands(const TcGemmCase& gc) {
  const TcGemmConfig& c = gc.config;
  const bool bf16 = c.scaling == 0;
  const int64_t eb = bf16 ? 2 : 1, K = gc.k;
  const int nk = static_cast<int>((K + (bf16 ? 15 : 31)) / (bf16 ? 16 : 32));
  // Rows of the probe families' A panels (64 rows each; every row an independent draw).
  const TcCases tx = make_tc_cases(gc.family, c.x_format, c.x_format, nk, (gc.m + 63) / 64, gc.seed);
  const TcCases tw = make_tc_cases(gc.family, c.w_format, c.w_format, nk, (gc.n + 63) / 64, gc.seed + 77);
  TcGemmOperands o;
  o.x.resize(static_cast<size_t>(gc.m * K * eb));
  o.w.resize(static_cast<size_t>(gc.n * K * eb));
  for (int64_t i = 0; i < gc.m; ++i)
    std::memcpy(&o.x[i * K * eb], &tx.a[static_cast<size_t>(i * tx.k() * eb)], static_cast<size_t>(K * eb));
  for (int64_t j = 0; j < gc.n; ++j)
    std::memcpy(&o.w[j * K * eb], &tw.a[static_cast<size_t>(j * tw.k() * eb)], static_cast<size_t>(K * eb));
  const int64_t kb = (K + 127) / 128;
  const int64_t nx = tc_scale_count(c.scaling, false, gc.m, K), nw = tc_scale_count(c.scaling, true, gc.n, K);
  Rng r{gc.seed ^ 0x5CA1E5ull};
  auto scale = [&] {  // [0.5, 2) with a random 23-bit fraction: a power of two only by chance
    return f32(static_cast<uint32_t>(r.uniform(126, 127)) << 23 | static_cast<uint32_t>(r.next() & 0x7FFFFF));
  };
  if (!bf16) {
    o.x_scales.resize(static_cast<size_t>(nx));
    o.w_scales.resize(static_cast<size_t>(nw));
    for (auto& v : o.x_scales) v = scale();
    for (auto& v : o.w_scales) v = scale();
  }
  // Dequantized values (code * scale in fp32), for the ideal reference.
  auto deq = [&](const std::vector<uint8_t>& m, Format f, int64_t rows, const std::vector<float>& sc, bool is_w) {
    std::vector<float> v(static_cast<size_t>(rows * K));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < K; ++k)
        v[i * K + k] = tc_element(m, f, i * K + k) * tc_operand_scale(sc.data(), c.scaling, is_w, i, k, kb);
    return v;
  };
  o.x_f32 = deq(o.x, c.x_format, gc.m, o.x_scales, false);
  o.w_f32 = deq(o.w, c.w_format, gc.n, o.w_scales, true);
  return o;
}

}  // namespace fp8sim::gemm
