// quantize / dequantize: hand-computed cases per granularity and scale mode, an independent
// naive reference over awkward shapes, NaN/Inf and zero groups, bf16 input, two-stage
// per-tensor scaling, delayed scaling against TransformerEngine's rule, stochastic rounding,
// idempotence, thread invariance and exact memory accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"

namespace fp8sim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

QuantizedTensor q_of(const std::vector<float>& x, const Shape& shape, const std::string& spec, int threads = 0) {
  QuantizeOptions o;
  o.threads = threads;
  return quantize(x.data(), shape, QuantSpec::parse(spec), o);
}

// ---- hand-computed cases -------------------------------------------------------------------------

TEST(QuantizeHand, PerTensorE4M3) {
  // amax 7 -> s = 7/448 = 2^-6 exactly; x/s = 32, -224, 448, 0.
  // 32 = 1.0*2^5 -> E=12 M=0 -> 0x60; -224 = 1.75*2^7 -> S E=14 M=6 -> 0xF6; 448 -> 0x7E.
  const std::vector<float> x = {0.5f, -3.5f, 7.0f, 0.0f};
  const QuantizedTensor q = q_of(x, {4}, "e4m3:tensor");
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_EQ(q.scales[0], 0x1p-6f);
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x60, 0xF6, 0x7E, 0x00}));
  EXPECT_EQ(dequantize(q), x);
  EXPECT_EQ(q.tensor_amax, 7.0f);
}

// A NaN in 16-bit storage with a per-tensor scale keeps its sign and top payload bits, quieted,
// whatever the platform's arithmetic does with a NaN operand (the GPU's gives 0x7FFFFFFF):
// 0xFFC12345 -> fp16 0xFE09 -> 0xFFC12000; the signalling 0x7FA54321 -> 0x7FE54321 quieted ->
// fp16 0x7F2A -> 0x7FE54000, bf16 0x7FE5 -> 0x7FE50000.
TEST(QuantizeHand, Scaled16BitStorageKeepsANaNsSignAndPayload) {
  const uint32_t in[4] = {0x40000000u, 0xFFC12345u, 0x7FA54321u, 0xBF800000u};  // 2, NaN, sNaN, -1
  std::vector<float> x(4);
  std::memcpy(x.data(), in, sizeof in);
  auto code16 = [](const QuantizedTensor& q, int i) {
    uint16_t c;
    std::memcpy(&c, q.codes.data() + 2 * i, 2);
    return c;
  };
  const QuantizedTensor h = q_of(x, {4}, "fp16:tensor:scale=fp32");
  ASSERT_EQ(h.scales.size(), 1u);
  EXPECT_EQ(code16(h, 1), 0xFE09);
  EXPECT_EQ(code16(h, 2), 0x7F2A);
  const std::vector<float> dh = dequantize(h);
  EXPECT_EQ(bits(dh[1]), 0xFFC12000u);
  EXPECT_EQ(bits(dh[2]), 0x7FE54000u);
  const QuantizedTensor b = q_of(x, {4}, "bf16:tensor:scale=fp32");
  EXPECT_EQ(code16(b, 1), 0xFFC1);
  EXPECT_EQ(code16(b, 2), 0x7FE5);
  EXPECT_EQ(bits(dequantize(b)[2]), 0x7FE50000u);
}

TEST(QuantizeHand, PerRow) {
  // row 0: amax 448 -> s = 1: 448 -> 0x7E, 224 -> 0x76, 1 -> 0x38 (E=7, M=0).
  // row 1: amax 3.5 -> s = 2^-7: -448 -> 0xFE, 224 -> 0x76, 1 -> 0x38.
  const std::vector<float> x = {448, 224, 1, -3.5f, 1.75f, 0.0078125f};
  const QuantizedTensor q = q_of(x, {2, 3}, "e4m3:row");
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 0x1p-7f}));
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x7E, 0x76, 0x38, 0xFE, 0x76, 0x38}));
  EXPECT_EQ(dequantize(q), x);
}

TEST(QuantizeHand, PerColumn) {
  // col 0 {448, -224, 1}: s = 1; col 1 {0.875, 1.75, -3.5}: s = 2^-7 -> 112 (1.75*2^6: E=13 M=6
  // -> 0x6E), 224 -> 0x76, -448 -> 0xFE.
  const std::vector<float> x = {448, 0.875f, -224, 1.75f, 1, -3.5f};
  const QuantizedTensor q = q_of(x, {3, 2}, "e4m3:col");
  EXPECT_EQ(q.geometry.grid_rows, 1);
  EXPECT_EQ(q.geometry.grid_cols, 2);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 0x1p-7f}));
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x7E, 0x6E, 0xF6, 0x76, 0x38, 0xFE}));
  EXPECT_EQ(dequantize(q), x);
}

TEST(QuantizeHand, GroupsWithShortLastGroup) {
  // g2 over a row of 5: {448, 1} s = 1; {3.5, -0.4375} s = 2^-7 -> 448, -56 (1.75*2^5: S E=12
  // M=6 -> 0xE6); {7} (short) s = 2^-6 -> 448.
  const std::vector<float> x = {448, 1, 3.5f, -0.4375f, 7};
  const QuantizedTensor q = q_of(x, {1, 5}, "e4m3:g2");
  EXPECT_EQ(q.num_groups(), 3);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 0x1p-7f, 0x1p-6f}));
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x7E, 0x38, 0x7E, 0xE6, 0x7E}));
  EXPECT_EQ(dequantize(q), x);
}

TEST(QuantizeHand, Blocks) {
  // b2x2 over 3x3: block (0,0) {448, 1, 2, 4} s = 1 -> 0x7E 0x38 0x40 0x48; block (0,1) {7, 0}
  // s = 2^-6 -> 0x7E, 0; block (1,0) {0, 0} and (1,1) {0}: all zero -> s = 1, codes 0.
  const std::vector<float> x = {448, 1, 7, 2, 4, 0, 0, 0, 0};
  const QuantizedTensor q = q_of(x, {3, 3}, "e4m3:b2x2");
  EXPECT_EQ(q.geometry.grid_rows, 2);
  EXPECT_EQ(q.geometry.grid_cols, 2);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 0x1p-6f, 1.0f, 1.0f}));
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x7E, 0x38, 0x7E, 0x40, 0x48, 0x00, 0x00, 0x00, 0x00}));
  EXPECT_EQ(dequantize(q), x);
}

TEST(QuantizeHand, ScaleModes) {
  // pow2: amax 300 -> t = 300/448 < 1 -> s = 1; 300 = 1.171875*2^8 rounds to 288 -> E=15 M=1 -> 0x79.
  {
    const QuantizedTensor q = q_of({300.0f}, {1}, "e4m3:tensor:scale=pow2");
    EXPECT_EQ(q.scales[0], 1.0f);
    EXPECT_EQ(q.codes[0], 0x79);
  }
  // pow2 at the boundary: amax 448 -> s = 1 exactly; 449 -> t > 1 -> s = 2.
  EXPECT_EQ(q_of({448.0f}, {1}, "e4m3:tensor:scale=pow2").scales[0], 1.0f);
  EXPECT_EQ(q_of({449.0f}, {1}, "e4m3:tensor:scale=pow2").scales[0], 2.0f);
  // e8m0: clamps to 2^-127 below and holds 2^120 above; stored as one byte 127 + e.
  {
    const QuantizedTensor q = q_of({1e-39f}, {1}, "e4m3:tensor:scale=e8m0");
    EXPECT_EQ(q.scales[0], std::ldexp(1.0f, -127));
    EXPECT_EQ(q.stored_scale_bytes(), std::vector<uint8_t>{0});
    const QuantizedTensor h = q_of({3e38f}, {1}, "e4m3:tensor:scale=e8m0");
    EXPECT_EQ(h.scales[0], std::ldexp(1.0f, 120));  // 3e38/448 = 1.05*2^119 -> up to 2^120
    EXPECT_EQ(h.stored_scale_bytes(), std::vector<uint8_t>{247});
  }
  // bf16 (COAT's Triton kernels): quantize with the fp32 s = 1/448, store bf16(s).
  // 1/448 = (1 + 1/7) * 2^-9 = 1.001001001...b * 2^-9; bf16 keeps 7 mantissa bits 0010010 and the
  // next bit is 0 -> 1.140625 * 2^-9 = 0.002227783203125. 1 / s32 = 448 -> 0x7E; dequant 448 * s_bf16.
  {
    const QuantizedTensor q = q_of({1.0f, -0.5f}, {2}, "e4m3:tensor:scale=bf16");
    EXPECT_EQ(q.scales[0], 0.002227783203125f);
    EXPECT_EQ(q.codes[0], 0x7E);
    EXPECT_EQ(dequantize(q)[0], 0.998046875f);
    EXPECT_EQ(q.stored_scale_bytes().size(), 2u);
    EXPECT_EQ(q.metadata_bytes(), 2u);
  }
  // eps (COAT's weights: amax + 1e-10 in fp32) changes nothing for amax = 7 (1e-10 < ulp/2)
  // but makes an all-zero tensor scale 1e-10/448 instead of 1.
  // coat-w forms amax / 448 as PyTorch's CUDA division by a scalar does: amax * RN(1/448).
  EXPECT_EQ(q_of({7.0f}, {1}, "coat-w").scales[0], 7.0f * (1.0f / 448.0f));
  EXPECT_EQ(q_of({0.0f, 0.0f}, {2}, "coat-w").scales[0], 1e-10f * (1.0f / 448.0f));
  EXPECT_EQ(q_of({0.0f, 0.0f}, {2}, "e4m3:tensor:eps=1e-10").scales[0], 1e-10f / 448.0f);
  // fp64 eps add (COAT's optimizer kernel without DE): float(double(amax) + 1e-20).
  EXPECT_EQ(q_of({0.0f}, {1}, "coat-opt-noexpand").scales[0], static_cast<float>(1e-20) / 448.0f);
}

// TransformerEngine's power-of-two current scaling, transcribed: scale = fmax / amax (FLT_MAX when
// that overflows), its mantissa bits cleared; the dequantizing scale is 1/scale.
float te_pow2_scale(float amax, float fmax) {
  float m = fmax / amax;
  if (std::isinf(m)) m = std::numeric_limits<float>::max();
  return 1.0f / std::ldexp(1.0f, std::ilogb(m));
}

// scale=pow2 is TE's rule for every amax, including those where amax/fmax is subnormal (there
// the smallest power of two >= amax/fmax is a different, smaller scale).
TEST(QuantizeHand, Pow2ScaleIsTransformerEnginesRule) {
  EXPECT_EQ(q_of({2.6331075e-36f}, {1}, "e4m3:tensor:scale=pow2").scales[0], 0x1p-126f);
  EXPECT_EQ(q_of({1e-45f}, {1}, "e4m3:tensor:scale=pow2").scales[0], 0x1p-127f);  // FLT_MAX's power
  std::mt19937 g(7);
  for (const char* spec : {"e4m3:tensor:scale=pow2", "e5m2:tensor:scale=pow2", "fp16:tensor:scale=pow2"}) {
    const QuantSpec sp = QuantSpec::parse(spec);
    std::vector<uint32_t> patterns;
    for (uint32_t u = 1; u < 0x05000000u; u += 997) patterns.push_back(u);  // subnormal t and around
    for (int i = 0; i < 20000; ++i) patterns.push_back(1u + g() % 0x7F7FFFFFu);
    for (uint32_t u : patterns) {
      float a;
      std::memcpy(&a, &u, 4);
      const QuantizedTensor q = quantize(&a, Shape{1}, sp);
      ASSERT_EQ(bits(q.scales[0]), bits(te_pow2_scale(a, sp.fmax()))) << spec << " amax " << a;
    }
  }
}

TEST(QuantizeHand, E5M2) {
  // amax 57344 -> s = 1: 57344 -> 0x7B; 1.25 = 1.25*2^0 -> E=15 M=1 -> 0x3D; 2^-16 -> 0x01.
  const QuantizedTensor q = q_of({57344.0f, 1.25f, 0x1p-16f}, {3}, "e5m2:tensor");
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x7B, 0x3D, 0x01}));
}

TEST(QuantizeHand, ZeroConstantAndUnderflow) {
  // g4: an all-zero group gets s = 1 and exact zero codes.
  const QuantizedTensor z = q_of({0, 0, -0.0f, 0, 1, 2, 3, 4}, {8}, "e4m3:g4");
  EXPECT_EQ(z.scales[0], 1.0f);
  EXPECT_EQ(z.codes[0], 0x00);
  EXPECT_EQ(z.codes[2], 0x80);  // -0 keeps its sign
  EXPECT_EQ(z.scales[1], 4.0f / 448.0f);
  // A constant group: every code is 448, dequantized within one fp32 rounding of the input.
  const std::vector<float> c(128, 3.3f);
  const QuantizedTensor qc = q_of(c, {128}, "e4m3:g128");
  for (uint8_t code : qc.codes) EXPECT_EQ(code, 0x7E);
  for (float y : dequantize(qc)) EXPECT_LE(std::fabs(y - 3.3f), 3.3f * 0x1p-23);
  // Underflow: 1e-5 with s = 1 is below half the smallest E4M3 subnormal (2^-10).
  const QuantizedTensor u = q_of({448.0f, 1e-5f, 0.0f}, {3}, "e4m3:tensor");
  EXPECT_EQ(u.codes[1], 0x00);
  EXPECT_EQ(u.underflow_count, 1);
  EXPECT_EQ(u.saturated_count, 0);
}

TEST(QuantizeHand, SaturationCountsOnlyValuesClampingChanged) {
  // Delayed scaling starts at scale 1, so x/s = x. E4M3: 464 ties to 448 (even) and is not
  // saturated; 465 would round to 480 and is clamped. E5M2: 61439 -> 57344, 61440 -> clamped.
  for (const auto& [spec, xs, want_codes] :
       {std::tuple<const char*, std::vector<float>, std::vector<uint8_t>>{
            "e4m3:tensor:delayed=4", {448.0f, 464.0f, 465.0f, -1e6f}, {0x7E, 0x7E, 0x7E, 0xFE}},
        {"e5m2:tensor:delayed=4", {57344.0f, 61439.0f, 61440.0f, 1e9f}, {0x7B, 0x7B, 0x7B, 0x7B}}}) {
    const QuantSpec s = QuantSpec::parse(spec);
    DelayedScaler sc(s);
    QuantizeOptions o;
    o.delayed = &sc;
    const QuantizedTensor q = quantize(xs.data(), Shape{4}, s, o);
    EXPECT_EQ(q.codes, want_codes) << spec;
    EXPECT_EQ(q.saturated_count, 2) << spec;
  }
  EXPECT_EQ(saturation_bound(Format::E4M3), 464.0f);
  EXPECT_EQ(std::nextafter(saturation_bound(Format::E5M2), kInf), 61440.0f);
  EXPECT_EQ(std::nextafter(saturation_bound(Format::FP16), kInf), 65520.0f);
  EXPECT_EQ(f32_to_fp16_rne(saturation_bound(Format::FP16)), 0x7BFF);
  EXPECT_EQ(f32_to_fp16_rne(65520.0f), 0x7C00);
}

TEST(QuantizeHand, NonFiniteInputs) {
  // amax over finite elements only (2) -> s = 2/448; NaN -> 0x7F; +-Inf saturate (sat=finite).
  const std::vector<float> x = {1.0f, kNaN, kInf, -kInf, 2.0f};
  const QuantizedTensor q = q_of(x, {5}, "e4m3:tensor");
  EXPECT_EQ(q.scales[0], 2.0f / 448.0f);
  EXPECT_EQ(q.nonfinite_count, 3);
  EXPECT_EQ(q.tensor_amax, 2.0f);
  EXPECT_EQ(q.codes[1], 0x7F);
  EXPECT_EQ(q.codes[2], 0x7E);
  EXPECT_EQ(q.codes[3], 0xFE);
  EXPECT_EQ(q.codes[4], 0x7E);
  EXPECT_EQ(q.saturated_count, 0);  // non-finite inputs are not counted as saturated
  const std::vector<float> y = dequantize(q);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 448.0f * q.scales[0]);
  // sat=none: E4M3 overflow is NaN, E5M2 overflow is Inf.
  const QuantizedTensor n4 = q_of(x, {5}, "e4m3:tensor:sat=none");
  EXPECT_EQ(n4.codes[2], 0x7F);
  EXPECT_EQ(n4.codes[3], 0xFF);
  const QuantizedTensor n5 = q_of(x, {5}, "e5m2:tensor:sat=none");
  EXPECT_EQ(n5.codes[2], 0x7C);
  EXPECT_EQ(n5.codes[3], 0xFC);
  EXPECT_EQ(dequantize(n5)[2], kInf);
  // A group with nothing finite scales like an all-zero group.
  const QuantizedTensor a = q_of({kNaN, kInf}, {2}, "e4m3:tensor");
  EXPECT_EQ(a.scales[0], 1.0f);
  // COAT DE also ignores non-finite elements in its statistics.
  const QuantizedTensor d = q_of({1.0f, kNaN, 0.01f, kInf}, {4}, "e4m3:g128:de=coat");
  EXPECT_EQ(d.codes[1], 0x7F);
  EXPECT_TRUE(std::isfinite(d.scales[0]));
}

// ---- an independent naive reference over awkward shapes ------------------------------------------

// Rounds an fp32 value to bf16 (nearest, ties to even) by hand.
float bf16_round(float s) {
  uint32_t u = bits(s);
  u = ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// 2^ceil(log2 t) by frexp: t = m * 2^e with m in [0.5, 1).
float pow2_up(float t) {
  int e = 0;
  const float m = std::frexp(t, &e);
  return m == 0.5f ? std::ldexp(1.0f, e - 1) : std::ldexp(1.0f, e);
}

struct NaiveResult {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

NaiveResult naive_quantize(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t R, int64_t C,
                           const std::string& scale, bool e4m3) {
  const float fmax = e4m3 ? 448.0f : 57344.0f;
  const int64_t gr = (rows + R - 1) / R, gc = (cols + C - 1) / C;
  NaiveResult out;
  std::vector<float> squant(gr * gc);
  for (int64_t gi = 0; gi < gr; ++gi)
    for (int64_t gj = 0; gj < gc; ++gj) {
      float amax = 0;
      for (int64_t r = gi * R; r < std::min(rows, (gi + 1) * R); ++r)
        for (int64_t c = gj * C; c < std::min(cols, (gj + 1) * C); ++c)
          amax = std::max(amax, std::fabs(x[r * cols + c]));
      float sq = 1, ss = 1;
      if (amax > 0) {
        const float t = amax / fmax;
        if (scale == "fp32") sq = ss = t;
        else if (scale == "bf16") {
          sq = t;
          ss = bf16_round(t);
        } else if (scale == "pow2") sq = ss = te_pow2_scale(amax, fmax);
        else if (scale == "e8m0") sq = ss = std::max(pow2_up(t), std::ldexp(1.0f, -127));
      }
      squant[gi * gc + gj] = sq;
      out.scales.push_back(ss);
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float sq = squant[(r / R) * gc + (c / C)];
      const float v = x[r * cols + c] / sq;
      out.codes.push_back(e4m3 ? encode_fp8_rne<E4M3Traits>(v, true) : encode_fp8_rne<E5M2Traits>(v, true));
    }
  return out;
}

std::vector<float> wide_data(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(nd(g) * std::exp(2.5 * nd(g)));
  return x;
}

TEST(QuantizeReference, AwkwardShapesEveryGranularityAndScale) {
  struct Gran {
    std::string text;
    int64_t R, C;  // 0 = rows / cols
  };
  const std::vector<Gran> grans = {{"tensor", 0, 0}, {"row", 1, 0},        {"col", 0, 1},         {"g1", 1, 1},
                                   {"g7", 1, 7},     {"g16", 1, 16},       {"g32", 1, 32},        {"g128", 1, 128},
                                   {"b2x3", 2, 3},   {"b16x128", 16, 128}, {"b128x128", 128, 128}};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {1, 7}, {5, 300}, {217, 129}, {217, 300}};
  int64_t cases = 0;
  for (const char* fmt : {"e4m3", "e5m2"})
    for (const char* scale : {"fp32", "pow2", "e8m0", "bf16"})
      for (const auto& gr : grans)
        for (const auto& [rows, cols] : shapes) {
          const std::vector<float> x = wide_data(static_cast<size_t>(rows * cols), rows * 1000 + cols);
          const std::string spec = std::string(fmt) + ":" + gr.text + ":scale=" + scale;
          const QuantizedTensor q = q_of(x, {rows, cols}, spec);
          const NaiveResult ref =
              naive_quantize(x, rows, cols, gr.R ? gr.R : rows, gr.C ? gr.C : cols, scale, std::string(fmt) == "e4m3");
          ASSERT_EQ(q.scales.size(), ref.scales.size()) << spec << " " << rows << "x" << cols;
          for (size_t i = 0; i < ref.scales.size(); ++i)
            ASSERT_EQ(bits(q.scales[i]), bits(ref.scales[i])) << spec << " " << rows << "x" << cols << " group " << i;
          for (size_t i = 0; i < ref.codes.size(); ++i)
            ASSERT_EQ(q.codes[i], ref.codes[i]) << spec << " " << rows << "x" << cols << " element " << i;
          // Dequantize = decoded code * stored scale.
          const std::vector<float> y = dequantize(q);
          const int64_t R = gr.R ? gr.R : rows, C = gr.C ? gr.C : cols, gc = (cols + C - 1) / C;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
              const float want = decode_fp8(q.codes[r * cols + c], std::string(fmt) == "e4m3" ? 0 : 1) *
                                 ref.scales[(r / R) * gc + c / C];
              ASSERT_EQ(bits(y[r * cols + c]), bits(want)) << spec;
            }
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 4 * 11 * 5);
}

TEST(QuantizeReference, NDShapesUseTheLastDimension) {
  const std::vector<float> x = wide_data(2 * 5 * 33, 7);
  const QuantizedTensor a = q_of(x, {2, 5, 33}, "e4m3:g8");
  const QuantizedTensor b = q_of(x, {10, 33}, "e4m3:g8");
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.geometry.rows, 10);
  // 0-D: one element.
  const QuantizedTensor s = q_of({-5.0f}, {}, "e4m3:tensor");
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(dequantize(s)[0], -5.0f);
  // Flattened groups (COAT optimizer states) differ from per-row groups when cols % G != 0.
  const QuantizedTensor flat = q_of(x, {2 * 5 * 33}, "e4m3:g128");
  EXPECT_EQ(flat.num_groups(), (330 + 127) / 128);
}

// ---- bf16 input, two-stage scaling, threads ------------------------------------------------------

TEST(QuantizeInput, Bf16InputIsWidenedExactly) {
  std::vector<uint16_t> xb(4096);
  std::mt19937 g(9);
  for (auto& v : xb) v = static_cast<uint16_t>(g() & 0x7F7F);  // finite bf16 patterns of both signs
  std::vector<float> xf(xb.size());
  for (size_t i = 0; i < xb.size(); ++i) xf[i] = bf16_to_f32(xb[i]);
  for (const char* spec : {"e4m3:g128", "e5m2:row", "mxfp8", "e4m3:g128:de=coat", "bf16"}) {
    const QuantizeOptions o;
    const QuantizedTensor a = quantize(xb.data(), Shape{64, 64}, QuantSpec::parse(spec), o);
    const QuantizedTensor b = quantize(xf.data(), Shape{64, 64}, QuantSpec::parse(spec), o);
    EXPECT_EQ(a.codes, b.codes) << spec;
    EXPECT_EQ(a.scales, b.scales) << spec;
  }
  // bf16 storage of bf16 input is the identity.
  const QuantizedTensor id = quantize(xb.data(), Shape{4096}, QuantSpec::parse("bf16"));
  EXPECT_EQ(std::memcmp(id.codes.data(), xb.data(), 2 * xb.size()), 0);
}

// 16-bit storage of 16-bit input: every bit pattern of the input format, stored as bf16 and fp16
// unscaled (the same format copies finite codes), scaled, saturating or not, on one and two threads,
// gives the codes and counts of the same values quantized from fp32; and the error sums from the
// stored values (the same format and finite: the tensor compared with itself) equal the sums of
// the widened input against the whole dequantization.
TEST(QuantizeInput, SixteenBitStorageOfSixteenBitInputEqualsTheFp32Path) {
  for (const InputDtype dt : {InputDtype::BF16, InputDtype::FP16}) {
    // Five copies of the patterns: past 2^18 elements (two threads quantize) and four error chunks
    // (the AVX2 lanes of the sums), with the copies' order shuffled so that rows differ.
    std::vector<uint16_t> all(5 * 65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>((i * 40503u + i / 65536) & 0xFFFFu);
    const uint16_t emask = dt == InputDtype::BF16 ? 0x7F80u : 0x7C00u;
    std::vector<uint16_t> finite;
    for (const uint16_t p : all)
      if ((p & emask) != emask) finite.push_back(p);
    for (const auto* in : {&all, &finite}) {
      std::vector<float> wide(in->size());
      for (size_t i = 0; i < wide.size(); ++i)
        wide[i] = dt == InputDtype::BF16 ? bf16_to_f32((*in)[i]) : fp16_to_f32((*in)[i]);
      const Shape shape{static_cast<int64_t>(in->size() / 128), 128};  // whole rows: the tail is dropped
      for (const char* text : {"bf16", "bf16:tensor", "bf16:sat=none", "fp16", "fp16:tensor", "fp16:sat=none",
                               "bf16:row:scale=pow2", "fp16:tensor:scale=pow2"}) {
        for (const int threads : {1, 2}) {
          SCOPED_TRACE(std::string(text) + (dt == InputDtype::BF16 ? " bf16 in " : " fp16 in ") +
                       std::to_string(in->size()) + " values, " + std::to_string(threads) + " threads");
          const QuantSpec spec = QuantSpec::parse(text);
          QuantizeOptions o;
          o.threads = threads;
          const QuantizedTensor got = quantize_any(in->data(), dt, shape, spec, o);
          const QuantizedTensor want = quantize(wide.data(), shape, spec, o);
          ASSERT_EQ(got.codes, want.codes);
          EXPECT_EQ(got.scales, want.scales);
          EXPECT_EQ(got.saturated_count, want.saturated_count);
          EXPECT_EQ(got.underflow_count, want.underflow_count);
          EXPECT_EQ(got.nonfinite_count, want.nonfinite_count);
          const std::vector<float> deq = dequantize(want);
          for (const bool simd : {true, false}) {
            const bool was = error_sums_simd();
            set_error_sums_simd(simd);
            const ErrorStats a = quantization_error_stats(in->data(), dt, got, threads);
            const ErrorStats b = quantization_error_stats(wide.data(), want, deq.data(), threads);
            set_error_sums_simd(was);
            EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "simd " << simd;
          }
        }
      }
    }
  }
}

TEST(QuantizeInput, NoDoubleRounding) {
  // fp32 1.1865234375 -> E4M3 0x39 directly; through bf16 first it would tie to 0x3A.
  const QuantizedTensor q = q_of({1.1865234375f, 448.0f}, {2}, "e4m3:tensor");
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.codes[0], 0x39);
}

TEST(QuantizeTwoStage, PerTensorFromGroupMaximaIsIdentical) {
  const std::vector<float> x = wide_data(217 * 300, 17);
  const Shape shape{217, 300};
  for (const char* spec : {"e4m3:tensor", "e5m2:tensor:scale=pow2", "coat-w"}) {
    const QuantSpec s = QuantSpec::parse(spec);
    // Stage 1: per-1x16-group maxima (what a producing kernel emits); stage 2: their max.
    const std::vector<float> gmax = group_absmax(x.data(), shape, QuantSpec::parse("e4m3:g16"));
    float two_stage = 0;
    for (float m : gmax) two_stage = std::max(two_stage, m);
    QuantizeOptions o;
    o.tensor_amax = two_stage;
    const QuantizedTensor a = quantize(x.data(), shape, s, o);
    const QuantizedTensor b = quantize(x.data(), shape, s);  // just-in-time
    EXPECT_EQ(bits(a.scales[0]), bits(b.scales[0])) << spec;
    EXPECT_EQ(a.codes, b.codes) << spec;
    // And the just-in-time amax is the plain max |x|.
    float jit = 0;
    for (float v : x) jit = std::max(jit, std::fabs(v));
    EXPECT_EQ(b.tensor_amax, jit);
  }
}

TEST(QuantizeThreads, ResultsDoNotDependOnTheThreadCount) {
  const std::vector<float> x = wide_data(217 * 300, 19);
  for (const char* spec : {"e4m3:tensor", "e4m3:col", "e4m3:b128x128", "e4m3:g128:de=coat", "e4m3:g128:de=robust",
                           "e4m3:g32:round=stochastic:seed=5", "e5m2:b16x128:scale=e8m0"}) {
    const QuantizedTensor a = q_of(x, {217, 300}, spec, 1);
    for (int t : {2, 3, 7}) {
      const QuantizedTensor b = q_of(x, {217, 300}, spec, t);
      EXPECT_EQ(a.codes, b.codes) << spec << " threads " << t;
      EXPECT_EQ(a.scales, b.scales) << spec;
      EXPECT_EQ(a.expand_k, b.expand_k) << spec;
      EXPECT_EQ(a.saturated_count, b.saturated_count) << spec;
      EXPECT_EQ(a.underflow_count, b.underflow_count) << spec;
      std::vector<float> ya(x.size()), yb(x.size());
      dequantize(a, ya.data(), 1);
      dequantize(b, yb.data(), t);
      EXPECT_EQ(std::memcmp(ya.data(), yb.data(), 4 * ya.size()), 0) << spec;
    }
  }
}

// ---- stochastic rounding -------------------------------------------------------------------------

TEST(QuantizeStochastic, NeighboursFrequencyAndReproducibility) {
  // 448 pins s = 1; 1.1 sits between 1.0 (0x38) and 1.125 (0x39): P(up) = (1.1f - 1) / 0.125.
  constexpr int kN = 20000;
  std::vector<float> x(kN + 1, 1.1f);
  x[kN] = 448.0f;
  const QuantizedTensor a = q_of(x, {kN + 1}, "e4m3:tensor:round=stochastic:seed=42");
  int up = 0;
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(a.codes[i] == 0x38 || a.codes[i] == 0x39) << i;
    up += a.codes[i] == 0x39;
  }
  const double p = (static_cast<double>(1.1f) - 1.0) / 0.125;
  const double sigma = std::sqrt(kN * p * (1 - p));
  EXPECT_NEAR(up, kN * p, 5 * sigma);
  // Same seed, same codes; another seed, other codes; element i draws philox_word(seed, i).
  EXPECT_EQ(q_of(x, {kN + 1}, "e4m3:tensor:round=stochastic:seed=42").codes, a.codes);
  EXPECT_NE(q_of(x, {kN + 1}, "e4m3:tensor:round=stochastic:seed=43").codes, a.codes);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(a.codes[i], encode_fp8_sr<E4M3Traits>(1.1f, true, philox_word(42, static_cast<uint64_t>(i))));
}

TEST(QuantizeStochastic, IndexOffsetMakesChunksEqualTheWhole) {
  const std::vector<float> x = wide_data(100 * 64, 23);
  const QuantSpec s = QuantSpec::parse("e4m3:row:round=stochastic:seed=9");
  const QuantizedTensor whole = quantize(x.data(), Shape{100, 64}, s);
  QuantizeOptions o;
  const QuantizedTensor top = quantize(x.data(), Shape{40, 64}, s, o);
  o.index_offset = 40 * 64;
  const QuantizedTensor bottom = quantize(x.data() + 40 * 64, Shape{60, 64}, s, o);
  std::vector<uint8_t> joined = top.codes;
  joined.insert(joined.end(), bottom.codes.begin(), bottom.codes.end());
  EXPECT_EQ(joined, whole.codes);
}

// ---- delayed scaling -----------------------------------------------------------------------------

// TransformerEngine's documented rule, written out: keep the last H amaxes; after each step
// amax_h = max(history) (or the newest), scale = (fmax / amax_h) / 2^margin in fp32, unchanged
// when amax_h is 0 or not finite.
struct TeRule {
  int H;
  bool use_max;
  int margin;
  float fmax;
  std::vector<float> hist;
  float scale = 1.0f;
  void step(float amax) {
    hist.push_back(amax);
    if (static_cast<int>(hist.size()) > H) hist.erase(hist.begin());
    float a = use_max ? 0.0f : amax;
    if (use_max)
      for (float h : hist) a = std::max(a, h);
    if (!(a > 0.0f && std::isfinite(a))) return;
    // TransformerEngine's update: the margin-reduced maximum over the amax, FLT_MAX on overflow.
    const float scaled_max = fmax * std::ldexp(1.0f, -margin);
    scale = scaled_max / a;
    if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  }
};

// A tiny amax (below fmax / FLT_MAX) must give TE's FLT_MAX scale, never +Inf: the next step's
// zeros stay zero codes and the stored scale is 1/FLT_MAX, not 0.
TEST(QuantizeDelayed, TinyAmaxGivesFltMaxScale) {
  const QuantSpec s = QuantSpec::parse("e4m3:tensor:delayed=1,max");
  DelayedScaler sc(s);
  QuantizeOptions o;
  o.delayed = &sc;
  const std::vector<float> tiny(8, 1e-37f);
  (void)quantize(tiny.data(), Shape{8}, s, o);
  EXPECT_EQ(sc.scale(), std::numeric_limits<float>::max());
  const std::vector<float> x = {0, 1, 2, 0, -1, 0, 3, 0};
  const QuantizedTensor q = quantize(x.data(), Shape{8}, s, o);
  const std::vector<uint8_t> want = {0x00, 0x7E, 0x7E, 0x00, 0xFE, 0x00, 0x7E, 0x00};
  EXPECT_EQ(q.codes, want);
  EXPECT_EQ(q.scales[0], 1.0f / std::numeric_limits<float>::max());
  EXPECT_GT(q.scales[0], 0.0f);
  // The boundary: the largest amax whose scale overflows, and the next fp32 value above it.
  for (const char* spec : {"e4m3:tensor:delayed=1", "e5m2:tensor:delayed=1", "e4m3:tensor:delayed=1,max,margin=3"}) {
    const QuantSpec t = QuantSpec::parse(spec);
    const float scaled_max = t.fmax() * std::ldexp(1.0f, -t.delayed.margin);
    float lo = 0x1p-149f, hi = 1.0f;  // scaled_max / lo overflows, scaled_max / hi does not
    while (std::nextafter(lo, hi) != hi) {
      const float mid = std::sqrt(lo) * std::sqrt(hi);
      const float m = (mid > lo && mid < hi) ? mid : std::nextafter(lo, hi);
      (std::isinf(scaled_max / m) ? lo : hi) = m;
    }
    DelayedScaler a(t), b(t);
    a.update(lo);
    b.update(hi);
    EXPECT_EQ(a.scale(), std::numeric_limits<float>::max()) << spec;
    EXPECT_EQ(bits(b.scale()), bits(scaled_max / hi)) << spec;
    EXPECT_TRUE(std::isfinite(b.scale())) << spec;
  }
}

TEST(QuantizeDelayed, ReproducesTransformerEngineRule) {
  const std::vector<float> amaxes = {2, 8, 0, 1, kInf, 3, 1e-37f, 0x1p-149f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 7};
  for (const char* spec :
       {"e4m3:tensor:delayed=4,max,margin=1", "e4m3:tensor:delayed=4,recent", "e5m2:tensor:delayed=1024,max"}) {
    const QuantSpec s = QuantSpec::parse(spec);
    DelayedScaler scaler(s);
    TeRule ref{s.delayed.history, s.delayed.algo == AmaxAlgo::Max, s.delayed.margin, s.fmax(), {}};
    QuantizeOptions o;
    o.delayed = &scaler;
    for (size_t t = 0; t < amaxes.size(); ++t) {
      // A tensor whose amax is amaxes[t].
      const std::vector<float> x = {amaxes[t], -amaxes[t] / 3, 0.25f * (std::isfinite(amaxes[t]) ? amaxes[t] : 1)};
      const float used = scaler.scale();
      ASSERT_EQ(bits(used), bits(ref.scale)) << spec << " step " << t;
      const QuantizedTensor q = quantize(x.data(), Shape{3}, s, o);
      // Codes use the scale from BEFORE this step, as a multiplier; the stored s is 1/scale.
      for (int i = 0; i < 3; ++i)
        ASSERT_EQ(q.codes[i], encode_fp8(x[i] * used, s.format == Format::E4M3 ? 0 : 1, true)) << spec << t;
      ASSERT_EQ(q.scales[0], 1.0f / used);
      ref.step(amaxes[t]);
      ASSERT_EQ(bits(scaler.scale()), bits(ref.scale)) << spec << " after step " << t;
    }
    EXPECT_EQ(scaler.steps(), static_cast<int64_t>(amaxes.size()));
    const std::vector<float> h = scaler.history();
    ASSERT_EQ(h.size(), std::min<size_t>(s.delayed.history, amaxes.size()));
    EXPECT_EQ(h[0], 7.0f);  // most recent first
  }
  // A stale (too small) scale saturates: amax 1 recorded, then a tensor with amax 4.
  const QuantSpec s = QuantSpec::parse("e4m3:tensor:delayed=16");
  DelayedScaler sc(s);
  sc.update(1.0f);
  QuantizeOptions o;
  o.delayed = &sc;
  const QuantizedTensor q = quantize(std::vector<float>{4.0f, 0.5f}.data(), Shape{2}, s, o);
  EXPECT_EQ(q.codes[0], 0x7E);
  EXPECT_EQ(q.saturated_count, 1);
  EXPECT_EQ(sc.state_bytes(), 16u * 4 + 8);
  // Without a scaler the call is refused.
  EXPECT_THROW(quantize(std::vector<float>{1.0f}.data(), Shape{1}, s), Error);
}

TEST(QuantizeHand, DequantizeDecodesEveryCode) {
  // All 256 codes through dequantize (the vectorized decode) against decode_fp8, scale 1.
  for (const char* spec : {"e4m3:tensor", "e5m2:tensor"}) {
    QuantizedTensor q;
    q.spec = QuantSpec::parse(spec);
    q.shape = {256};
    q.geometry = group_geometry(q.spec, q.shape);
    for (int c = 0; c < 256; ++c) q.codes.push_back(static_cast<uint8_t>(c));
    q.scales = {1.0f};
    const std::vector<float> y = dequantize(q);
    const int f = q.spec.format == Format::E4M3 ? 0 : 1;
    for (int c = 0; c < 256; ++c) {
      const float want = decode_fp8(static_cast<uint8_t>(c), f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[c])) << spec << " code " << c;
      } else {
        EXPECT_EQ(bits(y[c]), bits(want)) << spec << " code " << c;
      }
    }
  }
}

// ---- idempotence, memory accounting, reuse -------------------------------------------------------

TEST(QuantizeProperty, DequantizeQuantizeIsIdempotent) {
  const std::vector<float> x = wide_data(217 * 300, 29);
  const Shape shape{217, 300};
  for (const char* spec :
       {"e4m3:tensor", "e4m3:row", "e4m3:col", "e4m3:g128", "e4m3:g16", "e4m3:b128x128", "e5m2:g128",
        "e4m3:g128:scale=pow2", "mxfp8", "mxfp8-e5m2", "e4m3:g16:scale=bf16:eps=1e-10", "e4m3:b128x128",
        "e4m3:g32:round=stochastic:seed=3", "bf16", "fp16", "fp16:tensor:scale=pow2"}) {
    const QuantizedTensor q1 = q_of(x, shape, spec);
    const std::vector<float> y1 = dequantize(q1);
    const QuantizedTensor q2 = q_of(y1, shape, spec);
    const std::vector<float> y2 = dequantize(q2);
    EXPECT_EQ(std::memcmp(y1.data(), y2.data(), 4 * y1.size()), 0) << spec;
    // Codes too, except for power-of-two scales: a group whose max rounds down to exactly half
    // the range (e.g. 230 -> 224 = 448/2) gets half the scale on the second pass, and doubled
    // codes that dequantize to the same values.
    const QuantSpec s = QuantSpec::parse(spec);
    if (s.scale != ScaleMode::Pow2 && s.scale != ScaleMode::E8M0) {
      EXPECT_EQ(q1.codes, q2.codes) << spec;
    }
  }
  // With DE the group statistics of y differ from those of x (max and min move to code
  // values), so k and c are recomputed: the second pass changes y by far less than the first.
  for (const char* spec : {"e4m3:g128:de=coat", "e4m3:g128:de=robust"}) {
    const QuantizedTensor q1 = q_of(x, shape, spec);
    const std::vector<float> y1 = dequantize(q1);
    const std::vector<float> y2 = dequantize(q_of(y1, shape, spec));
    double e1 = 0, e2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      e1 += (static_cast<double>(x[i]) - y1[i]) * (static_cast<double>(x[i]) - y1[i]);
      e2 += (static_cast<double>(y1[i]) - y2[i]) * (static_cast<double>(y1[i]) - y2[i]);
    }
    EXPECT_LT(e2, 0.25 * e1) << spec;
  }
}

TEST(QuantizeMemory, AccountingIsExactAndDataFree) {
  const std::vector<float> x = wide_data(217 * 300, 31);
  for (const char* spec :
       {"e4m3:tensor", "e4m3:row", "e4m3:col", "e4m3:g128", "e4m3:g7", "e4m3:b128x128", "mxfp8", "coat-act",
        "e4m3:g128:de=coat", "e5m2:g128:de=robust", "bf16", "fp16", "fp16:tensor:scale=pow2", "bf16:g128:scale=fp32"}) {
    const QuantSpec s = QuantSpec::parse(spec);
    const QuantizedTensor q = q_of(x, {217, 300}, spec);
    const QuantizedSize z = quantized_size(s, Shape{217, 300});
    EXPECT_EQ(static_cast<int64_t>(q.code_bytes()), z.code_bytes) << spec;
    EXPECT_EQ(static_cast<int64_t>(q.metadata_bytes()), z.metadata_bytes()) << spec;
    EXPECT_EQ(q.total_bytes(), quantized_bytes(s, Shape{217, 300})) << spec;
  }
  // Hand-computed: 217 x 300 in 1x128 groups = 217 * 3 groups; fp32 scales 4 B, DE +8 B.
  EXPECT_EQ(quantized_size(QuantSpec::parse("e4m3:g128"), Shape{217, 300}).scale_bytes, 217 * 3 * 4);
  EXPECT_EQ(quantized_size(QuantSpec::parse("e4m3:g128:de=coat"), Shape{217, 300}).metadata_bytes(), 217 * 3 * 12);
  EXPECT_EQ(quantized_size(QuantSpec::parse("mxfp8"), Shape{4096, 4096}).metadata_bytes(), 4096 * 128);
  EXPECT_EQ(quantized_size(QuantSpec::parse("coat-act"), Shape{4096, 11008}).metadata_bytes(), 4096 * 688 * 2);
  EXPECT_EQ(quantized_size(QuantSpec::parse("bf16"), Shape{3, 5}).total_bytes(), 30);
  // COAT's optimizer-state claim: (s, k, c) fp32 per 128 elements per moment = 0.09375 B/param
  // per moment, 0.1875 for m and v together; Llama-2-7B (6.74e9 params) fits without allocating.
  const QuantizedSize big = quantized_size(QuantSpec::parse("coat-opt"), Shape{6738415616});
  EXPECT_EQ(big.code_bytes, 6738415616);
  EXPECT_EQ(big.num_groups, 6738415616 / 128);
  EXPECT_DOUBLE_EQ(2.0 * static_cast<double>(big.metadata_bytes()) / 6738415616.0, 0.1875);
  EXPECT_EQ(quantized_size(QuantSpec::parse("e4m3:g128"), Shape{0, 5}).total_bytes(), 0);
}

TEST(QuantizeReuse, QuantizeIntoReusesBuffers) {
  const std::vector<float> x = wide_data(1000, 37);
  const QuantSpec s = QuantSpec::parse("e4m3:g128:de=coat");
  QuantizedTensor q;
  quantize_into(x.data(), Shape{1000}, s, q);
  const uint8_t* codes = q.codes.data();
  const float* scales = q.scales.data();
  const std::vector<float> x2 = wide_data(1000, 38);
  quantize_into(x2.data(), Shape{1000}, s, q);
  EXPECT_EQ(q.codes.data(), codes);
  EXPECT_EQ(q.scales.data(), scales);
  const QuantizedTensor fresh = quantize(x2.data(), Shape{1000}, s);
  EXPECT_EQ(q.codes, fresh.codes);
  EXPECT_EQ(q.scales, fresh.scales);
  EXPECT_EQ(q.expand_k, fresh.expand_k);
}

TEST(QuantizeErrors, BadShapesAndSpecs) {
  const std::vector<float> x(4, 1.0f);
  EXPECT_THROW(quantize(x.data(), Shape{-1, 4}, QuantSpec::parse("e4m3:tensor")), UsageError);
  QuantSpec bad = QuantSpec::parse("e4m3:g128");
  bad.group_size = 0;
  EXPECT_THROW(quantize(x.data(), Shape{4}, bad), UsageError);
  QuantizeOptions o;
  o.tensor_amax = 1.0f;
  EXPECT_THROW(quantize(x.data(), Shape{4}, QuantSpec::parse("e4m3:g2"), o), Error);
}

// ---- ranges: dequantize_range and the error sums made a few chunks at a time -----------------

TEST(DequantizeRange, EqualsTheWholeTensorsValuesForEverySpec) {
  // Every granularity, scale, format (FP8, 4- and 6-bit, scaled 16-bit, passthrough) and DE on
  // shapes with short edge groups; ranges that start and end inside rows and groups, a whole row,
  // the whole tensor and empty ones, against dequantize(q) bit for bit. Then the error sums from the
  // stored input (fp32, bf16, fp16) against those of the widened input and the whole dequantization,
  // on tensors of one, several and more than four error chunks, with one and two threads, the AVX2
  // and the portable loops. The values include NaN, -Inf and zeros.
  const std::vector<std::string> specs = {"e4m3:tensor",
                                          "e5m2:row",
                                          "e4m3:col",
                                          "e4m3:g7",
                                          "e4m3:g128:scale=pow2",
                                          "e4m3:b16x128",
                                          "e4m3:b2x3:scale=bf16",
                                          "e4m3:g32:scale=e8m0:mx=floor",
                                          "e4m3:g128:de=coat",
                                          "e4m3:g128:de=robust",
                                          "e4m3:g128:round=stochastic",
                                          "e2m1:g16:scale=e4m3",
                                          "e2m1:g32:scale=e8m0:mx=floor",
                                          "e2m3:g32:scale=e8m0",
                                          "e3m2:g32:scale=e8m0",
                                          "bf16",
                                          "fp16:tensor:scale=pow2",
                                          "bf16:row:scale=pow2"};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {5, 300}, {217, 129}, {3, 100003}};
  std::mt19937_64 g(5);
  for (const std::string& text : specs)
    for (const auto& [rows, cols] : shapes) {
      SCOPED_TRACE(text + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const int64_t n = rows * cols;
      std::vector<float> x = wide_data(static_cast<size_t>(n), static_cast<uint64_t>(n) + 3);
      for (size_t i = 5; i < x.size(); i += 97) x[i] = i % 3 == 0 ? kNaN : (i % 3 == 1 ? -kInf : 0.0f);
      std::vector<uint16_t> xb(x.size()), xh(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = static_cast<uint16_t>(bits(x[i]) >> 16);  // truncated: any bf16
        xh[i] = f32_to_fp16_rne(x[i]);
      }
      const QuantSpec spec = QuantSpec::parse(text);
      const QuantizedTensor q = q_of(x, {rows, cols}, text);
      const std::vector<float> whole = dequantize(q);
      std::vector<std::pair<int64_t, int64_t>> ranges = {{0, n}, {0, 0}, {n, n}, {0, std::min<int64_t>(n, cols)}};
      std::uniform_int_distribution<int64_t> at(0, n);
      for (int k = 0; k < 6; ++k) {
        const int64_t a = at(g), b = at(g);
        ranges.emplace_back(std::min(a, b), std::max(a, b));
      }
      for (const auto& [b, e] : ranges) {
        std::vector<float> part(static_cast<size_t>(e - b) + 1, -7.0f);
        dequantize_range(q, b, e, part.data());
        for (int64_t i = b; i < e; ++i)
          ASSERT_EQ(bits(part[static_cast<size_t>(i - b)]), bits(whole[static_cast<size_t>(i)])) << "element " << i;
        EXPECT_EQ(part.back(), -7.0f) << "wrote past [" << b << ", " << e << ")";
      }
      for (const InputDtype dt : {InputDtype::F32, InputDtype::BF16, InputDtype::FP16}) {
        std::vector<float> ref = x;
        for (size_t i = 0; i < ref.size(); ++i)
          if (dt != InputDtype::F32) ref[i] = dt == InputDtype::BF16 ? bf16_to_f32(xb[i]) : fp16_to_f32(xh[i]);
        const void* stored = dt == InputDtype::F32    ? static_cast<const void*>(x.data())
                             : dt == InputDtype::BF16 ? static_cast<const void*>(xb.data())
                                                      : static_cast<const void*>(xh.data());
        const QuantizedTensor qi = quantize_any(stored, dt, Shape{rows, cols}, spec);
        const std::vector<float> deq = dequantize(qi);
        for (const int threads : {1, 2})
          for (const bool simd : {true, false}) {  // AVX2 decoders and error lanes, and the portable loops
            const bool was_quant = quant_simd(), was_sums = error_sums_simd();
            set_quant_simd(simd);
            set_error_sums_simd(simd);
            const ErrorStats want = quantization_error_stats(ref.data(), qi, deq.data(), threads);
            const ErrorStats got = quantization_error_stats(stored, dt, qi, threads);
            set_quant_simd(was_quant);
            set_error_sums_simd(was_sums);
            EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0)
                << "input " << static_cast<int>(dt) << ", " << threads << " threads, simd " << simd;
          }
      }
    }
}

TEST(DequantizeRange, RhtAndRangesOutsideTheTensorAreRefused) {
  // Errors on the caller's thread (the chunked error sums check q before their threads start).
  const std::vector<float> x = wide_data(64, 9);
  const QuantizedTensor rht = q_of(x, {2, 32}, "e2m1:g16:scale=e4m3:rht=16");
  std::vector<float> out(64);
  EXPECT_THROW(dequantize_range(rht, 0, 16, out.data()), Error);
  EXPECT_THROW(quantization_error_stats(x.data(), InputDtype::F32, rht, 2), Error);  // not std::terminate
  const QuantizedTensor q = q_of(x, {2, 32}, "e4m3:row");
  EXPECT_THROW(dequantize_range(q, 10, 5, out.data()), Error);
  EXPECT_THROW(dequantize_range(q, 0, 65, out.data()), Error);
  EXPECT_THROW(dequantize_range(q, -1, 3, out.data()), Error);
}

TEST(QuantReference, TransposeCodesTransposesTheTwoDimensionalView) {
  // A (2, 2, 3) tensor is (4 x 3) over its last dimension: its transpose is (3 x 4).
  const std::vector<uint8_t> codes = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  EXPECT_EQ(transpose_codes(codes, 3), (std::vector<uint8_t>{0, 10, 20, 30, 1, 11, 21, 31, 2, 12, 22, 32}));
  EXPECT_EQ(transpose_codes(codes, 1), codes);   // a column's transpose is the same bytes
  EXPECT_EQ(transpose_codes(codes, 12), codes);  // and so is a row's
  EXPECT_TRUE(transpose_codes({}, 4).empty());
  EXPECT_TRUE(transpose_codes({}, 0).empty());     // a (.., 0) tensor
  EXPECT_THROW(transpose_codes(codes, 5), Error);  // 12 codes are not rows of 5
  EXPECT_THROW(transpose_codes(codes, 0), Error);
  // Values of any type, as compare's dgrad GEMM transposes its weight: a (2 x 3) matrix.
  const std::vector<float> w = {1.5f, -2.0f, 3.0f, 4.0f, 5.0f, -6.25f};
  EXPECT_EQ(transpose_rows<float>(w, 3), (std::vector<float>{1.5f, 4.0f, -2.0f, 5.0f, 3.0f, -6.25f}));
  EXPECT_THROW(transpose_rows<float>(w, 4), Error);
}

}  // namespace
}  // namespace fp8sim
