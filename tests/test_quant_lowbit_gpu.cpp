// The GPU's 4- and 6-bit quantizers and its random Hadamard transform (gpu/quant/quantize_lowbit.cu)
// against the CPU reference: codes, scales, NVFP4's tensor scale, the tensor amax and the
// dequantized values bit for bit, for MXFP4/MXFP6 (every E8M0 rounding), NVFP4 (1x16 and 16x16,
// nearest and stochastic rounding), COAT's expansion on 4- and 6-bit codes, per-tensor scaling,
// and rht = 4..256 on 4-bit and FP8 codes; fp32, bf16 and fp16 inputs; shapes with partial
// groups in either direction; the fast kernels (1xG groups, 16x16 blocks) and which specs take
// them; the shapes the kernels refuse; the table encoder over all 2^32
// inputs; the 4- and 6-bit casts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "gpu/formats/cast.hpp"
#include "gpu/quant/quantize.hpp"
#include "gpu/quant/quantize_launch.hpp"
#include "sim/common/check.hpp"
#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/packing.hpp"
#include "sim/quant/quantize.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

std::string first_float_mismatch(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  if (a.size() != b.size())
    return std::string(what) + ": sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;  // NaN payloads differ between x86 and NVIDIA
    if (f32_bits(a[i]) != f32_bits(b[i])) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: index %zu cpu %a gpu %a", what, i, static_cast<double>(a[i]),
                    static_cast<double>(b[i]));
      return buf;
    }
  }
  return {};
}

std::string first_code_mismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return "codes: sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return "codes: index " + std::to_string(i) + " cpu " + std::to_string(a[i]) + " gpu " + std::to_string(b[i]);
  return {};
}

enum class Data { Normal, Specials, Tiny, Zeros };

std::vector<float> make_data(size_t n, uint64_t seed, Data kind) {
  std::vector<float> x = test::lognormal_data(n, seed, 8.0);
  if (kind == Data::Specials && n >= 8) {
    x[1] = 0.0f;
    x[2] = -0.0f;
    x[3] = std::numeric_limits<float>::infinity();
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[6] = 1e-40f;
  } else if (kind == Data::Tiny) {  // E4M3 group scales underflow: NVFP4's multiplier saturates
    for (auto& v : x) v *= 1e-30f;
    if (n >= 2) x[0] = 1.0f;
  } else if (kind == Data::Zeros) {
    std::fill(x.begin(), x.end(), 0.0f);
  }
  return x;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (auto d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// Quantizes on both sides and compares everything; returns false when the CPU refuses the shape
// (and then requires the GPU to refuse it too).
bool check(const std::string& text, const std::vector<int64_t>& shape, InputDtype dt, Data kind, uint64_t offset = 0) {
  const QuantSpec spec = QuantSpec::parse(text);
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const std::vector<float> x = make_data(n, 29 + n, kind);
  std::vector<uint16_t> x16(n);
  const void* data = x.data();
  if (dt == InputDtype::BF16) {
    for (size_t i = 0; i < n; ++i) x16[i] = f32_to_bf16_rne(x[i]);
    data = x16.data();
  } else if (dt == InputDtype::FP16) {
    for (size_t i = 0; i < n; ++i) x16[i] = f32_to_fp16_rne(x[i]);
    data = x16.data();
  }
  const std::string ctx =
      text + " " + shape_text(shape) + (dt == InputDtype::F32 ? " f32" : (dt == InputDtype::BF16 ? " bf16" : " fp16"));
  QuantizeOptions o;
  o.index_offset = offset;
  QuantizedTensor c;
  try {
    c = quantize_any(data, dt, shape, spec, o);
  } catch (const UsageError&) {
    EXPECT_THROW(gpu::quantize_on_gpu(data, dt, shape, spec, o), UsageError) << ctx;
    return false;
  }
  const QuantizedTensor g = gpu::quantize_on_gpu(data, dt, shape, spec, o);
  EXPECT_EQ(first_code_mismatch(c.codes, g.codes), "") << ctx;
  EXPECT_EQ(first_float_mismatch(c.scales, g.scales, "scales"), "") << ctx;
  EXPECT_EQ(first_float_mismatch(c.expand_k, g.expand_k, "k"), "") << ctx;
  EXPECT_EQ(first_float_mismatch(c.expand_c, g.expand_c, "c"), "") << ctx;
  EXPECT_EQ(f32_bits(c.tensor_scale), f32_bits(g.tensor_scale)) << ctx << ": tensor scale";
  EXPECT_EQ(f32_bits(c.tensor_amax), f32_bits(g.tensor_amax)) << ctx << ": tensor amax";
  const std::vector<float> dc = dequantize(c);
  EXPECT_EQ(first_float_mismatch(dc, gpu::dequantize_on_gpu(c), "dequantize kernel on the CPU's codes"), "") << ctx;
  EXPECT_EQ(first_float_mismatch(dc, gpu::dequantize_on_gpu(g), "dequantized GPU codes"), "") << ctx;
  return true;
}

const std::vector<std::vector<int64_t>> kShapes = {{1, 16},     {3, 48},    {5, 176}, {176, 64},  {17, 256},  {64},
                                                   {2, 3, 512}, {33, 1024}, {40, 96}, {19, 4096}, {256, 2048}};

TEST(QuantizeLowbitGpu, MxFormatsEveryE8m0RoundingAndScaleMode) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const char* specs[] = {"mxfp4",
                         "mxfp6-e2m3",
                         "mxfp6-e3m2",
                         "e2m1:g32:scale=e8m0:mx=rceil",
                         "e2m1:g32:scale=e8m0:mx=ceil",
                         "e2m3:g32:scale=e8m0:mx=even",
                         "e2m1:g16:scale=fp32",
                         "e3m2:g64:scale=pow2",
                         "e2m1:g512",
                         "e2m1:b32x16:scale=e8m0",
                         "e2m3:row",
                         "e2m1:tensor",
                         "e3m2:tensor:eps=1e-10"};
  int checked = 0;
  for (const char* s : specs)
    for (const auto& shape : kShapes) {
      // a row of more than 32 segments is beyond a team (ShapesOutsideTheKernelsAreUsageErrors)
      if (std::string(s) == "e2m3:row" && shape.back() > 512) continue;
      checked += check(s, shape, InputDtype::F32, Data::Specials);
    }
  EXPECT_GT(checked, 100);
}

TEST(QuantizeLowbitGpu, Nvfp4TwoLevelScalesEveryDtypeAndDataKind) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"nvfp4", "nvfp4-w", "e2m3:g16:scale=e4m3", "e3m2:b16x16:scale=e4m3"})
    for (const auto& shape : kShapes)
      for (InputDtype dt : {InputDtype::F32, InputDtype::BF16, InputDtype::FP16})
        for (Data d : {Data::Normal, Data::Specials, Data::Tiny, Data::Zeros}) check(s, shape, dt, d);
}

// The fast kernels (NVFP4 1x16, also under rht=16, and 16x16; power-of-two scales on 1x16 / 1x32
// groups and 16x16 blocks; nearest rounding, fp32 and bf16): which specs take them, then their
// bits on shapes with one group, partial 16x16 blocks, several groups per thread and more groups
// than one resident grid covers (the outer loop).
TEST(QuantizeLowbitGpu, FastPathTakesTheCommonActivationQuantizers) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> act = {256, 2048};
  for (const char* s : {"nvfp4", "nvfp4:rht=16", "nvfp4-w", "mxfp4", "mxfp6-e2m3", "mxfp6-e3m2", "e2m1:g16:scale=e8m0",
                        "e3m2:g32:scale=pow2", "e2m1:b16x16:scale=e8m0"})
    for (InputDtype dt : {InputDtype::F32, InputDtype::BF16})
      EXPECT_TRUE(gpu::lowbit_fast_path(QuantSpec::parse(s), act, dt)) << s;
  EXPECT_FALSE(gpu::lowbit_fast_path(QuantSpec::parse("nvfp4"), act, InputDtype::FP16));
  for (const char* s :
       {"nvfp4-w:rht=16", "nvfp4:rht=64", "mxfp4:rht=16", "nvfp4:round=stochastic", "e2m1:g32:scale=fp32", "e2m1:g64",
        "e2m1:tensor", "e2m1:g32:de=coat", "e4m3:g16:rht=16", "e4m3:g128:rht=16"})
    EXPECT_FALSE(gpu::lowbit_fast_path(QuantSpec::parse(s), act, InputDtype::BF16)) << s;
  EXPECT_FALSE(gpu::lowbit_fast_path(QuantSpec::parse("mxfp4"), std::vector<int64_t>{5, 176}, InputDtype::BF16))
      << "rows of partial 1x32 groups";
}

TEST(QuantizeLowbitGpu, FastPathEqualsTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int64_t>> shapes = {{1, 32}, {3, 64}, {176, 64}, {40, 96}, {256, 2048}};
  for (const char* s : {"nvfp4", "nvfp4:rht=16", "nvfp4:rht=16:rht_seed=7", "nvfp4-w", "mxfp4", "mxfp6-e2m3",
                        "mxfp6-e3m2", "e2m1:g16:scale=e8m0", "e3m2:g32:scale=pow2", "e2m1:g32:scale=e8m0:mx=floor",
                        "e2m1:b16x16:scale=e8m0", "e3m2:b16x16:scale=e4m3"})
    for (const auto& shape : shapes)
      for (InputDtype dt : {InputDtype::F32, InputDtype::BF16}) {
        ASSERT_TRUE(gpu::lowbit_fast_path(QuantSpec::parse(s), shape, dt)) << s << " " << shape_text(shape);
        for (Data d : {Data::Normal, Data::Specials, Data::Tiny, Data::Zeros})
          EXPECT_TRUE(check(s, shape, dt, d)) << s << " " << shape_text(shape);
      }
  // more groups than a resident grid of 256-thread blocks covers in one pass of its loop
  const std::vector<int64_t> big = {1024, 8192};
  for (const char* s : {"nvfp4", "nvfp4:rht=16", "nvfp4-w", "mxfp4"}) {
    ASSERT_TRUE(gpu::lowbit_fast_path(QuantSpec::parse(s), big, InputDtype::BF16)) << s;
    for (Data d : {Data::Normal, Data::Specials}) EXPECT_TRUE(check(s, big, InputDtype::BF16, d)) << s;
  }
}

// The 16x16 tile kernel (16 x 16 blocks per thread block) gives the CPU's bits on partial tiles
// (rows and block columns that do not fill one) and on more tiles than the resident grid covers in
// one pass of its loop.
TEST(QuantizeLowbitGpu, SixteenBySixteenTilesEqualTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int64_t>> shapes = {{1, 32}, {40, 96}, {176, 272}, {33, 4096}, {1024, 8192}};
  for (const char* s : {"nvfp4-w", "e2m1:b16x16:scale=e8m0", "e3m2:b16x16:scale=e4m3"})
    for (const auto& shape : shapes)
      for (InputDtype dt : {InputDtype::F32, InputDtype::BF16}) {
        ASSERT_TRUE(gpu::lowbit_fast_path(QuantSpec::parse(s), shape, dt)) << s << " " << shape_text(shape);
        for (Data d : {Data::Normal, Data::Specials, Data::Tiny})
          EXPECT_TRUE(check(s, shape, dt, d)) << s << " " << shape_text(shape);
      }
}

TEST(QuantizeLowbitGpu, StochasticRoundingFollowsTheElementIndex) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"nvfp4:round=stochastic:seed=9", "mxfp4:round=stochastic:seed=3",
                        "e3m2:g32:scale=e8m0:round=stochastic:seed=1"})
    for (const auto& shape : kShapes)
      for (uint64_t offset : {uint64_t{0}, uint64_t{12345}}) check(s, shape, InputDtype::BF16, Data::Normal, offset);
}

TEST(QuantizeLowbitGpu, CoatExpansionOnFourAndSixBitCodes) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s :
       {"e2m1:g128:de=coat", "e2m3:g128:de=coat", "e3m2:g32:de=coat", "e2m1:g128:de=coat:de_target=e2m1"})
    for (const auto& shape : kShapes) check(s, shape, InputDtype::F32, Data::Specials);
}

// The transform runs in registers for blocks of 4 and 16 and across lanes for 64 and 256, on
// 4-bit and FP8 codes, with TE's signs and seeded ones; a block of 64 straddles two 1x32 groups.
TEST(QuantizeLowbitGpu, RandomHadamardTransformFusedWithTheQuantizer) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const char* specs[] = {"nvfp4:rht=16",       "nvfp4:rht=16:rht_seed=5", "nvfp4:rht=4",
                         "nvfp4:rht=64",       "nvfp4:rht=256",           "mxfp4:rht=64",
                         "nvfp4-w:rht=16",     "e4m3:g128:rht=16",        "e4m3:g128:rht=256",
                         "e5m2:tensor:rht=64", "e2m1:tensor:rht=16",      "nvfp4:rht=16:round=stochastic:seed=4"};
  int checked = 0;
  for (const char* s : specs)
    for (const auto& shape : kShapes)
      for (InputDtype dt : {InputDtype::F32, InputDtype::BF16}) checked += check(s, shape, dt, Data::Normal);
  EXPECT_GT(checked, 150);
  // NaN and Inf spread over their Hadamard block on both sides alike.
  check("nvfp4:rht=16", {5, 176}, InputDtype::F32, Data::Specials);
  check("nvfp4:rht=64", {33, 1024}, InputDtype::F32, Data::Specials);
}

TEST(QuantizeLowbitGpu, ShapesOutsideTheKernelsAreUsageErrors) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<float> x(4096, 1.0f);
  const std::vector<std::pair<const char*, std::vector<int64_t>>> refused = {
      {"e2m1:g7", {4, 28}},            // groups not a multiple of 16
      {"mxfp4", {4, 40}},              // rows not whole segments
      {"e2m1:b128x128", {128, 32}},    // a group of more than 32 segments
      {"e2m1:row", {2, 1024}},         // likewise
      {"nvfp4-w:rht=64", {16, 128}}};  // rht across lanes needs 1xC groups
  for (const auto& [s, shape] : refused) {
    const QuantSpec spec = QuantSpec::parse(s);
    EXPECT_NO_THROW(quantize(x.data(), shape, spec)) << s;
    EXPECT_THROW(gpu::quantize_on_gpu(x.data(), InputDtype::F32, shape, spec), UsageError) << s;
  }
}

// The kernels' table encoder gives encode_fp8_rne's code for every fp32 input, in every format
// and saturation mode.
TEST(QuantizeLowbitGpu, TableEncoderEqualsTheReferenceOnAllFloats) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (int fmt : {0, 1, 4, 5, 6})
    for (bool sat : {true, false}) EXPECT_EQ(gpu::detail::lowbit_lut_mismatches(fmt, sat), 0u) << fmt << " " << sat;
}

// The 4- and 6-bit casts (one code per byte) equal sim/formats/cast.hpp's, nearest and stochastic,
// fp32 and bf16 input, on data with every special value.
TEST(QuantizeLowbitGpu, CastsEqualTheCpuCast) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const size_t n = 100003;
  const std::vector<float> x = make_data(n, 11, Data::Specials);
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16_rne(x[i]);
  const gpu::DeviceBuffer<float> dx = gpu::to_device(x);
  const gpu::DeviceBuffer<uint16_t> db = gpu::to_device(b);
  gpu::DeviceBuffer<uint8_t> dy(n);
  for (Format f : {Format::E2M1, Format::E2M3, Format::E3M2})
    for (bool sr : {false, true})
      for (bool bf16 : {false, true}) {
        CastOptions o;
        o.format = f;
        o.rounding = sr ? Rounding::Stochastic : Rounding::Nearest;
        o.seed = 77;
        o.index_offset = 5;
        std::vector<uint8_t> ref(n);
        if (bf16) cast_bf16_to_fp8(b.data(), ref.data(), n, o);
        else cast_f32_to_fp8(x.data(), ref.data(), n, o);
        gpu::CastParams p;
        p.small_format = f == Format::E2M1 ? 4 : (f == Format::E2M3 ? 5 : 6);
        p.stochastic = sr;
        p.seed = 77;
        p.offset = 5;
        gpu::cast_to_small_cuda(bf16 ? static_cast<const void*>(db.get()) : dx.get(), bf16, dy.get(), n, p, nullptr);
        EXPECT_EQ(first_code_mismatch(ref, dy.download()), "")
            << format_name(f) << (sr ? " sr" : " rne") << (bf16 ? " bf16" : " f32");
      }
}

// The device buffer is the packed stream: the GPU's bytes equal pack_codes of the CPU's codes.
TEST(QuantizeLowbitGpu, DeviceCodesArePacked) {
  FP8SIM_SKIP_WITHOUT_GPU();
  for (const char* s : {"nvfp4", "mxfp6-e3m2"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    const std::vector<int64_t> shape = {6, 64};
    const std::vector<float> x = make_data(384, 7, Data::Normal);
    const QuantizedTensor c = quantize(x.data(), shape, spec);
    const QuantizedSize qs = quantized_size(spec, shape);
    gpu::DeviceBuffer<float> dx = gpu::to_device(x);
    gpu::DeviceBuffer<uint8_t> codes(static_cast<size_t>(qs.code_bytes));
    gpu::DeviceBuffer<float> scales(static_cast<size_t>(qs.num_groups)), ts(1);
    gpu::DeviceBuffer<unsigned char> ws(gpu::quantize_workspace_bytes(spec, shape));
    gpu::QuantGpuOut out;
    out.codes = codes.get();
    out.scales = scales.get();
    out.tensor_scale = ts.get();
    gpu::quantize_cuda(dx.get(), InputDtype::F32, shape, spec, out, ws.get(), {}, nullptr);
    EXPECT_EQ(codes.download(), pack_codes(c.codes.data(), c.numel(), spec.bits_per_code())) << s;
  }
}

}  // namespace
}  // namespace fp8sim
