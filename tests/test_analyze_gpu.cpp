// analyze --device cuda against the CPU: one tensor's numbers (gpu/analyze/tensor_metrics.hpp)
// equal run_quantize's bit for bit for every kind of spec, input dtype and awkward value, and
// `fp8sim analyze` writes the same JSON with --device cuda as without it, for every recipe of the
// registry on the sample trace and on a synthetic one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/analyze/tensor_metrics.hpp"
#include "gpu/common/buffer.hpp"
#include "sim/common/buffer.hpp"
#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/quantize_report.hpp"
#include "sim/recipe/recipe.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

// Log-normal values with outliers, zeros, NaN and Inf: every statistic and saturation path is hit.
std::vector<float> awkward(size_t n, uint64_t seed) {
  std::vector<float> x = test::lognormal_data(n, seed, 8.0);
  for (size_t i = 0; i < n; i += 211) x[i] *= 3e4f;
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[n / 2] = -std::numeric_limits<float>::infinity();
  return x;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16_rne(x[i]);
  return b;
}

// The bytes of an ErrorStats (plain data: equal bytes are equal sums, counts and maxima).
std::string stats_bytes(const ErrorStats& s) { return std::string(reinterpret_cast<const char*>(&s), sizeof s); }

TEST(AnalyzeGpu, TensorMetricsEqualTheCpu) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<std::string> specs = {
      "e4m3:tensor",
      "e5m2:tensor:eps=1e-10",
      "e4m3:tensor:scale=pow2",
      "e4m3:tensor:eps=1e-10:scale_div=rcp:apply=fdiv",
      "e4m3:tensor:delayed=1024,max",
      "e4m3:row",
      "e4m3:col",
      "e4m3:g128:amax_floor=0.0001:scale_div=rcp:apply=rcp",
      "e4m3:b128x128:amax_floor=0.0001:scale_div=rcp:apply=rcp",
      "e4m3:g32:scale=e8m0:mx=floor",
      "e4m3:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv",
      "e4m3:g128:de=coat:de_min=kernel",
      "e4m3:g128:de=robust",
      "e4m3:g128:round=stochastic",
      "e2m1:g16:scale=e4m3",
      "e2m1:g32:scale=e8m0:mx=floor",
      "e2m3:g32:scale=e8m0",
      "bf16",
      "fp16:tensor:scale=pow2",
  };
  const std::vector<int64_t> shape = {96, 512};
  const std::vector<float> x = awkward(96 * 512, 11);
  const std::vector<uint16_t> xb = to_bf16(x);
  gpu::MetricsScratch scratch;
  gpu::Stream stream;
  int64_t saturated = 0;
  std::set<std::string> refused;
  for (const std::string& text : specs) {
    const QuantSpec spec = QuantSpec::parse(text);
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(text + (bf16 ? " bf16" : " f32"));
      const void* data = bf16 ? static_cast<const void*>(xb.data()) : static_cast<const void*>(x.data());
      const InputDtype dt = bf16 ? InputDtype::BF16 : InputDtype::F32;
      QuantizeOptions o;
      std::optional<DelayedScaler> scaler;
      std::vector<float> wide = x;
      if (bf16)
        for (size_t i = 0; i < wide.size(); ++i) wide[i] = bf16_to_f32(xb[i]);
      if (spec.delayed.enabled()) {  // seeded with the tensor's own amax, as analyze does
        float amax = 0;
        for (float v : wide)
          if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
        scaler.emplace(spec);
        scaler->update(amax);
        o.delayed = &*scaler;
      }
      const QuantizeResult cpu = run_quantize(data, dt, shape, spec, o);
      TensorMetrics gpu;
      try {
        gpu = gpu::tensor_metrics_on_gpu(data, dt, shape, &spec, scratch, stream.get());
      } catch (const UsageError&) {  // the CPU takes it (analyze falls back)
        refused.insert(text);
        continue;
      }
      ASSERT_TRUE(gpu.q.has_value());
      EXPECT_EQ(stats_bytes(gpu.stats), stats_bytes(cpu.stats))
          << "cpu " << cpu.stats.to_json().dump() << "\ngpu " << gpu.stats.to_json().dump();
      EXPECT_EQ(gpu.nan, 1u);
      EXPECT_EQ(gpu.inf, 1u);
      EXPECT_EQ(gpu.q->scales, cpu.q.scales);
      EXPECT_EQ(gpu.q->expand_k, cpu.q.expand_k);
      EXPECT_EQ(gpu.q->expand_c, cpu.q.expand_c);
      EXPECT_EQ(f32_bits(gpu.q->tensor_amax), f32_bits(cpu.q.tensor_amax));
      EXPECT_EQ(f32_bits(gpu.q->tensor_scale), f32_bits(cpu.q.tensor_scale));
      EXPECT_EQ(gpu.q->total_bytes(), cpu.q.total_bytes());
      saturated += gpu.stats.saturated;
    }
  }
  EXPECT_GT(saturated, 0) << "no spec saturated: the count is not exercised";
  // Every spec here runs on the GPU (rht and empty tensors are the CPU's: KeptTensorAndRefusals).
  EXPECT_EQ(refused, std::set<std::string>{});
}

TEST(AnalyzeGpu, KeptTensorAndRefusals) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> shape = {64, 1000};
  const std::vector<float> x = awkward(64 * 1000, 5);
  gpu::MetricsScratch scratch;
  gpu::Stream stream;
  const TensorMetrics m = gpu::tensor_metrics_on_gpu(x.data(), InputDtype::F32, shape, nullptr, scratch, stream.get());
  EXPECT_FALSE(m.q.has_value());
  EXPECT_EQ(stats_bytes(m.stats), stats_bytes(compute_error_stats(x.data(), x.data(), x.size())));
  EXPECT_EQ(m.nan + m.inf, 2u);
  const QuantSpec rht = QuantSpec::parse("e2m1:g16:scale=e4m3:rht=16");
  EXPECT_THROW(gpu::tensor_metrics_on_gpu(x.data(), InputDtype::F32, shape, &rht, scratch, stream.get()), UsageError);
}

// A tensor in a pooled Buffer is uploaded from its block page-locked on first use, once, and
// unlocked when the pool gives the block back; its numbers equal those of a pageable copy.
TEST(AnalyzeGpu, PooledHostBlocksArePageLockedOnceAndUnlockedOnReturn) {
  FP8SIM_SKIP_WITHOUT_GPU();
  if (!buffer_pool::kOn) GTEST_SKIP() << "the pool is off under AddressSanitizer";
  const char* pin = std::getenv("FP8SIM_PIN");
  if (pin && std::string(pin) == "0") GTEST_SKIP() << "FP8SIM_PIN=0";
  buffer_pool::release();
  const size_t base = gpu::pinned_blocks();
  const std::vector<int64_t> shape = {512, 2048};  // 4 MiB of fp32: a pooled block
  const std::vector<float> values = awkward(512 * 2048, 9);
  const QuantSpec spec = QuantSpec::parse("e4m3:g128");
  gpu::MetricsScratch scratch;
  gpu::Stream stream;
  {
    Buffer<float> x(values.begin(), values.end());
    ASSERT_TRUE(buffer_pool::block_of(x.data(), nullptr));
    const TensorMetrics a = gpu::tensor_metrics_on_gpu(x.data(), InputDtype::F32, shape, &spec, scratch, stream.get());
    if (gpu::pinning_refused()) GTEST_SKIP() << "this system refuses cudaHostRegister (the uploads stay pageable)";
    EXPECT_EQ(gpu::pinned_blocks(), base + 1);
    unsigned flags = 0;
    EXPECT_EQ(cudaHostGetFlags(&flags, x.data()), cudaSuccess) << "the driver sees the block as page-locked";
    const TensorMetrics b = gpu::tensor_metrics_on_gpu(x.data(), InputDtype::F32, shape, &spec, scratch, stream.get());
    EXPECT_EQ(gpu::pinned_blocks(), base + 1) << "locked once";
    const TensorMetrics c =
        gpu::tensor_metrics_on_gpu(values.data(), InputDtype::F32, shape, &spec, scratch, stream.get());
    EXPECT_EQ(gpu::pinned_blocks(), base + 1) << "a plain vector is not locked";
    EXPECT_EQ(stats_bytes(a.stats), stats_bytes(c.stats));
    EXPECT_EQ(stats_bytes(b.stats), stats_bytes(c.stats));
  }
  EXPECT_EQ(gpu::pinned_blocks(), base + 1) << "a pooled block stays locked";
  buffer_pool::release();
  EXPECT_EQ(gpu::pinned_blocks(), base) << "unlocked before it went back to the system";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(AnalyzeGpu, SameJsonAsTheCpuForEveryRecipe) {
  FP8SIM_SKIP_WITHOUT_GPU();
  const std::string dir = test::temp_dir(), synth = dir + "/synth.h5";
  const test::CommandResult s = test::run_fp8sim({"synth", "--model", "tiny-llama", "--layers", "2", "--out", synth});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  for (const std::string& trace : {test::sample_trace(), synth}) {
    for (const std::string& recipe : recipe::names()) {
      SCOPED_TRACE(trace + " " + recipe);
      const std::string cpu = dir + "/cpu.json", gpu = dir + "/gpu.json";
      const test::CommandResult a =
          test::run_fp8sim({"analyze", trace, "--recipe", recipe, "--no-gemm", "--histograms", "--json", cpu});
      ASSERT_EQ(a.exit_code, 0) << a.err;
      const test::CommandResult b = test::run_fp8sim(
          {"analyze", trace, "--recipe", recipe, "--no-gemm", "--histograms", "--device", "cuda", "--json", gpu});
      ASSERT_EQ(b.exit_code, 0) << b.err;
      EXPECT_TRUE(slurp(cpu) == slurp(gpu)) << "the JSON differs";
    }
  }
}

}  // namespace
}  // namespace fp8sim
