// GPU quantize / dequantize (gpu/quant) against the CPU reference (sim/quant): codes, scales, k,
// c and dequantized values bit for bit, for every granularity and scale mode, DE coat / robust,
// delayed scaling, stochastic rounding, fp32 / bf16 / fp16 inputs, on awkward shapes (1, 5, 217
// rows; lengths not a multiple of 16 or 128; short last groups) and on Llama-2-7B shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/quant/quantize.hpp"
#include "gpu/quant/quantize_launch.hpp"
#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/quantize.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

// First mismatch of two same-typed vectors, as text; empty when equal.
// exact_nan: NaN values must match bit for bit too. Otherwise any two NaNs match: outside 16-bit
// storage, NaN payloads are not part of the contract (x86 arithmetic propagates the input NaN,
// NVIDIA's returns 0x7FFFFFFF); 16-bit storage keeps them on both sides (docs/numerics.md).
template <class T>
std::string first_mismatch(const std::vector<T>& a, const std::vector<T>& b, const char* what, bool exact_nan = false) {
  if (a.size() != b.size())
    return std::string(what) + ": sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      if (!exact_nan && std::isnan(a[i]) && std::isnan(b[i])) continue;
    }
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      uint32_t ua = 0, ub = 0;
      std::memcpy(&ua, &a[i], sizeof(T));
      std::memcpy(&ub, &b[i], sizeof(T));
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: index %zu cpu 0x%X gpu 0x%X", what, i, ua, ub);
      return buf;
    }
  }
  return {};
}

// Per-tensor quantize of dx (fp32, numel(shape) elements) on the GPU from producer-emitted
// per-chunk maxima (COAT's Group Scaling): the codes and the one scale.
struct ProducerResult {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
};
ProducerResult quantize_with_producer_maxima(const gpu::DeviceBuffer<float>& dx, const Shape& shape,
                                             const QuantSpec& spec, const gpu::DeviceBuffer<float>& maxima,
                                             size_t count) {
  gpu::DeviceBuffer<uint8_t> codes(static_cast<size_t>(shape_numel(shape)));
  gpu::DeviceBuffer<float> scale(1);
  gpu::DeviceBuffer<unsigned char> ws(gpu::quantize_workspace_bytes(spec, shape));
  gpu::QuantGpuOut out;
  out.codes = codes.get();
  out.scales = scale.get();
  gpu::QuantGpuOptions go;
  go.producer_maxima = maxima.get();
  go.producer_maxima_count = count;
  gpu::quantize_cuda(dx.get(), InputDtype::F32, shape, spec, out, ws.get(), go, nullptr);
  return {codes.download(), scale.download()};
}

void expect_same(const QuantizedTensor& c, const QuantizedTensor& g, const std::string& ctx) {
  EXPECT_EQ(first_mismatch(c.codes, g.codes, "codes"), "") << ctx;
  EXPECT_EQ(first_mismatch(c.scales, g.scales, "scales"), "") << ctx;
  EXPECT_EQ(first_mismatch(c.expand_k, g.expand_k, "k"), "") << ctx;
  EXPECT_EQ(first_mismatch(c.expand_c, g.expand_c, "c"), "") << ctx;
  EXPECT_EQ(f32_bits(c.tensor_amax), f32_bits(g.tensor_amax)) << ctx << ": tensor amax";
  // Dequantize: the GPU kernel on the CPU's codes must give the CPU's values, bit for bit.
  const std::vector<float> dc = dequantize(c), dg = gpu::dequantize_on_gpu(c);
  EXPECT_EQ(first_mismatch(dc, dg, "dequantized", c.spec.is_16bit()), "") << ctx;
}

// Log-normal data over ~8 decades with signs, zeros, and a few special values placed at the
// front (so small shapes see them too).
std::vector<float> test_data(size_t n, uint64_t seed, bool specials) {
  std::vector<float> x = test::lognormal_data(n, seed, 8.0);
  if (specials && n >= 8) {
    x[1] = 0.0f;
    x[2] = -0.0f;
    x[3] = std::numeric_limits<float>::infinity();
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[6] = 1e-40f;                                 // subnormal
    const uint32_t neg_payload_nan = 0xFFC12345u;  // 16-bit storage keeps its sign and payload
    std::memcpy(&x[7], &neg_payload_nan, sizeof neg_payload_nan);
  }
  return x;
}

// x rounded to the 16-bit input type dt (BF16 or FP16, to nearest even), as a 16-bit tensor holds it.
std::vector<uint16_t> to_16bit(const std::vector<float>& x, InputDtype dt) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = dt == InputDtype::BF16 ? f32_to_bf16_rne(x[i]) : f32_to_fp16_rne(x[i]);
  return h;
}

void check_spec(const std::string& text, const std::vector<int64_t>& shape, InputDtype dt, bool specials,
                uint64_t offset = 0) {
  const QuantSpec spec = QuantSpec::parse(text);
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const std::vector<float> x = test_data(n, 17 + n, specials);
  const std::vector<uint16_t> x16 = dt == InputDtype::F32 ? std::vector<uint16_t>{} : to_16bit(x, dt);
  const void* data = dt == InputDtype::F32 ? static_cast<const void*>(x.data()) : x16.data();
  QuantizeOptions o;
  o.index_offset = offset;
  const QuantizedTensor c = quantize_any(data, dt, shape, spec, o);
  const QuantizedTensor g = gpu::quantize_on_gpu(data, dt, shape, spec, o);
  std::string ctx = text + " shape";
  for (auto d : shape) ctx += " " + std::to_string(d);
  ctx += dt == InputDtype::F32 ? " f32" : (dt == InputDtype::BF16 ? " bf16" : " fp16");
  expect_same(c, g, ctx);
}

const std::vector<std::vector<int64_t>> kAwkward = {{1, 1},           {1, 5},      {5, 217}, {217, 100},
                                                    {3, 16 * 40 + 3}, {2, 3, 130}, {1000}};

TEST(QuantizeGpu, PlainGranularitiesAndScaleModesAwkwardShapes) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const char* specs[] = {"e4m3:tensor",
                         "e4m3:tensor:eps=1e-10",
                         "e5m2:tensor:scale=pow2",
                         "e4m3:row",
                         "e4m3:col",
                         "e4m3:g16:scale=bf16:eps=1e-10",
                         "e4m3:g32:scale=e8m0",
                         "e5m2:g32:scale=e8m0",
                         "e4m3:g128",
                         "e4m3:g100",
                         "e4m3:g7",
                         "e4m3:g512",
                         "e4m3:g600",
                         "e4m3:b128x128",
                         "e5m2:b16x48:scale=pow2",
                         "e4m3:row:sat=none",
                         "e5m2:tensor:sat=none",
                         "e4m3:g128:eps=1e-20:eps_add=fp64"};
  for (const char* s : specs)
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
}

// The peer presets and the keys behind them (amax_floor, scale_div, apply, mx): every scale rule
// runs in the shared scale code, and apply= other than div in the team and block kernels (the
// GPU's own div.full.f32 and rcp.approx.f32 for fdiv): the CPU emulation's bits on the device.
TEST(QuantizeGpu, PeerPresetsAndTheirKeys) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const char* specs[] = {"deepseek-act",
                         "deepseek-w",
                         "deepseek-act-ue8m0",
                         "deepseek-w-ue8m0",
                         "te-current",
                         "te-current-pow2",
                         "e4m3:g128:apply=mul",
                         "mxfp8",
                         "torchao-mxfp8",
                         "e4m3:g32:scale=e8m0:mx=ceil",
                         "e4m3:g32:scale=e8m0:mx=even",
                         "e5m2:g32:scale=e8m0:mx=floor",
                         "coat-act",
                         "coat-w",
                         "e4m3:g128:scale_div=fdiv:apply=fdiv",
                         "e4m3:row:amax_floor=0.5:apply=rcp",
                         "e4m3:b16x48:scale=pow2:apply=fdiv",
                         "e4m3:g64:apply=fdiv:round=stochastic:seed=4"};
  for (const char* s : specs) {
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
    check_spec(s, {64, 4096}, InputDtype::BF16, true);
  }
}

// de_min=kernel (coat-opt): COAT's lane-by-lane group minimum, computed on the GPU by its own pass,
// against the CPU's emulation: awkward shapes (short last groups: the team kernel), whole aligned
// rows (the 1xG kernel), bf16 input, and groups built to hit every quirk of the reduction.
TEST(QuantizeGpu, CoatKernelMinimumEqualsTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const auto& shape : kAwkward) check_spec("coat-opt", shape, InputDtype::F32, true);
  check_spec("coat-opt", {64, 4096}, InputDtype::F32, true);
  check_spec("coat-opt", {64, 4096}, InputDtype::BF16, true);
  check_spec("coat-opt", {5, 217}, InputDtype::FP16, true);
  check_spec("e5m2:g128:de=coat:de_min=kernel", {3, 1000}, InputDtype::F32, true);
  // One 128-element group per case: a zero first element (min 0), a zero at lane 1 of the second
  // warp (hides what that warp's odd lanes merge into it), every magnitude above 1e9 (the block step's cap),
  // a NaN and an Inf among ordinary values, an all-zero group, and a group of one value.
  const int64_t G = 128, cases = 7;
  std::vector<float> x = test::lognormal_data(static_cast<size_t>(G * cases), 3, 6.0);
  x[0 * G] = 0.0f;
  x[1 * G + 33] = 0.0f;
  for (int64_t j = 0; j < G; ++j) x[2 * G + j] = 3e9f + static_cast<float>(j) * 1e7f;
  x[3 * G + 5] = std::numeric_limits<float>::quiet_NaN();
  x[3 * G + 77] = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < G; ++j) x[4 * G + j] = 0.0f;
  for (int64_t j = 0; j < G; ++j) x[5 * G + j] = j == 40 ? -2.5f : 0.0f;
  for (int64_t j = 0; j < G; ++j) x[6 * G + j] = 1.0f;
  const QuantSpec spec = QuantSpec::parse("coat-opt");
  // {cases, G} and {cases * G}: the aligned 1xG kernel; {1, cases * G - 3}: the team kernel (the
  // last group short, the teams past it idle).
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{cases, G}, std::vector<int64_t>{cases * G}, std::vector<int64_t>{1, cases * G - 3}}) {
    const QuantizedTensor c = quantize(x.data(), shape, spec);
    const QuantizedTensor g = gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec, {});
    expect_same(c, g, "coat-opt hand cases");
  }
  // The cases differ from de_min=nonzero where they should (a zero first element: k from min 0).
  const QuantizedTensor plain = quantize(x.data(), Shape{cases * G}, QuantSpec::parse("e4m3:g128:de=coat"));
  const QuantizedTensor kern = quantize(x.data(), Shape{cases * G}, spec);
  EXPECT_NE(f32_bits(plain.expand_k[0]), f32_bits(kern.expand_k[0]));
}

TEST(QuantizeGpu, Bf16AndFp16InputsAreWidenedExactly) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"e4m3:tensor", "e4m3:g128", "e4m3:g16:scale=bf16", "e4m3:b128x128", "e4m3:g128:de=coat"}) {
    check_spec(s, {217, 300}, InputDtype::BF16, true);
    check_spec(s, {5, 217}, InputDtype::FP16, true);
  }
}

TEST(QuantizeGpu, StochasticRoundingSameStream) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"e4m3:g16:round=stochastic:seed=9", "e5m2:tensor:round=stochastic:seed=3",
                        "e4m3:b128x128:round=stochastic:seed=1", "e4m3:g128:de=coat:round=stochastic:seed=5",
                        "e4m3:g128:de=robust:round=stochastic:seed=6"}) {
    check_spec(s, {5, 217}, InputDtype::F32, false, 0);
    check_spec(s, {5, 217}, InputDtype::F32, false, 3);  // element offset not a multiple of 4
  }
}

TEST(QuantizeGpu, DynamicRangeExpansionCoatAndRobust) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s :
       {"e4m3:g128:de=coat", "e4m3:g128:de=robust", "e5m2:g128:de=coat", "e4m3:g128:de=coat:de_target=e5m2",
        "e4m3:g64:de=robust", "e4m3:g100:de=coat", "e4m3:row:de=coat", "e4m3:g1000:de=robust", "e4m3:b16x48:de=robust",
        "e4m3:tensor:de=coat", "e4m3:tensor:de=robust", "e4m3:col:de=robust",
        // robust teams of 1 and 32 lanes (the candidate's mantissa table filled by one lane, and by
        // 8 of 32), and E5M2's range
        "e5m2:g16:de=robust", "e4m3:g512:de=robust", "e5m2:g128:de=robust",
        // non-saturating storage: the fallback's hardware-converter path must match the
        // reference's codes there too (its quotients stay below the overflow threshold)
        "e4m3:g128:de=robust:sat=none", "e5m2:g64:de=robust:sat=none"}) {
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
  }
}

// Robust DE keeps the candidate only where its error sum is below the fallback's: groups whose two
// sums are close test that the GPU decides them as the CPU does. Rows of log-normal magnitudes
// with sigma = 2 (in ln), and rows whose halves differ by a factor of 1000, give near-ties
// (|sse_c - sse_fb| within 2% of the smaller) in about 15-20% of their E4M3 1x128 groups, against
// under 1% for normal data; every spec below sees both outcomes (the fallback wins about 2% of
// E5M2's groups and 10-56% of E4M3's). Every code, scale, k and c must equal the CPU's.
TEST(QuantizeGpu, RobustChoiceNearTiesEqualsTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const int64_t rows = 4096;
  std::mt19937_64 rng(2024);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(rows) * 128);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < 128; ++i) {
      double v = nd(rng);
      if (r % 2 == 0) {
        const double sign = (rng() & 1) ? -1.0 : 1.0;
        v = std::exp(2.0 * v) * sign;
      } else if (i < 64) {
        v *= 1e-3;
      }
      x[static_cast<size_t>(r * 128 + i)] = static_cast<float>(v);
    }
  for (const char* text : {"e4m3:g128:de=robust", "e5m2:g128:de=robust", "e4m3:g64:de=robust", "e4m3:g16:de=robust",
                           "e4m3:g128:de=robust:round=stochastic", "e4m3:g128:de=robust:sat=none"}) {
    const QuantSpec spec = QuantSpec::parse(text);
    const Shape shape{rows, 128};
    const QuantizedTensor c = quantize_any(x.data(), InputDtype::F32, shape, spec, QuantizeOptions{});
    const QuantizedTensor g = gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec, QuantizeOptions{});
    expect_same(c, g, text);
    // The data must exercise both outcomes: the fallback is k = c = 1.
    size_t fallback = 0;
    for (size_t i = 0; i < c.expand_k.size(); ++i) fallback += c.expand_k[i] == 1.0f && c.expand_c[i] == 1.0f;
    EXPECT_GT(fallback, c.expand_k.size() / 100) << text;
    EXPECT_LT(fallback, c.expand_k.size() - c.expand_k.size() / 100) << text;
  }
}

// DE data aimed at the encoder's hardest inputs: in every 128-element group the first two
// elements fix max and min (so k, c, s are known from the CPU reference), and the others are
// placed so that their expanded value pow(|x|/c, k)/s lies within a few ulp of an FP8 rounding
// midpoint (or exactly on one), where a fast approximation of pow would pick the wrong side.
// Exponents k from 0.2 to beyond 16 (the guarded encoder's limit); both formats; random signs.
std::vector<float> coat_midpoint_data(const QuantSpec& spec, int groups, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(groups) * 128);
  std::mt19937_64 rng(seed);
  const bool e5 = spec.format == Format::E5M2;
  const double B = e5 ? 57344.0 * 57344.0 / 2 : 448.0 * 448.0 / 2;
  for (int g = 0; g < groups; ++g) {
    const double k_target = 0.2 + 17.3 * g / groups;  // 0.2 .. 17.5
    // (k below 1/2 needs max/min ratios beyond 2^33: large maxima keep the minima normal)
    const int e_max = k_target < 0.5 ? 40 + static_cast<int>(rng() % 20) : static_cast<int>(rng() % 40) - 20;
    const double mx = std::ldexp(1.0 + (rng() % 1000) / 1000.0, e_max);
    const double mn = mx / std::pow(B, 1.0 / k_target) * 1.01;
    float* row = x.data() + static_cast<size_t>(g) * 128;
    row[0] = static_cast<float>(mx);
    row[1] = -static_cast<float>(mn);
    for (int i = 2; i < 128; ++i) row[i] = static_cast<float>(mx);  // placeholders within [mn, mx]
  }
  // The CPU's group parameters for these extremes, then the midpoints' preimages.
  const Shape shape{groups, 128};
  const QuantizedTensor q = quantize(x.data(), shape, spec);
  for (int g = 0; g < groups; ++g) {
    const double k = q.expand_k[static_cast<size_t>(g)], c = q.expand_c[static_cast<size_t>(g)],
                 s = q.scales[static_cast<size_t>(g)];
    float* row = x.data() + static_cast<size_t>(g) * 128;
    const double lo = std::fabs(row[1]), hi = row[0];
    for (int i = 2; i < 128; ++i) {
      const int code = 1 + static_cast<int>(rng() % (e5 ? 122 : 125));
      const double a = decode_fp8(static_cast<uint8_t>(code), e5 ? 1 : 0);
      const double b = decode_fp8(static_cast<uint8_t>(code + 1), e5 ? 1 : 0);
      const double mid = (rng() % 8 == 0) ? a : 0.5 * (a + b);  // some exact code values too
      double v = c * std::pow(mid * s, 1.0 / k);
      v = std::min(std::max(v, lo), hi);
      uint32_t u = f32_bits(static_cast<float>(v));
      u = static_cast<uint32_t>(static_cast<int64_t>(u) + static_cast<int64_t>(rng() % 7) - 3);
      row[i] = f32_from_bits(u) * ((rng() & 1) ? -1.0f : 1.0f);
      if (std::fabs(row[i]) > hi || std::fabs(row[i]) < lo) row[i] = static_cast<float>(hi);
    }
  }
  return x;
}

TEST(QuantizeGpu, CoatEncoderAtFp8Midpoints) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"e4m3:g128:de=coat", "e5m2:g128:de=coat", "e4m3:g128:de=coat:de_target=e5m2"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    const int groups = 4096;
    const std::vector<float> x = coat_midpoint_data(spec, groups, 99);
    const Shape shape{groups, 128};
    expect_same(quantize(x.data(), shape, spec), gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec), s);
  }
}

// The aligned 1xG coat kernel (G = 16..512, rows a whole number of groups): every input dtype,
// both formats, saturating or not, stochastic rounding (reference path only), and the special
// values of test_data (NaN, Inf, zeros, a subnormal) in the first group.
TEST(QuantizeGpu, CoatAlignedGroupsEveryDtypeGroupSizeAndRounding) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s :
       {"e4m3:g16:de=coat", "e4m3:g32:de=coat", "e4m3:g128:de=coat", "e4m3:g512:de=coat", "e5m2:g128:de=coat",
        "e4m3:g128:de=coat:sat=none", "e4m3:g64:de=coat:de_target=e5m2", "e4m3:g128:de=coat:round=stochastic:seed=3"}) {
    for (InputDtype dt : {InputDtype::F32, InputDtype::BF16, InputDtype::FP16}) {
      check_spec(s, {37, 1024}, dt, true);
      check_spec(s, {3, 512}, dt, false);
    }
  }
}

TEST(QuantizeGpu, DegenerateGroups) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // All-zero, constant, single-element and sign-mixed groups, for every mode.
  std::vector<float> x(4 * 128 + 1, 0.0f);
  for (int i = 128; i < 256; ++i) x[static_cast<size_t>(i)] = 0.375f;                          // constant
  for (int i = 256; i < 384; ++i) x[static_cast<size_t>(i)] = (i % 2 ? -1.0f : 1.0f) * 1e-6f;  // sign-mixed
  x[400] = 3.0f;                                                                               // one nonzero
  x[4 * 128] = -2.0f;                                                                          // single-element group
  const std::vector<int64_t> shape = {static_cast<int64_t>(x.size())};
  for (const char* s :
       {"e4m3:g128", "e4m3:g128:de=coat", "e4m3:g128:de=robust", "e4m3:g128:scale=e8m0", "e4m3:tensor"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    expect_same(quantize(x.data(), shape, spec), gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec), s);
  }
}

TEST(QuantizeGpu, DelayedScalingFollowsTheScalerAcrossSteps) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const QuantSpec spec = QuantSpec::parse("e4m3:tensor:delayed=3,max,margin=1");
  DelayedScaler cpu(spec), gpu_s(spec);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> x = test::lognormal_data(5 * 217, 100 + step, 4.0);
    if (step == 3) x[7] = std::numeric_limits<float>::infinity();  // TE keeps the scale on a non-finite amax
    const std::vector<int64_t> shape = {5, 217};
    QuantizeOptions oc, og;
    oc.delayed = &cpu;
    og.delayed = &gpu_s;
    const QuantizedTensor c = quantize(x.data(), shape, spec, oc);
    const QuantizedTensor g = gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec, og);
    expect_same(c, g, "delayed step " + std::to_string(step));
    EXPECT_EQ(f32_bits(cpu.scale()), f32_bits(gpu_s.scale())) << "scaler state after step " << step;
  }
}

TEST(QuantizeGpu, GroupScalingWithProducerMaximaEqualsJustInTime) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // Per-tensor scaling from per-chunk maxima a producer emitted (any chunking) equals the CPU's
  // one-pass amax: max is exact in any order.
  const std::vector<int64_t> shape = {217, 300};
  const size_t n = 217 * 300;
  const std::vector<float> x = test::lognormal_data(n, 5, 6.0);
  const QuantSpec spec = QuantSpec::parse("e4m3:tensor");
  const QuantizedTensor c = quantize(x.data(), shape, spec);
  gpu::DeviceBuffer<float> dx = gpu::to_device(x);
  for (size_t chunk : {size_t{16}, size_t{128}, size_t{1000}}) {
    gpu::DeviceBuffer<float> maxima((n + chunk - 1) / chunk);
    gpu::chunk_maxima_cuda(dx.get(), InputDtype::F32, n, chunk, maxima.get(), nullptr);
    const ProducerResult r = quantize_with_producer_maxima(dx, shape, spec, maxima, maxima.size());
    EXPECT_EQ(first_mismatch(c.codes, r.codes, "codes"), "") << "chunk " << chunk;
    EXPECT_EQ(first_mismatch(c.scales, r.scale, "scale"), "") << "chunk " << chunk;
  }
  // And the one-pass amax kernel.
  gpu::DeviceBuffer<float> amax(1);
  gpu::DeviceBuffer<unsigned char> ws(gpu::amax_workspace_bytes(n));
  gpu::tensor_amax_cuda(dx.get(), InputDtype::F32, n, amax.get(), ws.get(), nullptr);
  EXPECT_EQ(f32_bits(amax.download()[0]), f32_bits(c.tensor_amax));
}

TEST(QuantizeGpu, PassThroughFormats) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"bf16:tensor", "fp16:tensor", "bf16:tensor:scale=fp32", "fp16:tensor:scale=fp32"})
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
}

TEST(QuantizeGpu, Llama2ShapesVectorizedPaths) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 4096 x 11008 (the MLP weight): every group full and 16-element aligned, so the vectorized
  // loads and stores run; bf16 input as the activations are stored.
  for (const char* s :
       {"e4m3:g128", "e4m3:tensor", "e4m3:b128x128", "e4m3:g16:scale=bf16", "e4m3:g32:scale=e8m0", "e4m3:row"})
    check_spec(s, {4096, 11008}, InputDtype::BF16, false);
  check_spec("e4m3:g128:de=coat", {4096 * 11008}, InputDtype::F32, false);
}

// Data like a training trace's tensors: layer-norm weights near 1 (all positive, narrow range),
// weights and gradients normal with a small spread, activations log-normal. On such data a code
// encoded with another group's scale differs from the right one for nearly every value, so a
// lane that writes into a neighbouring group shows up.
std::vector<float> trace_like_data(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double z = nd(rng);
    x = kind == 0 ? static_cast<float>(1.0 + 0.05 * z) : (kind == 1 ? static_cast<float>(2e-3 * z) : 0.0f);
  }
  if (kind == 2) v = test::lognormal_data(n, seed, 5.0);
  return v;
}

void check_on(const std::string& text, const std::vector<int64_t>& shape, InputDtype dt, const std::vector<float>& x) {
  const QuantSpec spec = QuantSpec::parse(text);
  const std::vector<uint16_t> x16 = dt == InputDtype::F32 ? std::vector<uint16_t>{} : to_16bit(x, dt);
  const void* data = dt == InputDtype::F32 ? static_cast<const void*>(x.data()) : x16.data();
  const QuantizedTensor c = quantize_any(data, dt, shape, spec, QuantizeOptions{});
  const QuantizedTensor g = gpu::quantize_on_gpu(data, dt, shape, spec, QuantizeOptions{});
  std::string ctx = text + " shape";
  for (auto d : shape) ctx += " " + std::to_string(d);
  ctx += dt == InputDtype::F32 ? " f32" : (dt == InputDtype::BF16 ? " bf16" : " fp16");
  expect_same(c, g, ctx);
}

TEST(QuantizeGpu, TraceShapesWithPartialTeamsAndColumnsMultipleOf16) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // The sample trace's shapes: rows a multiple of 16, groups shorter than a team (64 columns with
  // G = 128), rows of 176 = 11 x 16 (a 16-lane team with 5 empty lanes), blocks whose last teams
  // have no group: the shapes where lanes without elements exist.
  const std::vector<std::vector<int64_t>> shapes = {{64},         {176, 64}, {64, 176}, {64, 64},
                                                    {1, 64, 176}, {11264},   {256, 64}};
  const char* specs[] = {"e4m3:row:sat=none",
                         "e5m2:g128",
                         "e5m2:g32:scale=e8m0",
                         "e5m2:row:scale=pow2",
                         "e4m3:g128",
                         "e4m3:g32:scale=e8m0",
                         "e4m3:row",
                         "e4m3:g16:scale=bf16:eps=1e-10",
                         "e4m3:g128:eps=1e-20:eps_add=fp64",
                         "e4m3:g128:de=coat",
                         "e4m3:b128x128",
                         "e4m3:g16:round=stochastic:seed=7"};
  uint64_t seed = 1;
  for (const auto& shape : shapes) {
    const size_t n = static_cast<size_t>(shape_numel(shape));
    for (int kind : {0, 1, 2}) {
      const std::vector<float> x = trace_like_data(n, kind, seed++);
      for (const char* s : specs) {
        check_on(s, shape, InputDtype::F32, x);
        check_on(s, shape, InputDtype::BF16, x);
      }
    }
  }
}

// quantize_cuda into outputs with kGuard poisoned bytes on either side of the codes, scales, k
// and c: a store outside the tensor's own outputs changes a guard byte whichever buffer the
// allocator happens to place next (a store past the codes' end may otherwise land in the scales).
struct GuardedRun {
  std::vector<uint8_t> codes;
  std::vector<float> scales, k, c;
  std::string guard_error;  // empty when every guard byte is intact
};

GuardedRun quantize_guarded(const void* host_x, InputDtype dt, const std::vector<int64_t>& shape,
                            const QuantSpec& spec) {
  constexpr size_t kGuard = 256;  // bytes: keeps every output 16-byte aligned
  constexpr uint8_t kPoison = 0xA5;
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const size_t groups = static_cast<size_t>(group_geometry(spec, shape).num_groups());
  const bool de = spec.has_expand();
  gpu::DeviceBuffer<unsigned char> dx(n * (dt == InputDtype::F32 ? 4 : 2));
  dx.upload(static_cast<const unsigned char*>(host_x), dx.size());
  struct Out {
    gpu::DeviceBuffer<unsigned char> buf;
    size_t bytes;
  };
  auto make = [&](size_t bytes) {
    Out o{gpu::DeviceBuffer<unsigned char>(bytes + 2 * kGuard), bytes};
    o.buf.fill_bytes(kPoison);
    return o;
  };
  Out codes = make(n), scales = make(groups * sizeof(float)), k = make(de ? groups * sizeof(float) : 0),
      c = make(de ? groups * sizeof(float) : 0);
  gpu::DeviceBuffer<unsigned char> ws(gpu::quantize_workspace_bytes(spec, shape));
  gpu::QuantGpuOut out;
  out.codes = codes.buf.get() + kGuard;
  out.scales = reinterpret_cast<float*>(scales.buf.get() + kGuard);
  if (de) {
    out.expand_k = reinterpret_cast<float*>(k.buf.get() + kGuard);
    out.expand_c = reinterpret_cast<float*>(c.buf.get() + kGuard);
  }
  gpu::quantize_cuda(dx.get(), dt, shape, spec, out, ws.get(), gpu::QuantGpuOptions{}, nullptr);
  GuardedRun r;
  auto take = [&](const Out& o, const char* what, auto& dst) {
    const std::vector<unsigned char> h = o.buf.download();
    for (size_t i = 0; i < h.size(); ++i) {
      if ((i < kGuard || i >= kGuard + o.bytes) && h[i] != kPoison && r.guard_error.empty()) {
        const long long off =
            i < kGuard ? -static_cast<long long>(kGuard - i) : static_cast<long long>(i - kGuard - o.bytes);
        r.guard_error = std::string(what) + ": guard byte at " + std::to_string(off) +
                        (i < kGuard ? " (before)" : " past the end") + " written";
      }
    }
    using V = typename std::remove_reference_t<decltype(dst)>::value_type;
    dst.resize(o.bytes / sizeof(V));
    std::memcpy(dst.data(), h.data() + kGuard, o.bytes);
  };
  take(codes, "codes", r.codes);
  take(scales, "scales", r.scales);
  if (de) {
    take(k, "k", r.k);
    take(c, "c", r.c);
  }
  return r;
}

TEST(QuantizeGpu, PartialTeamShapesWriteOnlyTheirOwnGroups) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 1xG groups that leave lanes of a team without elements (the team kernel: 16 elements per
  // lane, a power-of-two team per group). 64 columns with G = 128: every row is one group of 64,
  // lanes 4-7 of 8 empty. Rows of 176 = 11 x 16: row groups leave lanes 11-15 of 16 empty;
  // G = 32 makes the last group of every row 16 elements (lane 1 of 2 empty); G = 64 makes it 48.
  // Around them: a row more or less, 48 / 80 / 112 / 160 / 192 columns, single rows, a 3-D view,
  // and G = 48 (not a power of two). An empty lane's 16 elements would be the next row's first
  // ones, and past the end of the tensor for the last row: codes, scales, k and c must equal the
  // CPU's bit for bit, and no byte around those outputs may change.
  const std::vector<std::vector<int64_t>> shapes = {{64, 64}, {64, 176},   {63, 64},  {65, 176}, {64, 48},
                                                    {64, 80}, {64, 112},   {64, 160}, {64, 192}, {1, 176},
                                                    {1, 64},  {2, 3, 176}, {176, 64}};
  const char* specs[] = {"e4m3:g128",
                         "e5m2:g128",
                         "e4m3:row",
                         "e5m2:row",
                         "e4m3:g32",
                         "e5m2:g32",
                         "e4m3:g32:scale=e8m0",
                         "e5m2:g64:scale=pow2",
                         "e4m3:g48",
                         "e4m3:row:sat=none",
                         "e4m3:g128:de=coat",
                         "e5m2:row:de=coat",
                         "e4m3:g32:de=robust",
                         "e4m3:g128:de=robust"};
  uint64_t seed = 501;
  for (const auto& shape : shapes) {
    const size_t n = static_cast<size_t>(shape_numel(shape));
    for (int kind : {0, 2}) {  // layer-norm-like values near 1; log-normal over 5 decades
      const std::vector<float> x = trace_like_data(n, kind, seed++);
      const std::vector<uint16_t> xb = to_16bit(x, InputDtype::BF16);
      for (InputDtype dt : {InputDtype::F32, InputDtype::BF16}) {
        const void* data =
            dt == InputDtype::F32 ? static_cast<const void*>(x.data()) : static_cast<const void*>(xb.data());
        for (const char* s : specs) {
          const QuantSpec spec = QuantSpec::parse(s);
          const QuantizedTensor cpu = quantize_any(data, dt, shape, spec, QuantizeOptions{});
          const GuardedRun gpu_r = quantize_guarded(data, dt, shape, spec);
          std::string ctx(s);
          ctx += " shape";
          for (auto d : shape) {
            ctx += ' ';
            ctx += std::to_string(d);
          }
          ctx += dt == InputDtype::F32 ? " f32" : " bf16";
          ctx += kind == 0 ? " near-1 data" : " log-normal data";
          EXPECT_EQ(gpu_r.guard_error, "") << ctx;
          EXPECT_EQ(first_mismatch(cpu.codes, gpu_r.codes, "codes"), "") << ctx;
          EXPECT_EQ(first_mismatch(cpu.scales, gpu_r.scales, "scales"), "") << ctx;
          EXPECT_EQ(first_mismatch(cpu.expand_k, gpu_r.k, "k"), "") << ctx;
          EXPECT_EQ(first_mismatch(cpu.expand_c, gpu_r.c, "c"), "") << ctx;
        }
      }
    }
  }
}

TEST(QuantizeGpu, ToolchainClampGuardProbe) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // Reports, does not check: whether this build's device code takes the branch
  // "vec && clamp(raw, 0, 16) == 16" for exactly the raw >= 16 in [-64, 80]. No kernel branches
  // on that form (quant_team_kernel says why); the count shows whether the toolchain still
  // miscompiles it.
  int first = 0;
  const uint64_t bad = gpu::detail::clamp_guard_mismatches(-64, 80, &first);
  RecordProperty("clamp_guard_mismatches", std::to_string(bad));
  if (bad)
    std::printf(
        "[ probe    ] clamp guard: %llu of 145 raw values in [-64, 80] take the other branch than raw >= 16 (first: "
        "raw = %d)\n",
        static_cast<unsigned long long>(bad), first);
  else std::printf("[ probe    ] clamp guard: the branch agrees with raw >= 16 for every raw in [-64, 80]\n");
}

// Real-looking data with non-finite values, signed zeros, subnormals and an all-zero stretch
// spread over the whole tensor, so that many groups of the fast kernels take their reference path.
std::vector<float> scattered_specials(size_t n, uint64_t seed) {
  std::vector<float> x = test::lognormal_data(n, seed, 7.0);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t i = 97; i < n; i += 9973)
    x[i] = (i / 9973) % 3 == 0 ? std::numeric_limits<float>::quiet_NaN() : ((i / 9973) % 3 == 1 ? inf : -inf);
  for (size_t i = 13; i < n; i += 1031) x[i] = -0.0f;
  for (size_t i = 29; i < n; i += 2053) x[i] = 1e-41f;
  for (size_t i = n / 2; i < n / 2 + 300 && i < n; ++i) x[i] = 0.0f;
  return x;
}

TEST(QuantizeGpu, FastKernelsEveryDtypeScaleModeAndFallback) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 1xG fast kernel (G = 16..512), staged rows / blocks / long groups, per-tensor encode;
  // fp32, bf16 and fp16 inputs; saturating and not; RNE and stochastic; NaN / Inf groups.
  const std::vector<int64_t> shape = {256, 4096};
  const size_t n = 256 * 4096;
  const std::vector<float> plain = test::lognormal_data(n, 41, 6.0);
  const std::vector<float> special = scattered_specials(n, 43);
  const char* specs[] = {"e4m3:g16:scale=bf16",
                         "e4m3:g32:scale=e8m0",
                         "e5m2:g64",
                         "e4m3:g128",
                         "e4m3:g128:sat=none",
                         "e5m2:g256:scale=pow2",
                         "e4m3:g512",
                         "e4m3:g1024",
                         "e4m3:row",
                         "e5m2:row:sat=none",
                         "e4m3:b128x128",
                         "e4m3:b128x128:scale=pow2",
                         "e4m3:b16x48",
                         "e4m3:tensor",
                         "e5m2:tensor:sat=none",
                         "e4m3:g128:round=stochastic:seed=11",
                         "e4m3:row:round=stochastic:seed=3",
                         "e4m3:g128:eps=1e-12"};
  for (const char* s : specs) {
    for (InputDtype dt : {InputDtype::F32, InputDtype::BF16, InputDtype::FP16}) {
      check_on(s, shape, dt, plain);
      check_on(s, shape, dt, special);
    }
  }
  // Long rows: 70000 bf16 (a 140 KB stage pair in the staged kernel) and 70000 fp32 (280 KB: more
  // than a block's shared memory, so the generic one-block-per-group kernel with two reads).
  for (InputDtype dt : {InputDtype::BF16, InputDtype::F32})
    check_on("e4m3:row", {3, 70000}, dt, test::lognormal_data(3 * 70000, 47, 6.0));
}

// Enough units (32 elements for bf16 1x128 and the per-tensor encode, 16 for bf16 1x16 / 1x32 and
// for fp32) that every thread of the resident grid runs several loop iterations, and a unit count
// that ends inside a warp's last iteration. Delayed scaling over three steps, as the scaler's state
// carries from one to the next.
TEST(QuantizeGpu, FastKernelsManyIterationsPerThreadAndAPartialLastWarp) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> shape = {6001, 4352};
  const size_t n = 6001 * 4352;
  const std::vector<float> x = scattered_specials(n, 53);
  for (const char* s : {"e4m3:g128", "e4m3:g16:scale=bf16", "e5m2:g32:scale=e8m0", "e4m3:tensor"})
    for (InputDtype dt : {InputDtype::BF16, InputDtype::F32}) check_on(s, shape, dt, x);
  const QuantSpec spec = QuantSpec::parse("e4m3:tensor:delayed=2,max");
  DelayedScaler cpu(spec), gpu_s(spec);
  for (int step = 0; step < 3; ++step) {
    const std::vector<uint16_t> v16 = to_16bit(test::lognormal_data(n, 60 + step, 4.0 + step), InputDtype::BF16);
    QuantizeOptions oc, og;
    oc.delayed = &cpu;
    og.delayed = &gpu_s;
    const QuantizedTensor c = quantize_any(v16.data(), InputDtype::BF16, shape, spec, oc);
    const QuantizedTensor g = gpu::quantize_on_gpu(v16.data(), InputDtype::BF16, shape, spec, og);
    expect_same(c, g, "delayed bf16 6001x4352 step " + std::to_string(step));
    EXPECT_EQ(f32_bits(cpu.scale()), f32_bits(gpu_s.scale())) << "scaler state after step " << step;
  }
}

TEST(QuantizeGpu, WarpGroupKernelEveryWidthShapeAndFallback) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // Groups of more than 512 elements and at most 512 16-byte words take the warp-per-group kernel:
  // rows of 800 / 1000 / 1600 / 2400 / 4096 elements give 100-512 words for bf16 and fp16 (every
  // words-per-lane width: 4, 8, 12, 16) and 200-1024 for fp32 (the longer ones staged); RxC
  // blocks with a partial last block row and column; 1xG groups longer than 512. Plain data and
  // data with NaN / Inf / zero groups; RNE, stochastic, E8M0 and power-of-two scales.
  struct Case {
    const char* spec;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"e4m3:row", {7, 800}},
      {"e5m2:row:sat=none", {4, 1000}},
      {"e4m3:row:scale=e8m0", {9, 1600}},
      {"e4m3:row:round=stochastic:seed=5", {5, 2400}},
      {"e4m3:row", {3, 4096}},
      {"e4m3:b16x48", {100, 200}},
      {"e4m3:b32x64:scale=pow2", {70, 192}},
      {"e4m3:g1024", {6, 2048}},
      {"e5m2:g2048:scale=e8m0", {4, 4096}},
  };
  uint64_t seed = 101;
  for (const auto& c : cases) {
    const size_t n = static_cast<size_t>(shape_numel(c.shape));
    const std::vector<float> plain = test::lognormal_data(n, seed++, 6.0);
    const std::vector<float> special = scattered_specials(n, seed++);
    for (InputDtype dt : {InputDtype::F32, InputDtype::BF16, InputDtype::FP16}) {
      check_on(c.spec, c.shape, dt, plain);
      check_on(c.spec, c.shape, dt, special);
    }
  }
}

TEST(QuantizeGpu, HardwareConverterEqualsReferenceEncoderOnAllFiniteFloats) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // The fast kernels use cvt.rn.satfinite where it equals encode_fp8_rne(x, SAT): prove it for
  // every finite fp32 bit pattern, both formats (the kernels check the same at first use and keep
  // the reference encoder if this ever fails).
  EXPECT_EQ(gpu::detail::hw_cvt_mismatches(true), 0u) << "E4M3";
  EXPECT_EQ(gpu::detail::hw_cvt_mismatches(false), 0u) << "E5M2";
  EXPECT_TRUE(gpu::detail::hw_cvt_verified()) << "the kernels' own check at first use disagrees";
}

TEST(QuantizeGpu, HardwareFp16ConverterEqualsReferenceOnAllNonNanFloats) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // The elementwise-state AdamW encodes and decodes fp16 moments with cvt.rn.f16.f32 / cvt.f32.f16
  // where they equal f32_to_fp16_rne (saturating and not) and fp16_to_f32: every non-NaN fp32 bit
  // pattern and every non-NaN fp16 code.
  EXPECT_EQ(gpu::detail::hw_fp16_mismatches(), 0u);
  EXPECT_TRUE(gpu::detail::hw_fp16_verified()) << "the kernels' own check at first use disagrees";
}

TEST(QuantizeGpu, ReciprocalDivisionIsCorrectlyRounded) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // div_by (per-group reciprocal + two Markstein corrections) against div_rn on 2^26 random
  // pairs over its whole range, a quarter of them quotients with extreme significands.
  EXPECT_EQ(gpu::detail::div_by_mismatches(uint64_t{1} << 26, 5), 0u);
}

TEST(QuantizeGpu, ReciprocalDivisionGivesTheReferenceCodesForEveryFloat) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // Exhaustive over all 2^32 x for adversarial scales: the ends of div_by's range (2^-80, just
  // below 2^81), all-ones and minimal significands, 1, typical 1/448 and 1/57344 scales: the fast
  // path's nearest-rounded codes equal the reference's for every finite x with |x/s| <= 2^17 (the
  // quantizers never exceed fmax (1 + 2^-22)), and the quotient itself is bit-exact wherever
  // 2^-20 <= |x/s| <= 2^17. (Scales outside the range never take div_by.)
  const float scales[] = {std::ldexp(1.0f, -80),
                          std::ldexp(1.9999999f, -80),
                          std::ldexp(1.0f, 80),
                          std::ldexp(1.9999999f, 80),
                          1.0f,
                          1.9999999f,
                          1.0000001f,
                          1.0f / 448.0f,
                          1.0f / 57344.0f,
                          3.1415927e-5f,
                          2.7182817e+7f};
  for (float sc : scales) {
    for (bool e4m3 : {true, false}) {
      uint64_t codes = 1, quotients = 1;
      gpu::detail::div_code_mismatches(sc, e4m3, codes, quotients);
      EXPECT_EQ(codes, 0u) << "s = " << sc << (e4m3 ? " E4M3" : " E5M2");
      EXPECT_EQ(quotients, 0u) << "s = " << sc << (e4m3 ? " E4M3" : " E5M2");
    }
  }
}

TEST(QuantizeGpu, PowWithGroupExponentEqualsPowDet) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // The DE kernels' pow_det_y (y-only work hoisted per group) against dmath::pow_det on 2^24
  // (x, y) pairs: random x of every class, y from DE's exponents and special values.
  EXPECT_EQ(gpu::detail::pow_y_mismatches(uint64_t{1} << 24, 3), 0u);
  // Its branch-free log2 (the division as div_rn's fast path without the range check), on every
  // positive finite float.
  EXPECT_EQ(gpu::detail::log2_fast_mismatches(), 0u);
}

TEST(QuantizeGpu, GroupScalingWithALongMaximaListUsesTheMultiBlockReduction) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 2^17 producer maxima (above the single-block limit), with a NaN and an Inf maximum that must
  // not enter, against the CPU's one-pass amax; and reduce_maxima_cuda on the same list.
  const std::vector<int64_t> shape = {512, 4096};
  const size_t n = 512 * 4096, chunk = 16, m = n / chunk;
  const std::vector<float> x = test::lognormal_data(n, 9, 6.0);
  for (const char* s : {"e4m3:tensor", "e5m2:tensor:scale=pow2"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    const QuantizedTensor c = quantize(x.data(), shape, spec);
    gpu::DeviceBuffer<float> dx = gpu::to_device(x);
    gpu::DeviceBuffer<float> maxima(m);
    gpu::chunk_maxima_cuda(dx.get(), InputDtype::F32, n, chunk, maxima.get(), nullptr);
    std::vector<float> hm = maxima.download();
    hm[5] = std::numeric_limits<float>::quiet_NaN();
    hm[m - 3] = std::numeric_limits<float>::infinity();
    maxima.upload(hm);
    const ProducerResult r = quantize_with_producer_maxima(dx, shape, spec, maxima, m);
    EXPECT_EQ(first_mismatch(c.codes, r.codes, "codes"), "") << s;
    EXPECT_EQ(first_mismatch(c.scales, r.scale, "scale"), "") << s;
    gpu::DeviceBuffer<float> amax(1);
    gpu::reduce_maxima_cuda(maxima.get(), m, amax.get(), nullptr);
    EXPECT_EQ(f32_bits(amax.download()[0]), f32_bits(c.tensor_amax)) << s;
  }
}

TEST(QuantizeGpu, DelayedScalingOverflowNonSaturating) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // A history scale far too large for this step: many |x * scale| overflow; with sat=none they
  // must become NaN codes exactly as on the CPU (the hardware converter only saturates).
  for (const char* s :
       {"e4m3:tensor:delayed=2,max:sat=none", "e5m2:tensor:delayed=2,max", "e4m3:tensor:delayed=2,recent"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    DelayedScaler cpu(spec), gs(spec);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> x = test::lognormal_data(64 * 1000, 200 + step, 4.0);
      if (step == 2)
        for (auto& v : x) v *= 1000.0f;  // the history lags: overflow
      const std::vector<int64_t> shape = {64, 1000};
      QuantizeOptions oc, og;
      oc.delayed = &cpu;
      og.delayed = &gs;
      const QuantizedTensor c = quantize(x.data(), shape, spec, oc);
      const QuantizedTensor g = gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec, og);
      expect_same(c, g, std::string(s) + " step " + std::to_string(step));
    }
  }
}

// Cast-transpose (QuantGpuOut::codes_t): the row-major codes equal the CPU's and the transposed ones
// are their transpose, for per-tensor plain (just in time), delayed and stochastic specs; shapes of
// whole 128 x 64 tiles, whole tiles beside partial ones, and views that only the element-wise path
// takes (rows not a multiple of 16, columns not of 8); every input dtype; NaN and Inf present.
void check_transposed(const std::string& text, const std::vector<int64_t>& shape, InputDtype dt, bool specials,
                      uint64_t offset = 0) {
  const QuantSpec spec = QuantSpec::parse(text);
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::vector<float> x = test_data(n, 31 + n, specials);
  if (specials && n > 5000) {  // specials inside later tiles too, in every tile path
    x[n / 2 + 3] = std::numeric_limits<float>::infinity();
    x[n - 9] = -std::numeric_limits<float>::quiet_NaN();
  }
  const std::vector<uint16_t> x16 = dt == InputDtype::F32 ? std::vector<uint16_t>{} : to_16bit(x, dt);
  const void* data = dt == InputDtype::F32 ? static_cast<const void*>(x.data()) : x16.data();
  std::optional<DelayedScaler> sc, sg;
  QuantizeOptions oc, og;
  oc.index_offset = og.index_offset = offset;
  if (spec.delayed.enabled()) {
    oc.delayed = &sc.emplace(spec);
    og.delayed = &sg.emplace(spec);
  }
  std::string ctx = text + " shape";
  for (auto d : shape) ctx += " " + std::to_string(d);
  ctx += dt == InputDtype::F32 ? " f32" : (dt == InputDtype::BF16 ? " bf16" : " fp16");
  // Two steps for delayed scaling: the second runs with a scale from the first's amax.
  for (int step = 0; step < (spec.delayed.enabled() ? 2 : 1); ++step) {
    const QuantizedTensor c = quantize_any(data, dt, shape, spec, oc);
    std::vector<uint8_t> ct;
    const QuantizedTensor g = gpu::quantize_transposed_on_gpu(data, dt, shape, spec, ct, og);
    expect_same(c, g, ctx + " step " + std::to_string(step));
    const std::vector<uint8_t> want = transpose_codes(c.codes, shape.empty() ? 1 : shape.back());
    EXPECT_EQ(first_mismatch(want, ct, "transposed codes"), "") << ctx << " step " << step;
  }
}

TEST(QuantizeGpu, CastTransposeWritesBothLayoutsOfTheSameCodes) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int64_t>> shapes = {
      {256, 128},    // 2 x 2 whole tiles
      {384, 192},    // 3 x 3
      {272, 200},    // whole tiles beside partial ones (rows % 16 == 0, cols % 8 == 0)
      {4, 64, 136},  // a 3-D tensor: the 256 x 136 view
      {200, 100},    // rows % 16 != 0: element-wise
      {128, 70},     // cols % 8 != 0: element-wise
      {1000},        // one row
      {1, 1}};
  for (const char* s :
       {"e4m3:tensor", "e5m2:tensor", "e4m3:tensor:scale=pow2", "e4m3:tensor:apply=mul", "e4m3:tensor:delayed=4,max",
        "e5m2:tensor:delayed=2,recent,margin=1", "e4m3:tensor:delayed=2,max:sat=none"}) {
    for (const auto& sh : shapes) check_transposed(s, sh, InputDtype::F32, true);
    check_transposed(s, {384, 192}, InputDtype::BF16, true);
    check_transposed(s, {272, 200}, InputDtype::FP16, true);
  }
  for (const char* s : {"e4m3:tensor:round=stochastic:seed=3", "e5m2:tensor:delayed=2,max:round=stochastic:seed=8"}) {
    check_transposed(s, {384, 192}, InputDtype::BF16, true, 0);
    check_transposed(s, {272, 200}, InputDtype::F32, true, 5);
  }
  // More tiles than one pass of the resident grid (at most 8 blocks of 256 threads per SM, 1056 on
  // 132 SMs), so
  // that blocks walk several tiles through both shared buffers: 2048 x 8192 bf16 (2048 whole
  // tiles), and 2064 x 8200 fp32, whose last tile row and column are partial (17 x 129 tiles, full
  // and partial ones in the same block).
  check_transposed("e4m3:tensor:delayed=4,max", {2048, 8192}, InputDtype::BF16, true);
  check_transposed("e4m3:tensor", {2048, 8192}, InputDtype::BF16, false);
  check_transposed("e5m2:tensor", {2064, 8200}, InputDtype::F32, true);
}

TEST(QuantizeGpu, CastTransposeWithProducerMaximaFusedIntoTheEncode) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 2^17 producer maxima: Group Scaling's stage 2 runs inside the (cooperative) cast-transpose launch.
  const std::vector<int64_t> shape = {512, 4096};
  const size_t n = 512 * 4096, chunk = 16, m = n / chunk;
  const std::vector<float> x = test::lognormal_data(n, 19, 6.0);
  const QuantSpec spec = QuantSpec::parse("e4m3:tensor");
  const QuantizedTensor c = quantize(x.data(), shape, spec);
  gpu::DeviceBuffer<float> dx = gpu::to_device(x);
  gpu::DeviceBuffer<float> maxima(m);
  gpu::chunk_maxima_cuda(dx.get(), InputDtype::F32, n, chunk, maxima.get(), nullptr);
  gpu::DeviceBuffer<uint8_t> codes(n), codes_t(n);
  codes.fill_bytes(0xA5);  // poison: every code must be written
  codes_t.fill_bytes(0xA5);
  gpu::DeviceBuffer<float> scale(1);
  gpu::DeviceBuffer<unsigned char> ws(gpu::quantize_workspace_bytes(spec, shape));
  gpu::QuantGpuOut out;
  out.codes = codes.get();
  out.codes_t = codes_t.get();
  out.scales = scale.get();
  gpu::QuantGpuOptions go;
  go.producer_maxima = maxima.get();
  go.producer_maxima_count = m;
  gpu::quantize_cuda(dx.get(), InputDtype::F32, shape, spec, out, ws.get(), go, nullptr);
  const std::vector<uint8_t> hc = codes.download(), ht = codes_t.download();
  EXPECT_EQ(first_mismatch(c.codes, hc, "codes"), "");
  EXPECT_EQ(first_mismatch(c.scales, scale.download(), "scale"), "");
  EXPECT_EQ(first_mismatch(transpose_codes(c.codes, 4096), ht, "transposed codes"), "");
}

TEST(QuantizeGpu, CastTransposeRefusesSpecsWithoutOnePerTensorScale) {
  // Refused before any device work, so this runs without a GPU too: the transposed layout of
  // grouped scales, DE or 16-bit storage is not what cast-transpose writes.
  const std::vector<int64_t> shape = {128, 64};
  unsigned char dummy[16] = {};
  for (const char* s : {"e4m3:g128", "e4m3:row", "e4m3:b128x128", "e4m3:tensor:de=coat", "bf16", "nvfp4", "mxfp4"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    gpu::QuantGpuOut out;
    out.codes = out.codes_t = dummy;
    out.scales = out.expand_k = out.expand_c = out.tensor_scale = reinterpret_cast<float*>(dummy);
    try {
      gpu::quantize_cuda(dummy, InputDtype::BF16, shape, spec, out, dummy, gpu::QuantGpuOptions{}, nullptr);
      ADD_FAILURE() << s << ": no error";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("cast-transpose"), std::string::npos) << s << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace fp8sim
