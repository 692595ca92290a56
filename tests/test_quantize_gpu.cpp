// GPU quantize / dequantize (gpu/quant) against the CPU reference (sim/quant): codes, scales, k,
// c and dequantized values bit for bit, for every granularity and scale mode, DE coat / robust,
// delayed scaling, stochastic rounding, fp32 / bf16 / fp16 inputs, on awkward shapes (1, 5, 217
// rows; lengths not a multiple of 16 or 128; short last groups) and on Llama-2-7B shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/quant/quantize.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/quantize.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

// First mismatch of two same-typed vectors, as text; empty when equal.
template <class T>
std::string first_mismatch(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  if (a.size() != b.size()) return std::string(what) + ": sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    // NaN payloads are not part of the contract: x86 arithmetic propagates the input NaN
    // (0x7FC00000), NVIDIA's returns the canonical 0x7FFFFFFF; both are NaN.
    if constexpr (std::is_same_v<T, float>) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
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

void expect_same(const QuantizedTensor& c, const QuantizedTensor& g, const std::string& ctx) {
  EXPECT_EQ(first_mismatch(c.codes, g.codes, "codes"), "") << ctx;
  EXPECT_EQ(first_mismatch(c.scales, g.scales, "scales"), "") << ctx;
  EXPECT_EQ(first_mismatch(c.expand_k, g.expand_k, "k"), "") << ctx;
  EXPECT_EQ(first_mismatch(c.expand_c, g.expand_c, "c"), "") << ctx;
  EXPECT_EQ(f32_bits(c.tensor_amax), f32_bits(g.tensor_amax)) << ctx << ": tensor amax";
  // Dequantize: the GPU kernel on the CPU's codes must give the CPU's values, bit for bit.
  const std::vector<float> dc = dequantize(c), dg = gpu::dequantize_on_gpu(c);
  EXPECT_EQ(first_mismatch(dc, dg, "dequantized"), "") << ctx;
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
    x[6] = 1e-40f;  // subnormal
  }
  return x;
}

void check_spec(const std::string& text, const std::vector<int64_t>& shape, InputDtype dt, bool specials,
                uint64_t offset = 0) {
  const QuantSpec spec = QuantSpec::parse(text);
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const std::vector<float> x = test_data(n, 17 + n, specials);
  std::vector<uint16_t> x16(n);
  const void* data = x.data();
  if (dt == InputDtype::BF16) {
    for (size_t i = 0; i < n; ++i) x16[i] = f32_to_bf16_rne(x[i]);
    data = x16.data();
  } else if (dt == InputDtype::FP16) {
    for (size_t i = 0; i < n; ++i) x16[i] = f32_to_fp16_rne(x[i]);
    data = x16.data();
  }
  QuantizeOptions o;
  o.index_offset = offset;
  const QuantizedTensor c = quantize_any(data, dt, shape, spec, o);
  const QuantizedTensor g = gpu::quantize_on_gpu(data, dt, shape, spec, o);
  std::string ctx = text + " shape";
  for (auto d : shape) ctx += " " + std::to_string(d);
  ctx += dt == InputDtype::F32 ? " f32" : (dt == InputDtype::BF16 ? " bf16" : " fp16");
  expect_same(c, g, ctx);
}

const std::vector<std::vector<int64_t>> kAwkward = {{1, 1}, {1, 5}, {5, 217}, {217, 100}, {3, 16 * 40 + 3}, {2, 3, 130}, {1000}};

TEST(QuantizeGpu, PlainGranularitiesAndScaleModesAwkwardShapes) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const char* specs[] = {"e4m3:tensor",          "e4m3:tensor:eps=1e-10",   "e5m2:tensor:scale=pow2",
                         "e4m3:row",             "e4m3:col",                "e4m3:g16:scale=bf16:eps=1e-10",
                         "e4m3:g32:scale=e8m0",  "e5m2:g32:scale=e8m0",     "e4m3:g128",
                         "e4m3:g100",            "e4m3:g7",                 "e4m3:g512",
                         "e4m3:g600",            "e4m3:b128x128",           "e5m2:b16x48:scale=pow2",
                         "e4m3:row:sat=none",    "e5m2:tensor:sat=none",    "e4m3:g128:eps=1e-20:eps_add=fp64"};
  for (const char* s : specs)
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
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
  for (const char* s : {"e4m3:g128:de=coat", "e4m3:g128:de=robust", "e5m2:g128:de=coat", "e4m3:g128:de=coat:de_target=e5m2",
                        "e4m3:g64:de=robust", "e4m3:g100:de=coat", "e4m3:row:de=coat", "e4m3:g1000:de=robust",
                        "e4m3:b16x48:de=robust", "e4m3:tensor:de=coat", "e4m3:tensor:de=robust", "e4m3:col:de=robust"}) {
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
  }
}

TEST(QuantizeGpu, DegenerateGroups) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // All-zero, constant, single-element and sign-mixed groups, for every mode.
  std::vector<float> x(4 * 128 + 1, 0.0f);
  for (int i = 128; i < 256; ++i) x[static_cast<size_t>(i)] = 0.375f;                         // constant
  for (int i = 256; i < 384; ++i) x[static_cast<size_t>(i)] = (i % 2 ? -1.0f : 1.0f) * 1e-6f;  // sign-mixed
  x[400] = 3.0f;                                                                               // one nonzero
  x[4 * 128] = -2.0f;                                                                          // single-element group
  const std::vector<int64_t> shape = {static_cast<int64_t>(x.size())};
  for (const char* s : {"e4m3:g128", "e4m3:g128:de=coat", "e4m3:g128:de=robust", "e4m3:g128:scale=e8m0", "e4m3:tensor"}) {
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
    gpu::DeviceBuffer<uint8_t> codes(n);
    gpu::DeviceBuffer<float> scale(1);
    gpu::DeviceBuffer<unsigned char> ws(gpu::quantize_workspace_bytes(spec, shape));
    gpu::QuantGpuOut out;
    out.codes = codes.get();
    out.scales = scale.get();
    gpu::QuantGpuOptions go;
    go.producer_maxima = maxima.get();
    go.producer_maxima_count = maxima.size();
    gpu::quantize_cuda(dx.get(), InputDtype::F32, shape, spec, out, ws.get(), go, nullptr);
    EXPECT_EQ(first_mismatch(c.codes, codes.download(), "codes"), "") << "chunk " << chunk;
    EXPECT_EQ(first_mismatch(c.scales, scale.download(), "scale"), "") << "chunk " << chunk;
  }
  // And the one-pass amax kernel.
  gpu::DeviceBuffer<float> amax(1);
  gpu::DeviceBuffer<unsigned char> ws(gpu::amax_workspace_bytes(n));
  gpu::tensor_amax_cuda(dx.get(), InputDtype::F32, n, amax.get(), ws.get(), nullptr);
  EXPECT_EQ(f32_bits(amax.download()[0]), f32_bits(c.tensor_amax));
}

TEST(QuantizeGpu, PassThroughFormats) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"bf16:tensor", "fp16:tensor"})
    for (const auto& shape : kAwkward) check_spec(s, shape, InputDtype::F32, true);
}

TEST(QuantizeGpu, Llama2ShapesVectorizedPaths) {
  FP8SIM_SKIP_WITHOUT_GPU();
  // 4096 x 11008 (the MLP weight): every group full and 16-element aligned, so the vectorized
  // loads and stores run; bf16 input as the activations are stored.
  for (const char* s : {"e4m3:g128", "e4m3:tensor", "e4m3:b128x128", "e4m3:g16:scale=bf16", "e4m3:g32:scale=e8m0",
                        "e4m3:row"})
    check_spec(s, {4096, 11008}, InputDtype::BF16, false);
  check_spec("e4m3:g128:de=coat", {4096 * 11008}, InputDtype::F32, false);
}

}  // namespace
}  // namespace fp8sim
