// Dynamic Range Expansion and the deterministic math under it.
// * dmath: floor/rint exact; log2, exp2, pow within their documented ulp bounds against
//   double-precision libm; C99 special values.
// * coat mode against an independent implementation of COAT's kernel formulas written here
//   (group statistics and k in double precision, then the kernel's fp32 steps with libm pow in
//   double), on log-normal data spanning 10^8 and on degenerate groups.
// * robust mode: never Inf/NaN, never a worse per-group MSE than plain absmax scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "sim/formats/fp8.hpp"
#include "sim/quant/dmath.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// |a - r| in units of the last place of the fp32 number nearest r (r exact in double).
double ulp_err(float a, double r) {
  const double rf = static_cast<float>(r);
  int e = 0;
  std::frexp(rf, &e);
  double ulp = std::ldexp(1.0, e - 24);
  if (std::fabs(rf) < 0x1p-126) ulp = 0x1p-149;
  return std::fabs(static_cast<double>(a) - r) / ulp;
}

// ---- dmath ---------------------------------------------------------------------------------------

TEST(Dmath, FloorIsExact) {
  std::mt19937 g(3);
  std::vector<float> xs = {0.0f,        -0.0f,      0.5f,  -0.5f,  1.0f, -1.0f, 2.9999998f, -2.9999998f, 8388607.5f,
                           -8388607.5f, 8388608.0f, 1e30f, -1e30f, kInf, -kInf, 1e-40f,     -1e-40f};
  std::uniform_real_distribution<float> u(-1e7f, 1e7f);
  for (int i = 0; i < 100000; ++i) xs.push_back(u(g));
  for (int i = 0; i < 100000; ++i) xs.push_back(u(g) * 1e-6f);
  for (float x : xs) {
    const float want = std::floor(x);
    ASSERT_EQ(bits(dmath::floor_det(x)), bits(want)) << "x=" << x;
  }
  EXPECT_TRUE(std::isnan(dmath::floor_det(kNaN)));
}

TEST(Dmath, RintIsNearestEven) {
  for (float x : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.49999f, 4194303.5f, -4194303.5f, 0.25f, 1e-30f}) {
    EXPECT_EQ(dmath::rint_small(x), std::nearbyint(x)) << x;
  }
}

TEST(Dmath, Log2WithinTwoUlp) {
  std::mt19937_64 g(11);
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = static_cast<uint32_t>(g()) & 0x7FFFFFFFu;
    if (u == 0 || u >= 0x7F800000u) continue;
    float x;
    std::memcpy(&x, &u, 4);
    const double e = ulp_err(dmath::log2_det(x), std::log2(static_cast<double>(x)));
    worst = std::max(worst, e);
    ASSERT_LE(e, 2.0) << "x=" << x;
  }
  RecordProperty("log2_max_ulp", std::to_string(worst));
  for (int e = -149; e <= 127; ++e) ASSERT_EQ(dmath::log2_det(std::ldexp(1.0f, e)), static_cast<float>(e));
  EXPECT_EQ(bits(dmath::log2_det(1.0f)), 0u);
  EXPECT_EQ(dmath::log2_det(0.0f), -kInf);
  EXPECT_EQ(dmath::log2_det(kInf), kInf);
  EXPECT_TRUE(std::isnan(dmath::log2_det(-1.0f)));
  EXPECT_TRUE(std::isnan(dmath::log2_det(kNaN)));
}

TEST(Dmath, Exp2WithinTwoUlp) {
  std::mt19937_64 g(12);
  std::uniform_real_distribution<float> u(-126.0f, 127.9f);
  for (int i = 0; i < 1000000; ++i) {
    const float p = u(g);
    ASSERT_LE(ulp_err(dmath::exp2_det(p), std::exp2(static_cast<double>(p))), 2.0) << "p=" << p;
  }
  for (int e = -126; e <= 127; ++e) ASSERT_EQ(dmath::exp2_det(static_cast<float>(e)), std::ldexp(1.0f, e));
  EXPECT_EQ(dmath::exp2_det(200.0f), kInf);
  EXPECT_EQ(dmath::exp2_det(-200.0f), 0.0f);
}

TEST(Dmath, PowWithinBound) {
  // Bound: 2 + |y| ulp where the result is normal (see dmath.hpp for the derivation).
  std::mt19937_64 g(13);
  std::uniform_real_distribution<double> ly(std::log(1.0 / 16), std::log(16.0)), lx(-40, 40);
  for (int i = 0; i < 1000000; ++i) {
    float y = static_cast<float>(std::exp(ly(g)));
    if (g() & 1) y = -y;
    const float x = static_cast<float>(std::exp2(lx(g) / std::fabs(y) * 0.9));
    const double r = std::pow(static_cast<double>(x), static_cast<double>(y));
    if (!(r > 0x1p-126 && r < 3e38)) continue;
    ASSERT_LE(ulp_err(dmath::pow_det(x, y), r), 2.0 + std::fabs(y)) << "x=" << x << " y=" << y;
  }
  // DE's own exponents: multiples of 1/16 and their reciprocals.
  for (int i = 1; i <= 160; ++i) {
    const float k = static_cast<float>(i) / 16.0f;
    for (float y : {k, 1.0f / k}) {
      for (float x : {0.001f, 0.37f, 1.7f, 31.0f, 448.0f}) {
        const double r = std::pow(static_cast<double>(x), static_cast<double>(y));
        if (!(r > 0x1p-126 && r < 3e38)) continue;
        ASSERT_LE(ulp_err(dmath::pow_det(x, y), r), 2.0 + std::fabs(y)) << "x=" << x << " y=" << y;
      }
    }
  }
}

// pow_det(x, 1) == x is what lets robust DE's fallback (k = c = 1) quantize as plain scaling
// without a pow on the GPU: every subnormal, +-0 and +Inf, and every 97th pattern of the rest.
TEST(Dmath, PowOfOneIsTheIdentity) {
  for (uint32_t u = 0; u <= 0x7F800000u; u += u < 0x00800000u ? 1u : 97u) {
    const float x = f32_from_bits(u);
    ASSERT_EQ(bits(dmath::pow_det(x, 1.0f)), u) << std::hex << u;
  }
  ASSERT_EQ(bits(dmath::pow_det(-0.0f, 1.0f)), 0u);  // -0 is treated as +0 (DE passes magnitudes)
  ASSERT_EQ(bits(dmath::pow_det(f32_from_bits(0x7F7FFFFFu), 1.0f)), 0x7F7FFFFFu);
}

TEST(Dmath, PowExactCases) {
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(1e-30f, 1e30f);
  for (int i = 0; i < 10000; ++i) {
    const float x = u(g);
    ASSERT_EQ(bits(dmath::pow_det(x, 1.0f)), bits(x));
    ASSERT_EQ(dmath::pow_det(x, 0.0f), 1.0f);
  }
  for (int a = -20; a <= 20; ++a)
    for (int b = -5; b <= 5; ++b) {
      const double r = std::ldexp(1.0, a * b);
      if (r < 0x1p-126 || r > 0x1p127) continue;
      ASSERT_EQ(dmath::pow_det(std::ldexp(1.0f, a), static_cast<float>(b)), static_cast<float>(r)) << a << " " << b;
    }
}

TEST(Dmath, PowSpecialValuesFollowC99) {
  const std::vector<float> xs = {0.0f, 0.5f, 1.0f, 2.0f, kInf, kNaN, 1e-45f};
  const std::vector<float> ys = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, 3.0f, kInf, -kInf, kNaN, 1e-3f};
  for (float x : xs)
    for (float y : ys) {
      const float got = dmath::pow_det(x, y);
      const double want = std::pow(static_cast<double>(x), static_cast<double>(y));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << x << "^" << y;
      } else if (std::isinf(static_cast<float>(want)) || want == 0.0 || want == 1.0) {
        EXPECT_EQ(got, static_cast<float>(want)) << x << "^" << y;  // includes fp32 overflow
      } else if (std::fabs(want) >= 0x1p-126) {
        EXPECT_LE(ulp_err(got, want), 2.0 + std::fabs(y)) << x << "^" << y;
      }
    }
  EXPECT_TRUE(std::isnan(dmath::pow_det(-2.0f, 0.5f)));  // negative bases are not supported
}

// ---- COAT formulas: an independent implementation ------------------------------------------------

struct RefGroup {
  float k, c, s;
  double k16;  // log2(B) / log2(r) * 16 before the floor, in double
  std::vector<uint8_t> codes;
  std::vector<double> encoder_input;  // x'/s in double from the reference (to locate midpoints)
};

// COAT's kernel for one group: statistics exact in double, epsilons added in double (as the
// kernel's `float + 1e-30` does), r and c in fp32, k from double-precision log2, then the
// kernel's fp32 steps with pow evaluated in double and rounded to fp32.
RefGroup coat_reference(const std::vector<float>& x, double fmax_store, double fmax_target) {
  double mx = 0, mn = std::numeric_limits<double>::infinity();
  for (float v : x) {
    const double a = std::fabs(static_cast<double>(v));
    mx = std::max(mx, a);
    if (a > 0) mn = std::min(mn, a);
  }
  if (std::isinf(mn)) mn = 0;
  const float maxv = static_cast<float>(mx + 1e-30);
  const float minv = static_cast<float>(mn + 1e-30);
  const float r = maxv / minv;
  const float c = std::sqrt(maxv) * std::sqrt(minv);
  const double bound = fmax_target * fmax_target / 2;
  const double k16 = std::log2(bound) / std::log2(static_cast<double>(r)) * 16;
  const float k = static_cast<float>(std::floor(k16) / 16);
  auto powf_ref = [](float b, float e) {
    return static_cast<float>(std::pow(static_cast<double>(b), static_cast<double>(e)));
  };
  const float s = powf_ref(maxv / c, k) / static_cast<float>(fmax_store);
  RefGroup g{k, c, s, k16, {}, {}};
  for (float v : x) {
    const float mag = powf_ref(std::fabs(v) / c, k);
    const float xe = std::signbit(v) ? -mag : mag;
    const float enc = xe / s;
    g.codes.push_back(encode_fp8_rne<E4M3Traits>(enc, true));
    g.encoder_input.push_back(std::pow(std::fabs(static_cast<double>(v)) / c, static_cast<double>(k)) / s *
                              (std::signbit(v) ? -1 : 1));
  }
  return g;
}

// Log-normal magnitudes spanning about 10^8 (e^(+-9)), random signs, some exact zeros: what
// optimizer moments look like.
std::vector<float> lognormal_data(size_t n, uint64_t seed, double sigma = 3.0, double zero_frac = 0.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(-8.0, sigma);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = static_cast<float>(std::exp(nd(g)));
    if (g() & 1) v = -v;
    if (u(g) < zero_frac) v = 0.0f;
  }
  return x;
}

TEST(ExpandCoat, MatchesIndependentFormulasOnLogNormalData) {
  constexpr int64_t kGroups = 3000, kG = 128;
  const std::vector<float> x = lognormal_data(kGroups * kG, 21);
  const QuantSpec spec = QuantSpec::parse("e4m3:g128:de=coat");
  const Shape shape{kGroups * kG};
  const QuantizedTensor q = quantize(x.data(), shape, spec);
  const std::vector<float> y = dequantize(q);
  ASSERT_EQ(q.num_groups(), kGroups);
  int64_t k_mismatch = 0, code_mismatch = 0;
  for (int64_t gi = 0; gi < kGroups; ++gi) {
    const std::vector<float> xs(x.begin() + gi * kG, x.begin() + (gi + 1) * kG);
    const RefGroup ref = coat_reference(xs, 448, 448);
    // c: fp32 sqrt products, identical steps.
    ASSERT_EQ(bits(q.expand_c[gi]), bits(ref.c)) << "group " << gi;
    if (q.expand_k[gi] != ref.k) {
      // k can differ only where log2(B)/log2(r)*16 is within the fp32 log2 error of an integer.
      // fp32 log2 (2 ulp each) and the division put the quotient within ~6 * 2^-24 relative.
      ++k_mismatch;
      ASSERT_LT(std::fabs(ref.k16 - std::round(ref.k16)), ref.k16 * 8 * 0x1p-24) << "group " << gi;
      continue;
    }
    const float k = ref.k;
    // s: pow within (2 + k) ulp, then one fp32 division.
    ASSERT_LE(std::fabs(q.scales[gi] - ref.s) / ref.s, (3.0 + k) * 0x1p-24) << "group " << gi;
    for (int64_t j = 0; j < kG; ++j) {
      const uint8_t mine = q.codes[gi * kG + j], want = ref.codes[j];
      if (mine == want) continue;
      ++code_mismatch;
      // A differing code must be a neighbour, and the exact encoder input must sit within the
      // pow error budget of the midpoint between the two codes' values.
      ASSERT_EQ(mine & 0x80, want & 0x80);
      ASSERT_EQ(std::abs((mine & 0x7F) - (want & 0x7F)), 1) << "group " << gi << " elt " << j;
      const double a = decode_fp8<E4M3Traits>(mine), b = decode_fp8<E4M3Traits>(want);
      const double mid = (a + b) / 2, v = ref.encoder_input[j];
      ASSERT_LE(std::fabs(v - mid), (8.0 + 2 * k) * 0x1p-24 * std::fabs(v)) << "group " << gi << " elt " << j;
    }
    // Dequantize, the kernel's fp32 steps: qs = float(q) * s, e = 1.0f / k, then
    // sign(qs) * pow(|qs|, e) * c with pow from libm in double. pow_det's (2 + e) ulp (an ulp is
    // at most 2^-23 relative) plus one rounding of the final product on each side.
    const float e = 1.0f / k;
    for (int64_t j = 0; j < kG; ++j) {
      const float qs = decode_fp8<E4M3Traits>(q.codes[gi * kG + j]) * q.scales[gi];
      const double want = (qs < 0 ? -1 : 1) * std::pow(std::fabs(static_cast<double>(qs)), static_cast<double>(e)) *
                          static_cast<double>(q.expand_c[gi]);
      if (want == 0) {
        ASSERT_EQ(y[gi * kG + j], 0.0f);
        continue;
      }
      ASSERT_LE(std::fabs(y[gi * kG + j] - want) / std::fabs(want), (2.0 * (2.0 + e) + 2.0) * 0x1p-24)
          << "group " << gi << " elt " << j;
    }
  }
  std::printf("coat vs independent formulas: %ld of %ld groups with a different k, %ld of %zu codes differ\n",
              static_cast<long>(k_mismatch), static_cast<long>(kGroups), static_cast<long>(code_mismatch), x.size());
  // Both kinds of disagreement are boundary events of probability ~1e-6 per value.
  EXPECT_LE(k_mismatch, 3);
  EXPECT_LE(code_mismatch, static_cast<int64_t>(x.size()) / 10000);
  // And the range really was expanded: groups span ~10^8 and k < 1 occurs.
  float kmin = 1e9f, kmax = 0;
  for (float k : q.expand_k) {
    kmin = std::min(kmin, k);
    kmax = std::max(kmax, k);
  }
  EXPECT_LT(kmin, 1.0f);
  EXPECT_GT(kmax, 0.0f);
}

TEST(ExpandCoat, HandComputedExponent) {
  // r = 2^10: log2(100352) = 16.6147..., 16.6147/10*16 = 26.58 -> k = 26/16 = 1.625 (E4M3);
  // E5M2: log2(57344^2/2) = 30.6147..., *16/10 = 48.98 -> k = 48/16 = 3.
  EXPECT_EQ(expand_exponent(1024.0f, expand_ratio_bound(448.0f)), 1.625f);
  EXPECT_EQ(expand_exponent(1024.0f, expand_ratio_bound(57344.0f)), 3.0f);
  EXPECT_EQ(expand_ratio_bound(448.0f), 100352.0f);
  EXPECT_EQ(expand_ratio_bound(57344.0f), 1644167168.0f);
  // r = 1 (constant group): k = +Inf, as COAT's kernel (no clamp).
  EXPECT_EQ(expand_exponent(1.0f, 100352.0f), kInf);
  // Hand-checked group {1, 2^-10}: max = 1, min = 2^-10 (1e-30 vanishes in fp32), c = 2^-5,
  // k = 1.625, s = (2^5)^1.625 / 448 = 2^8.125 / 448; x'(1) / s = 448 exactly -> code 0x7E.
  const ExpandParams p = coat_expand_params(1.0f, 0x1p-10f, 448.0f, 448.0f);
  EXPECT_EQ(p.c, 0x1p-5f);
  EXPECT_EQ(p.k, 1.625f);
  EXPECT_LE(std::fabs(p.s - std::exp2(8.125) / 448) / p.s, 3 * 0x1p-24);
  EXPECT_EQ(encode_fp8_rne<E4M3Traits>(expand_value(1.0f, p), true), 0x7E);
  EXPECT_EQ(encode_fp8_rne<E4M3Traits>(expand_value(-1.0f, p), true), 0xFE);
  // The smallest element maps to 448 / r^k = 448 / 2^16.25 = 0.00528 -> subnormal code 3 (3 * 2^-9).
  EXPECT_EQ(encode_fp8_rne<E4M3Traits>(expand_value(0x1p-10f, p), true), 0x03);
}

TEST(ExpandCoat, DegenerateGroupsReproduceTheKernel) {
  // Exact agreement with the reference: the degenerate cases hit pow's exact special values.
  const std::vector<std::vector<float>> groups = {
      std::vector<float>(128, 0.75f),   // constant
      std::vector<float>(128, -3e-5f),  // constant negative
      {2.5f},                           // single element
      {0.0f, 0.0f, 1.0f, 0.0f},         // one nonzero among zeros
  };
  for (size_t t = 0; t < groups.size(); ++t) {
    const auto& xs = groups[t];
    const RefGroup ref = coat_reference(xs, 448, 448);
    const QuantizedTensor q =
        quantize(xs.data(), Shape{static_cast<int64_t>(xs.size())}, QuantSpec::parse("e4m3:g128:de=coat"));
    EXPECT_EQ(bits(q.expand_k[0]), bits(ref.k)) << "case " << t;
    EXPECT_EQ(bits(q.expand_c[0]), bits(ref.c)) << "case " << t;
    EXPECT_EQ(bits(q.scales[0]), bits(ref.s)) << "case " << t;
    for (size_t j = 0; j < xs.size(); ++j) EXPECT_EQ(q.codes[j], ref.codes[j]) << "case " << t << " elt " << j;
  }
}

// A group without a finite nonzero element has nothing to expand: k = c = s = 1, and its values
// come back as under the plain spec (zeros exact, NaN as NaN, +-Inf saturated to +-448), where
// COAT's kernel (k = +Inf) would return its epsilon 1e-30 for every element. The codes agree with
// the kernel's for the all-zero group.
TEST(ExpandCoat, GroupsWithoutFiniteNonzeroValuesQuantizeAsPlainScaling) {
  const std::vector<float> zeros(128, 0.0f), nans(128, kNaN), infs(128, kInf);
  std::vector<float> mixed(128, 0.0f);
  mixed[3] = kNaN;
  mixed[5] = -kInf;
  const RefGroup kernel = coat_reference(zeros, 448, 448);
  for (const char* spec : {"e4m3:g128:de=coat", "coat-opt", "e5m2:g128:de=coat", "e4m3:g128:de=coat:eps_add=fp32"}) {
    for (const std::vector<float>* x : std::initializer_list<const std::vector<float>*>{&zeros, &nans, &infs, &mixed}) {
      const QuantizedTensor q = quantize(x->data(), Shape{128}, QuantSpec::parse(spec));
      EXPECT_EQ(q.expand_k[0], 1.0f) << spec;
      EXPECT_EQ(q.expand_c[0], 1.0f) << spec;
      EXPECT_EQ(q.scales[0], 1.0f) << spec;
      const std::string plain = QuantSpec::parse(spec).format == Format::E5M2 ? "e5m2:g128" : "e4m3:g128";
      const QuantizedTensor p = quantize(x->data(), Shape{128}, QuantSpec::parse(plain));
      EXPECT_EQ(q.codes, p.codes) << spec;
      const std::vector<float> y = dequantize(q), yp = dequantize(p);
      for (size_t i = 0; i < y.size(); ++i) {
        if (std::isnan(yp[i])) EXPECT_TRUE(std::isnan(y[i])) << spec << " " << i;
        else EXPECT_EQ(bits(y[i]), bits(yp[i])) << spec << " " << i;
      }
    }
  }
  const QuantizedTensor z = quantize(zeros.data(), Shape{128}, QuantSpec::parse("e4m3:g128:de=coat"));
  EXPECT_EQ(z.codes, kernel.codes);  // the kernel's codes; only k, c, s and the dequantized zeros differ
  EXPECT_EQ(kernel.k, kInf);
}

TEST(ExpandCoat, ShortLastGroupAndE5M2Target) {
  // 1000 = 7 * 128 + 104: the last group is short; E5M2 storage uses E5M2's ratio bound.
  const std::vector<float> x = lognormal_data(1000, 22);
  const QuantizedTensor q = quantize(x.data(), Shape{1000}, QuantSpec::parse("e5m2:g128:de=coat"));
  ASSERT_EQ(q.num_groups(), 8);
  for (int64_t gi = 0; gi < 8; ++gi) {
    const int64_t b = gi * 128, e = std::min<int64_t>(1000, b + 128);
    const std::vector<float> xs(x.begin() + b, x.begin() + e);
    double mx = 0, mn = 1e300;
    for (float v : xs) {
      mx = std::max(mx, std::fabs(static_cast<double>(v)));
      if (v != 0) mn = std::min(mn, std::fabs(static_cast<double>(v)));
    }
    const float r = static_cast<float>(mx + 1e-30) / static_cast<float>(mn + 1e-30);
    const double qk = std::log2(57344.0 * 57344.0 / 2) / std::log2(static_cast<double>(r)) * 16;
    if (std::fabs(qk - std::round(qk)) < 1e-4) continue;  // too close to a boundary to judge
    EXPECT_EQ(q.expand_k[gi], static_cast<float>(std::floor(qk) / 16)) << gi;
  }
  // de_target=e4m3 on E5M2 storage: the E4M3 bound (smaller k).
  const QuantizedTensor q4 = quantize(x.data(), Shape{1000}, QuantSpec::parse("e5m2:g128:de=coat:de_target=e4m3"));
  for (int64_t gi = 0; gi < 8; ++gi) EXPECT_LT(q4.expand_k[gi], q.expand_k[gi]);
}

// ---- robust mode ---------------------------------------------------------------------------------

// A mix of ordinary and hostile groups.
std::vector<float> hostile_groups(int64_t groups, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> x(static_cast<size_t>(groups) * 128);
  for (int64_t gi = 0; gi < groups; ++gi) {
    float* p = x.data() + gi * 128;
    const int kind = static_cast<int>(gi % 10);
    for (int j = 0; j < 128; ++j) {
      double v = 0;
      switch (kind) {
        case 0:
          v = std::exp(nd(g) * 4 - 6) * (g() & 1 ? 1 : -1);
          break;  // log-normal, wide
        case 1:
          v = nd(g);
          break;  // normal
        case 2:
          v = u(g) * 3 + 1;
          break;  // narrow positive
        case 3:
          v = 0;
          break;  // all zero
        case 4:
          v = 1.25;
          break;  // constant
        case 5:
          v = j == 17 ? -7.0 : 0.0;
          break;  // single nonzero
        case 6:
          v = (j % 2 ? 1 : -1) * std::exp(nd(g) * 8);
          break;  // sign-mixed, huge range
        case 7:
          v = std::exp(nd(g)) * 1e-41;
          break;  // fp32 subnormals
        case 8:
          v = (u(g) < 0.7 ? 0.0 : std::exp(nd(g) * 3));
          break;  // mostly zeros
        case 9:
          v = std::exp(nd(g) * 0.5) * 1e37 * (g() & 1 ? 1 : -1);
          break;  // near FLT_MAX
      }
      p[j] = static_cast<float>(v);
    }
  }
  return x;
}

long double group_sse(const float* x, const float* y, int n) {
  long double s = 0;
  for (int j = 0; j < n; ++j) {
    const long double d = static_cast<long double>(x[j]) - static_cast<long double>(y[j]);
    s += d * d;
  }
  return s;
}

TEST(ExpandRobust, NeverNonFiniteAndNeverWorseThanPlainScaling) {
  constexpr int64_t kGroups = 6000;
  for (const char* fmt : {"e4m3", "e5m2"}) {
    const std::vector<float> x = hostile_groups(kGroups, 31);
    const Shape shape{kGroups * 128};
    const QuantizedTensor qr = quantize(x.data(), shape, QuantSpec::parse(std::string(fmt) + ":g128:de=robust"));
    const QuantizedTensor qp = quantize(x.data(), shape, QuantSpec::parse(std::string(fmt) + ":g128"));
    const std::vector<float> yr = dequantize(qr), yp = dequantize(qp);
    int64_t expanded = 0;
    for (int64_t gi = 0; gi < kGroups; ++gi) {
      ASSERT_TRUE(std::isfinite(qr.expand_k[gi]) && qr.expand_k[gi] > 0) << fmt << " group " << gi;
      ASSERT_TRUE(std::isfinite(qr.expand_c[gi]) && qr.expand_c[gi] > 0) << fmt << " group " << gi;
      ASSERT_TRUE(std::isfinite(qr.scales[gi]) && qr.scales[gi] > 0) << fmt << " group " << gi;
      for (int j = 0; j < 128; ++j) {
        ASSERT_TRUE(std::isfinite(yr[gi * 128 + j])) << fmt << " group " << gi << " elt " << j;
        ASSERT_NE(qr.codes[gi * 128 + j] & 0x7F, 0x7F) << "NaN code";
      }
      const long double sr = group_sse(x.data() + gi * 128, yr.data() + gi * 128, 128);
      const long double sp = group_sse(x.data() + gi * 128, yp.data() + gi * 128, 128);
      // The library decides on fp64 tree sums; each differs from the long double sum by at most
      // ceil(log2 128) = 7 roundings of 2^-53 relative (plus 2^-53 per squared term).
      ASSERT_LE(sr, sp * (1.0L + 16.0L * 0x1p-53L)) << fmt << " group " << gi;
      if (qr.expand_k[gi] != 1.0f || qr.expand_c[gi] != 1.0f) {
        ++expanded;
      } else {
        // Fallback groups are plain absmax scaling, code for code.
        for (int j = 0; j < 128; ++j) ASSERT_EQ(qr.codes[gi * 128 + j], qp.codes[gi * 128 + j]) << gi;
      }
      if (gi % 10 == 3) {
        EXPECT_EQ(sr, 0.0L) << "all-zero group is exact";
      }
      if (gi % 10 == 4 || gi % 10 == 5) {
        EXPECT_EQ(qr.expand_k[gi], 1.0f) << "constant / single-nonzero group falls back";
      }
    }
    // Expansion does win on the wide-range groups.
    EXPECT_GT(expanded, kGroups / 10) << fmt;
  }
}

TEST(ExpandRobust, TreeSumOrderIsTheDocumentedBisection) {
  // sum of 5 terms = ((t0 + t1) + (t2 + t3)) + t4
  std::vector<double> v = {1e16, 1.0, -1e16, 1.0, 3.0};
  const double want = ((1e16 + 1.0) + (-1e16 + 1.0)) + 3.0;
  EXPECT_EQ(sq_err_tree_sum(v.data(), 5), want);
  std::vector<double> one = {2.5};
  EXPECT_EQ(sq_err_tree_sum(one.data(), 1), 2.5);
  EXPECT_EQ(sq_err_tree_sum(nullptr, 0), 0.0);
}

}  // namespace
}  // namespace fp8sim
