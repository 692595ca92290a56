// The speed replay's CUDA kernels (gpu/speed/kernels.hpp) against the CPU references in
// sim/speed/nonlinear_ref.hpp, on awkward and model-like shapes, with fresh random inputs and
// poisoned outputs. Exact kernels (casts, group quantization, adds, transposes, RoPE with a shared
// table, reductions, embedding) must match bit for bit; kernels with exp / rsqrt / row sums
// compare within the bounds derived beside each check. Skips without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/common/device.hpp"
#include "gpu/speed/kernels.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/scale.hpp"
#include "sim/speed/group16.hpp"
#include "sim/speed/nonlinear_ref.hpp"

namespace fp8sim::gpu::speed {
namespace {

namespace ref = fp8sim::speed::ref;
using ref::bf16f;
using ref::to_bf16;

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    if (!device_info().available) GTEST_SKIP() << device_info().why_not; \
  } while (0)

std::mt19937_64& rng() {
  static std::mt19937_64 g(20251130);
  return g;
}
std::vector<uint16_t> random_bf16(size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(d(rng()));
  return v;
}
std::vector<uint8_t> random_codes(size_t n, bool e5m2) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& c : v) {
    c = static_cast<uint8_t>(d(rng()));
    if (e5m2 && (c & 0x7C) == 0x7C) c &= static_cast<uint8_t>(~0x04);
    if (!e5m2 && (c & 0x7F) == 0x7F) c ^= 0x01;
  }
  return v;
}
std::vector<uint16_t> random_scales(size_t n) {
  std::uniform_real_distribution<float> d(-12.0f, -4.0f);
  std::vector<uint16_t> v(n);
  for (auto& s : v) s = to_bf16(std::exp2(d(rng())));
  return v;
}
std::vector<float> to_float(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16f(v[i]);
  return f;
}
template <class T>
DeviceBuffer<T> poisoned(size_t n) {
  DeviceBuffer<T> b(n);
  b.fill_bytes(0xFF);  // bf16 0xFFFF is NaN, fp8 0xFF is NaN / -inf-ish: an unwritten element cannot match
  return b;
}
void sync() { FP8SIM_CUDA_CHECK(cudaDeviceSynchronize()); }

// |a - b| within one bf16 rounding of either side: bf16 keeps 8 significant bits, so two values
// that each round the same real number differ by at most 2^-7 of the larger.
::testing::AssertionResult within_bf16_ulp(float a, float b, float abs_floor = 0.0f) {
  const float tol = std::ldexp(std::max(std::fabs(a), std::fabs(b)), -7) + abs_floor;
  if (std::fabs(a - b) <= tol && !std::isnan(a) && !std::isnan(b)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs " << b << " (tolerance " << tol << ")";
}

template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << ": got " << +got[first] << ", want "
                     << +want[first];
}

// ------------------------------------------------------------------------------- RMSNorm
struct NormCase {
  int64_t rows, cols;
};
const NormCase kNormCases[] = {{5, 1024}, {37, 5120}, {3, 12288}, {600, 4096}};

// A norm kernel's random input of n elements: bf16 (x), or E4M3 codes with one bf16 scale per 16
// (xq, xs: the g16 kernels' input); xf holds its values as the reference reads them.
struct NormInput {
  std::vector<float> xf;
  DeviceBuffer<uint16_t> x;
  DeviceBuffer<uint8_t> xq;
  DeviceBuffer<uint16_t> xs;
};
NormInput norm_input(size_t n, bool g16) {
  NormInput in;
  if (g16) {
    const auto codes = random_codes(n, false);
    const auto sc = random_scales(n / 16);
    in.xf = ref::dequantize_g16(codes.data(), sc.data(), static_cast<int64_t>(n), false);
    in.xq = to_device(codes);
    in.xs = to_device(sc);
  } else {
    const auto xb = random_bf16(n);
    in.xf = to_float(xb);
    in.x = to_device(xb);
  }
  return in;
}

TEST(SpeedKernels, RmsNormForwardBf16AndG16) {
  SKIP_WITHOUT_GPU();
  for (const NormCase& c : kNormCases) {
    const size_t n = static_cast<size_t>(c.rows * c.cols);
    for (bool g16 : {false, true}) {
      auto [xf, x, xq, xs] = norm_input(n, g16);
      const auto w = random_bf16(static_cast<size_t>(c.cols), 0.5f);
      auto dw = to_device(w);
      auto y = poisoned<uint16_t>(n);
      auto rstd = poisoned<float>(static_cast<size_t>(c.rows));
      auto rowmax = poisoned<float>(static_cast<size_t>(c.rows));
      if (g16)
        ASSERT_TRUE(rmsnorm_fwd_g16(xq.get(), xs.get(), dw.get(), y.get(), rstd.get(), rowmax.get(), c.rows, c.cols,
                                    1e-5f, nullptr));
      else ASSERT_TRUE(rmsnorm_fwd_bf16(x.get(), dw.get(), y.get(), rstd.get(), c.rows, c.cols, 1e-5f, nullptr));
      sync();
      ref::Bf16 yr;
      std::vector<float> rr, mr;
      ref::rmsnorm_fwd(xf, w, c.rows, c.cols, 1e-5f, yr, rr, mr);
      const auto yg = y.download();
      const auto rg = rstd.download();
      // rstd: the kernel sums squares (all positive) per thread over at most 4 chunks of 16, then
      // over 256 threads in a tree: relative error <= (64 + 8) * 2^-24 = 4.3e-6 on the sum, half
      // that on rstd, plus rsqrtf's 2 ulp: under 1e-5.
      for (int64_t r = 0; r < c.rows; ++r) EXPECT_NEAR(rg[r] / rr[r], 1.0f, 1e-5f) << "row " << r;
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (!within_bf16_ulp(bf16f(yg[i]), bf16f(yr[i]))) ++bad;
      EXPECT_EQ(bad, 0u) << c.rows << "x" << c.cols << (g16 ? " g16" : " bf16");
      if (g16) {
        const auto mg = rowmax.download();
        for (int64_t r = 0; r < c.rows; ++r) {
          float m = 0;  // the kernel's max is of what it stored
          for (int64_t k = 0; k < c.cols; ++k) m = std::max(m, std::fabs(bf16f(yg[r * c.cols + k])));
          EXPECT_EQ(mg[r], m) << "row " << r;
        }
      }
    }
  }
}

TEST(SpeedKernels, RmsNormBackwardBf16AndG16) {
  SKIP_WITHOUT_GPU();
  for (const NormCase& c : kNormCases) {
    const size_t n = static_cast<size_t>(c.rows * c.cols);
    for (bool g16 : {false, true}) {
      auto [xf, x, xq, xs] = norm_input(n, g16);
      const auto w = random_bf16(static_cast<size_t>(c.cols), 0.5f);
      const auto dy = random_bf16(n);
      std::vector<float> rstd(static_cast<size_t>(c.rows));
      std::uniform_real_distribution<float> ud(0.5f, 2.0f);
      for (auto& r : rstd) r = ud(rng());
      auto dw_ = to_device(w);
      auto dr = to_device(rstd);
      auto ddy = to_device(dy);
      auto dx = poisoned<uint16_t>(n);
      auto part = poisoned<float>(static_cast<size_t>(rmsnorm_bwd_partial_rows(c.rows) * c.cols));
      auto dwg = poisoned<float>(static_cast<size_t>(c.cols));
      if (g16)
        ASSERT_TRUE(rmsnorm_bwd_g16(xq.get(), xs.get(), dw_.get(), dr.get(), ddy.get(), dx.get(), part.get(), dwg.get(),
                                    c.rows, c.cols, nullptr));
      else
        ASSERT_TRUE(rmsnorm_bwd_bf16(x.get(), dw_.get(), dr.get(), ddy.get(), dx.get(), part.get(), dwg.get(), c.rows,
                                     c.cols, nullptr));
      sync();
      ref::Bf16 dxr;
      std::vector<float> dwr;
      ref::rmsnorm_bwd(xf, w, rstd, dy, c.rows, c.cols, dxr, dwr);
      const auto dxg = dx.download();
      const auto dwgh = dwg.download();
      // dx = (w dy - xhat c1) r. The kernel's c1 is an fp32 sum in another order: its absolute
      // error is at most (terms) * 2^-24 * sum|terms| / cols = 2^-24 * S1 (S1 = sum |xhat w dy|),
      // scaled by |xhat| r in dx; the fp32 products and the difference add 2^-23 (|w dy| +
      // |xhat c1|) r. Beyond that, one bf16 rounding on each side (within_bf16_ulp).
      for (int64_t r = 0; r < c.rows; ++r) {
        double s1 = 0, dot = 0;
        for (int64_t k = 0; k < c.cols; ++k) {
          const double t = static_cast<double>(xf[r * c.cols + k] * rstd[r]) * bf16f(w[k]) * bf16f(dy[r * c.cols + k]);
          s1 += std::fabs(t);
          dot += t;
        }
        const double c1 = dot / c.cols;
        size_t bad = 0;
        for (int64_t k = 0; k < c.cols; ++k) {
          const double xhat = std::fabs(xf[r * c.cols + k] * rstd[r]);
          const double wdy = std::fabs(static_cast<double>(bf16f(w[k])) * bf16f(dy[r * c.cols + k]));
          const float floor = static_cast<float>(
              (2 * xhat * std::ldexp(s1, -24) + std::ldexp(wdy + xhat * std::fabs(c1), -23)) * rstd[r] + 1e-30);
          if (!within_bf16_ulp(bf16f(dxg[r * c.cols + k]), bf16f(dxr[r * c.cols + k]), floor)) ++bad;
        }
        EXPECT_EQ(bad, 0u) << "row " << r << " of " << c.rows << "x" << c.cols;
      }
      // dw: an fp32 sum over rows in another order (per-block partials, then a column sum):
      // (rows + 2) * 2^-24 of the sum of |terms|.
      for (int64_t k = 0; k < c.cols; ++k) {
        double mag = 0;
        for (int64_t r = 0; r < c.rows; ++r)
          mag += std::fabs(static_cast<double>(bf16f(dy[r * c.cols + k])) * (xf[r * c.cols + k] * rstd[r]));
        EXPECT_NEAR(dwgh[k], dwr[k], std::ldexp(mag, -24) * (c.rows + 2) + 1e-30) << "column " << k;
      }
    }
  }
}

// ------------------------------------------------------------------------------- SiLU * Mul
TEST(SpeedKernels, SiluMulForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  for (size_t n : {size_t{16}, size_t{4096 * 3}, size_t{11008 * 7}}) {
    for (bool g16 : {false, true}) {
      std::vector<float> g, u;
      DeviceBuffer<uint16_t> gb, ub;
      DeviceBuffer<uint8_t> gq, uq;
      DeviceBuffer<uint16_t> gs, us;
      if (g16) {
        const auto gc = random_codes(n, false), uc = random_codes(n, false);
        const auto gsc = random_scales(n / 16), usc = random_scales(n / 16);
        g = ref::dequantize_g16(gc.data(), gsc.data(), static_cast<int64_t>(n), false);
        u = ref::dequantize_g16(uc.data(), usc.data(), static_cast<int64_t>(n), false);
        gq = to_device(gc), uq = to_device(uc), gs = to_device(gsc), us = to_device(usc);
      } else {
        const auto g_ = random_bf16(n, 2.0f), u_ = random_bf16(n);
        g = to_float(g_), u = to_float(u_);
        gb = to_device(g_), ub = to_device(u_);
      }
      const auto dm = random_bf16(n);
      auto ddm = to_device(dm);
      auto m = poisoned<uint16_t>(n), dg = poisoned<uint16_t>(n), du = poisoned<uint16_t>(n);
      auto sq = poisoned<uint8_t>(n);
      auto ss = poisoned<uint16_t>(n / 16), mg = poisoned<uint16_t>(n / 16), dgm = poisoned<uint16_t>(n / 16),
           dum = poisoned<uint16_t>(n / 16);
      if (g16) {
        ASSERT_TRUE(silu_mul_fwd_g16(gq.get(), gs.get(), uq.get(), us.get(), sq.get(), ss.get(), m.get(), mg.get(),
                                     static_cast<int64_t>(n), nullptr));
        ASSERT_TRUE(silu_mul_bwd_g16(gq.get(), gs.get(), uq.get(), us.get(), ddm.get(), dg.get(), dgm.get(), du.get(),
                                     dum.get(), static_cast<int64_t>(n), nullptr));
      } else {
        ASSERT_TRUE(silu_mul_fwd_bf16(gb.get(), ub.get(), m.get(), static_cast<int64_t>(n), nullptr));
        ASSERT_TRUE(
            silu_mul_bwd_bf16(gb.get(), ub.get(), ddm.get(), dg.get(), du.get(), static_cast<int64_t>(n), nullptr));
      }
      sync();
      ref::Bf16 mr, dgr, dur;
      std::vector<float> silu;
      ref::silu_mul_fwd(g, u, mr, silu);
      ref::silu_mul_bwd(g, u, dm, dgr, dur);
      const auto mh = m.download(), dgh = dg.download(), duh = du.download();
      // The kernel's sigmoid uses __expf and a fast divide: s within 2^-20 relative of the
      // reference's. m and du are products of s (well conditioned): one bf16 ulp. dg has the
      // factor 1 + g(1 - s), which cancels near g = -1.28: its absolute error is up to
      // 2^-20 |g| s |dm u|, the floor below (with margin 2).
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const float s = 1.0f / (1.0f + std::exp(-g[i]));
        const float dg_floor = std::ldexp(std::fabs(bf16f(dm[i]) * u[i]) * s * (1.0f + std::fabs(g[i])), -19);
        if (!within_bf16_ulp(bf16f(mh[i]), bf16f(mr[i]), 1e-30f)) ++bad;
        if (!within_bf16_ulp(bf16f(dgh[i]), bf16f(dgr[i]), dg_floor + 1e-30f)) ++bad;
        if (!within_bf16_ulp(bf16f(duh[i]), bf16f(dur[i]), 1e-30f)) ++bad;
      }
      EXPECT_EQ(bad, 0u) << n << (g16 ? " g16" : " bf16");
      if (g16) {
        // SiLU saved as E4M3 1x16: within half an E4M3 step (2^-4 relative for normals, 2^-10 x
        // scale for subnormals) plus the scale's own bf16 round-up, of the fp32 SiLU.
        const auto sqh = sq.download();
        const auto ssh = ss.download();
        const auto deq = ref::dequantize_g16(sqh.data(), ssh.data(), static_cast<int64_t>(n), false);
        size_t far = 0;
        for (size_t i = 0; i < n; ++i) {
          const float scale = bf16f(ssh[i / 16]);
          if (std::fabs(deq[i] - silu[i]) > std::ldexp(std::fabs(silu[i]), -4) * 1.01f + std::ldexp(scale, -10)) ++far;
        }
        EXPECT_EQ(far, 0u);
        // Group maxima describe what was stored, exactly.
        expect_equal(mg.download(), ref::group_max(mh), "m gmax");
        expect_equal(dgm.download(), ref::group_max(dgh), "dg gmax");
        expect_equal(dum.download(), ref::group_max(duh), "du gmax");
      }
    }
  }
}

// ------------------------------------------------------------------------------- exact kernels
TEST(SpeedKernels, AddVariantsAreExact) {
  SKIP_WITHOUT_GPU();
  for (size_t n : {size_t{16}, size_t{4096 * 5 + 16}}) {
    const auto a = random_bf16(n), b = random_bf16(n);
    ref::Bf16 c(n);
    for (size_t i = 0; i < n; ++i) c[i] = to_bf16(bf16f(a[i]) + bf16f(b[i]));
    std::vector<uint8_t> cq(n);
    std::vector<uint16_t> cs(n / 16);
    const auto cf = to_float(c);
    ref::quantize_g16(cf.data(), static_cast<int64_t>(n), false, cq.data(), cs.data());
    auto da = to_device(a), db = to_device(b);
    for (int mode = 0; mode < 3; ++mode) {
      auto dc = poisoned<uint16_t>(n);
      auto dq = poisoned<uint8_t>(n);
      auto ds = poisoned<uint16_t>(n / 16);
      bool launched = false;
      if (mode == 0) launched = add_bf16(da.get(), db.get(), dc.get(), static_cast<int64_t>(n), nullptr);
      if (mode == 1)
        launched = add_bf16_g16(da.get(), db.get(), dc.get(), dq.get(), ds.get(), static_cast<int64_t>(n), nullptr);
      if (mode == 2) launched = add_bf16_gmax(da.get(), db.get(), dc.get(), ds.get(), static_cast<int64_t>(n), nullptr);
      ASSERT_TRUE(launched);
      sync();
      expect_equal(dc.download(), c, "c");
      if (mode == 1) {
        expect_equal(dq.download(), cq, "c codes");
        expect_equal(ds.download(), cs, "c scales");
      }
      if (mode == 2) expect_equal(ds.download(), ref::group_max(c), "c gmax");
    }
  }
  EXPECT_FALSE(add_bf16(nullptr, nullptr, nullptr, 15, nullptr));  // not whole groups: refused, nothing launched
}

TEST(SpeedKernels, QuantizeG16GroupMaxAndReductionsAreExact) {
  SKIP_WITHOUT_GPU();
  for (size_t n : {size_t{16}, size_t{4096 * 33}}) {
    const auto x = random_bf16(n, 3.0f);
    const auto xf = to_float(x);
    auto dx = to_device(x);
    for (bool e5m2 : {false, true}) {
      std::vector<uint8_t> q(n);
      std::vector<uint16_t> s(n / 16);
      ref::quantize_g16(xf.data(), static_cast<int64_t>(n), e5m2, q.data(), s.data());
      auto dq = poisoned<uint8_t>(n);
      auto ds = poisoned<uint16_t>(n / 16);
      ASSERT_TRUE(quantize_g16(dx.get(), dq.get(), ds.get(), static_cast<int64_t>(n), e5m2, nullptr));
      sync();
      expect_equal(dq.download(), q, e5m2 ? "e5m2 codes" : "e4m3 codes");
      expect_equal(ds.download(), s, "scales");
    }
    auto gm = poisoned<uint16_t>(n / 16);
    ASSERT_TRUE(group_max(dx.get(), gm.get(), static_cast<int64_t>(n), nullptr));
    auto out = poisoned<float>(3);
    ASSERT_TRUE(amax_bf16(dx.get(), static_cast<int64_t>(n), out.get(), nullptr));
    ASSERT_TRUE(reduce_max_bf16(gm.get(), static_cast<int64_t>(n / 16), out.get() + 1, nullptr));
    std::vector<float> rows(1 + n / 7);
    std::uniform_real_distribution<float> ud(0.0f, 5.0f);
    for (auto& r : rows) r = ud(rng());
    auto drows = to_device(rows);
    ASSERT_TRUE(reduce_max_f32(drows.get(), static_cast<int64_t>(rows.size()), out.get() + 2, nullptr));
    sync();
    const auto gmr = ref::group_max(x);
    expect_equal(gm.download(), gmr, "group max");
    float amax = 0;
    for (float v : xf) amax = std::max(amax, std::fabs(v));
    const auto o = out.download();
    EXPECT_EQ(o[0], amax);
    EXPECT_EQ(o[1], bf16f(*std::max_element(gmr.begin(), gmr.end())));  // positive bf16 order = value order
    EXPECT_EQ(o[2], *std::max_element(rows.begin(), rows.end()));
  }
}

TEST(SpeedKernels, CastTransposeEveryVariantIsExact) {
  SKIP_WITHOUT_GPU();
  const std::pair<int64_t, int64_t> shapes[] = {{16, 16}, {48, 176}, {144, 1040}, {256, 4096}, {1024, 272}};
  for (auto [rows, cols] : shapes) {
    const size_t n = static_cast<size_t>(rows * cols);
    const auto x = random_bf16(n, 2.0f);
    float amax = 0;
    for (uint16_t v : x) amax = std::max(amax, std::fabs(bf16f(v)));
    auto dx = to_device(x);
    for (bool e5m2 : {false, true}) {
      std::vector<uint8_t> out, out_t;
      const float given_amax = amax * 0.75f;  // some values saturate: SATFINITE must agree too
      ref::cast(x, rows, cols, given_amax, e5m2, out, out_t);
      for (int variant = 0; variant < 3; ++variant) {  // plain+transposed+amax, transposed only, plain only
        auto scal = to_device(std::vector<float>{given_amax, 0.0f});
        auto o = poisoned<uint8_t>(n), ot = poisoned<uint8_t>(n);
        ASSERT_TRUE(cast_transpose(dx.get(), rows, cols, scal.get(), e5m2, variant == 1 ? nullptr : o.get(),
                                   variant == 2 ? nullptr : ot.get(), variant == 0 ? scal.get() + 1 : nullptr,
                                   nullptr));
        sync();
        if (variant != 1) expect_equal(o.download(), out, "cast");
        if (variant != 2) expect_equal(ot.download(), out_t, "cast transposed");
        if (variant == 0) {
          EXPECT_EQ(scal.download()[1], amax) << rows << "x" << cols;
        }
      }
      // FP8 -> FP8 transpose of the codes.
      auto dq = to_device(out);
      auto dqt = poisoned<uint8_t>(n);
      ASSERT_TRUE(transpose_fp8(dq.get(), rows, cols, dqt.get(), nullptr));
      sync();
      expect_equal(dqt.download(), out_t, "fp8 transpose");
    }
  }
  EXPECT_FALSE(cast_transpose_supported(20, 64, true));  // transposed rows must be whole 16-byte pieces
  EXPECT_TRUE(cast_transpose_supported(20, 64, false));
}

TEST(SpeedKernels, RopeForwardBackwardMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const int64_t seq = 48, tokens = 96, heads = 4, kv = 2, d = 64;
  DeviceBuffer<float2> table(static_cast<size_t>(seq * d / 2));
  rope_table(table.get(), seq, d, 10000.0f, nullptr);
  std::vector<float> cs(static_cast<size_t>(seq * d));
  FP8SIM_CUDA_CHECK(cudaMemcpy(cs.data(), table.get(), cs.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_NEAR(cs[2 * (5 * d / 2 + 0)], std::cos(5.0), 1e-6);  // position 5, frequency 1
  EXPECT_NEAR(cs[2 * (5 * d / 2 + 0) + 1], std::sin(5.0), 1e-6);
  for (bool backward : {false, true}) {
    auto q = random_bf16(static_cast<size_t>(tokens * heads * d)),
         k = random_bf16(static_cast<size_t>(tokens * kv * d));
    auto dq = to_device(q), dk = to_device(k);
    ASSERT_TRUE(rope(dq.get(), dk.get(), table.get(), tokens, heads, kv, d, seq, backward, nullptr));
    sync();
    ref::rope(q, tokens, heads, d, seq, cs, backward);
    ref::rope(k, tokens, kv, d, seq, cs, backward);
    expect_equal(dq.download(), q, "q");
    expect_equal(dk.download(), k, "k");
  }
}

TEST(SpeedKernels, CrossEntropyAndEmbedding) {
  SKIP_WITHOUT_GPU();
  const int64_t tokens = 37, vocab = 1000, hidden = 128;
  const auto logits = random_bf16(static_cast<size_t>(tokens * vocab), 3.0f);
  std::vector<int32_t> labels(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> ld(0, static_cast<int32_t>(vocab - 1));
  for (auto& l : labels) l = ld(rng());
  auto dl = to_device(logits);
  auto dlab = to_device(labels);
  auto loss = poisoned<float>(static_cast<size_t>(tokens));
  auto dlog = poisoned<uint16_t>(static_cast<size_t>(tokens * vocab));
  ASSERT_TRUE(cross_entropy(dl.get(), dlab.get(), loss.get(), dlog.get(), tokens, vocab, nullptr));
  sync();
  std::vector<float> lr;
  ref::Bf16 dr;
  ref::cross_entropy(logits, labels, tokens, vocab, lr, dr);
  const auto lg = loss.download();
  const auto dg = dlog.download();
  // __expf / __logf: a few fp32 ulp each; the loss is ~log(vocab) ~ 7: 1e-4 absolute is 100x that.
  for (int64_t t = 0; t < tokens; ++t) EXPECT_NEAR(lg[t], lr[t], 1e-4f) << t;
  size_t bad = 0;
  for (size_t i = 0; i < dg.size(); ++i)
    if (!within_bf16_ulp(bf16f(dg[i]), bf16f(dr[i]), 1e-6f / tokens)) ++bad;
  EXPECT_EQ(bad, 0u);

  // Embedding: unique ids, so the backward scatter has one add per row and is exact.
  const int64_t vocab2 = 300;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  std::vector<int32_t> perm(static_cast<size_t>(vocab2));
  for (int32_t i = 0; i < vocab2; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng());
  std::copy(perm.begin(), perm.begin() + tokens, ids.begin());
  const auto table = random_bf16(static_cast<size_t>(vocab2 * hidden));
  const auto dy = random_bf16(static_cast<size_t>(tokens * hidden));
  auto dids = to_device(ids);
  auto dtab = to_device(table), ddy = to_device(dy);
  auto out = poisoned<uint16_t>(static_cast<size_t>(tokens * hidden));
  auto dtable = poisoned<float>(static_cast<size_t>(vocab2 * hidden));
  ASSERT_TRUE(embedding_fwd(dids.get(), dtab.get(), out.get(), tokens, hidden, nullptr));
  ASSERT_TRUE(embedding_bwd(dids.get(), ddy.get(), dtable.get(), tokens, hidden, vocab2, nullptr));
  sync();
  std::vector<uint16_t> out_ref(static_cast<size_t>(tokens * hidden));
  std::vector<float> dt_ref(static_cast<size_t>(vocab2 * hidden), 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < hidden; ++h) {
      out_ref[t * hidden + h] = table[ids[t] * hidden + h];
      dt_ref[ids[t] * hidden + h] = bf16f(dy[t * hidden + h]);
    }
  expect_equal(out.download(), out_ref, "embedding forward");
  expect_equal(dtable.download(), dt_ref, "embedding backward");
}

// ------------------------------------------------------------------------- block quantize
// The CPU reference is sim/quant itself: the row-wise copy is x quantized with the preset, the
// column-wise copy x^T quantized with it (transposed back for MXFP8's in-place layout).
std::vector<uint16_t> transpose16(const std::vector<uint16_t>& x, int64_t rows, int64_t cols) {
  std::vector<uint16_t> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}
template <class T>
std::vector<T> transpose_any(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<T> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// Inputs with every kind of group: normal values of several magnitudes by row, an all-zero block
// (amax below amax_floor), a tiny one, a row of large values.
std::vector<uint16_t> block_inputs(int64_t rows, int64_t cols) {
  std::vector<uint16_t> x = random_bf16(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = bf16f(x[r * cols + c]) * std::exp2(static_cast<float>(r % 13) - 6.0f);
      if (r < 32 && c < 32) v = 0.0f;
      if (r >= 32 && r < 64 && c < 32) v *= 1e-30f;
      if (r == rows - 1) v *= 3e4f;
      x[r * cols + c] = to_bf16(v);
    }
  return x;
}

std::vector<float> e8m0_to_float(const std::vector<uint8_t>& s) {
  std::vector<float> f(s.size());
  for (size_t i = 0; i < s.size(); ++i) f[i] = decode_e8m0(s[i]);
  return f;
}
std::vector<uint32_t> float_bits(const std::vector<float>& f) {
  std::vector<uint32_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) std::memcpy(&b[i], &f[i], 4);
  return b;
}

struct BlockCase {
  const char* preset;
  int group;
  bool block2d, transposed;
  int64_t rows, cols;
};

TEST(SpeedKernels, BlockQuantizeEqualsSimQuantForDeepSeekAndMxfp8) {
  SKIP_WITHOUT_GPU();
  const BlockCase cases[] = {
      {"deepseek-act", 128, false, true, 256, 384}, {"deepseek-act", 128, false, true, 384, 1024},
      {"deepseek-w", 128, true, true, 256, 384},    {"deepseek-w", 128, true, true, 128, 1152},
      {"mxfp8", 32, false, false, 96, 160},  // partial tiles both ways
      {"mxfp8", 32, false, false, 256, 4096},
  };
  for (const BlockCase& c : cases) {
    const std::string ctx = fmt::format("{} {}x{}", c.preset, c.rows, c.cols);
    const QuantSpec spec = QuantSpec::parse(c.preset);
    const std::vector<uint16_t> x = block_inputs(c.rows, c.cols);
    const std::vector<int64_t> shape{c.rows, c.cols}, tshape{c.cols, c.rows};
    const QuantizedTensor row = quantize(x.data(), shape, spec);
    const QuantizedTensor col = quantize(transpose16(x, c.rows, c.cols).data(), tshape, spec);

    BlockQuantizeParams bp;
    bp.rows = c.rows;
    bp.cols = c.cols;
    bp.group = c.group;
    bp.block2d = c.block2d;
    bp.col_transposed = c.transposed;
    bp.e8m0 = spec.scale == ScaleMode::E8M0;
    bp.saturate = spec.saturation == Saturation::Finite;
    bp.sc = scale_consts(spec);
    ASSERT_TRUE(block_quantize_supported(bp)) << ctx;
    const size_t n = static_cast<size_t>(c.rows * c.cols), ns = row.scales.size();
    ASSERT_EQ(col.scales.size(), ns) << ctx;
    const size_t sbytes = bp.e8m0 ? 1 : 4;
    auto dx = to_device(x);
    auto qr = poisoned<uint8_t>(n), qc = poisoned<uint8_t>(n);
    auto sr = poisoned<uint8_t>(ns * sbytes), sc = poisoned<uint8_t>(ns * sbytes);
    ASSERT_TRUE(block_quantize(dx.get(), bp, qr.get(), sr.get(), qc.get(), sc.get(), nullptr)) << ctx;
    sync();
    expect_equal(qr.download(), row.codes, (ctx + " row-wise codes").c_str());
    // The column-wise copy: transposed as it is (DeepSeek), or back in x's layout (MXFP8).
    const std::vector<uint8_t> want_qc = c.transposed ? col.codes : transpose_any(col.codes, c.cols, c.rows);
    expect_equal(qc.download(), want_qc, (ctx + " column-wise codes").c_str());
    auto scales_of = [&](const DeviceBuffer<uint8_t>& b) {
      const std::vector<uint8_t> raw = b.download();
      if (bp.e8m0) return e8m0_to_float(raw);
      std::vector<float> f(ns);
      std::memcpy(f.data(), raw.data(), ns * 4);
      return f;
    };
    expect_equal(float_bits(scales_of(sr)), float_bits(row.scales), (ctx + " row-wise scales").c_str());
    // MXFP8's column scales in x's layout: (rows / 32, cols) from x^T's (cols, rows / 32).
    const std::vector<float> want_sc = c.transposed ? col.scales : transpose_any(col.scales, c.cols, c.rows / c.group);
    expect_equal(float_bits(scales_of(sc)), float_bits(want_sc), (ctx + " column-wise scales").c_str());
  }
  // Shapes outside the kernel are refused, launching nothing.
  BlockQuantizeParams bad;
  bad.rows = 100;
  bad.cols = 128;
  EXPECT_FALSE(block_quantize_supported(bad));
  bad.rows = 128;
  bad.group = 32;
  bad.col_transposed = true;
  EXPECT_FALSE(block_quantize_supported(bad));
}

TEST(SpeedKernels, DequantizeMxEqualsSimQuantRoundedToBf16) {
  SKIP_WITHOUT_GPU();
  const QuantSpec spec = QuantSpec::parse("mxfp8");
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{96, 160}, {256, 4096}}) {
    const std::vector<uint16_t> x = block_inputs(rows, cols);
    const std::vector<int64_t> shape{rows, cols}, tshape{cols, rows};
    for (bool columnwise : {false, true}) {
      const std::string ctx = fmt::format("{}x{} {}", rows, cols, columnwise ? "column-wise" : "row-wise");
      // The MX tensor (codes in x's layout, E8M0 scale bytes) and what sim/quant dequantizes it to.
      const QuantizedTensor q =
          columnwise ? quantize(transpose16(x, rows, cols).data(), tshape, spec) : quantize(x.data(), shape, spec);
      std::vector<float> deq = dequantize(q);
      std::vector<uint8_t> codes = q.codes;
      std::vector<float> sf = q.scales;
      if (columnwise) {
        deq = transpose_any(deq, cols, rows);
        codes = transpose_any(codes, cols, rows);
        sf = transpose_any(sf, cols, rows / 32);
      }
      std::vector<uint8_t> sb(sf.size());
      for (size_t i = 0; i < sf.size(); ++i) {
        uint32_t b;
        std::memcpy(&b, &sf[i], 4);
        sb[i] = static_cast<uint8_t>(b >= 0x00800000u ? b >> 23 : 0u);
        ASSERT_EQ(decode_e8m0(sb[i]), sf[i]) << ctx << " scale " << i;
      }
      std::vector<uint16_t> want(deq.size());
      for (size_t i = 0; i < deq.size(); ++i) want[i] = f32_to_bf16_rne(deq[i]);
      auto dq = to_device(codes);
      auto ds = to_device(sb);
      auto y = poisoned<uint16_t>(deq.size());
      ASSERT_TRUE(dequantize_mx(dq.get(), ds.get(), rows, cols, columnwise, y.get(), nullptr)) << ctx;
      sync();
      expect_equal(y.download(), want, ctx.c_str());
    }
  }
}

}  // namespace
}  // namespace fp8sim::gpu::speed
