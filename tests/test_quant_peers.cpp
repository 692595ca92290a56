// The presets named after a peer reproduce that peer's quantizer bit for bit on finite inputs.
// Each peer's documented rule is transcribed here group by group, in the peer's own order of
// operations (its scale formula, its way of applying the scale, its exponent rounding), written
// independently of sim/quant's code paths; every code and every stored scale must agree:
//   DeepSeek-V3 / DeepGEMM  per-token 1x128 and per-block 128x128 casts, with and without UE8M0
//   TransformerEngine       current scaling (and its power-of-two variant), MXFP8
//   torchao MX              FLOOR, CEIL, EVEN and RCEIL exponent rounding
//   COAT                    the Triton 1x16 activation quantizer (bf16 scales) and the per-tensor
//                           fp32 weight quantizer (both divide with div.full.f32), the FP8 AdamW
//                           kernel's group minimum
// Inputs: normal, log-normal with sigma 5, heavy tails, all-zero groups, single outliers, values
// whose quotient is an FP8 midpoint, subnormal ranges, bf16-rounded values, and shapes that are
// not multiples of the group.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sim/formats/divfull.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/expand.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim {
namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

constexpr float kFltMax = std::numeric_limits<float>::max();
const float kR448 = 1.0f / 448.0f;  // RN(1/448): what PyTorch's CUDA `t / 448.0` multiplies by

// FP8 E4M3 conversions the peers use. Saturating (CUDA's __NV_SATFINITE, Triton's fp8e4nv cast
// on sm_90): fp8sim's encoder, proven against cuda_fp8.h on every fp32 input. PyTorch's eager
// cast is not saturating: a magnitude that rounds above 448 becomes NaN.
uint8_t fp8_sat(float v) { return encode_fp8_rne<E4M3Traits>(v, true); }
uint8_t fp8_torch(float v) { return encode_fp8_rne<E4M3Traits>(v, false); }

// A peer's quantization of one group: its codes (in the group's element order) and its stored
// dequantizing scale as fp32.
struct PeerGroup {
  std::vector<uint8_t> codes;
  float scale;
};
using PeerRule = std::function<PeerGroup(const std::vector<float>&)>;

float group_amax(const std::vector<float>& x) {
  float a = 0.0f;
  for (float v : x) a = std::fabs(v) > a ? std::fabs(v) : a;
  return a;
}

// ---- DeepGEMM (deep_gemm/utils/math.py: per_token_cast_to_fp8, per_block_cast_to_fp8) ----------
// amax floored at 1e-4; sf = amax / 448 as PyTorch's CUDA division by a scalar (amax * RN(1/448));
// UE8M0: sf rounded up to a power of two on its bits, exponent field kept in [1, 254];
// codes = fp8(x * (1 / sf)) through PyTorch's (non-saturating) cast; sf is stored.
PeerGroup deepgemm(const std::vector<float>& x, bool ue8m0) {
  const float amax = std::max(group_amax(x), 1e-4f);
  float sf = amax * kR448;
  if (ue8m0) {
    const uint32_t b = bits(sf);
    int e = static_cast<int>(b >> 23) + ((b & 0x7FFFFFu) != 0 ? 1 : 0);
    e = std::min(std::max(e, 1), 254);
    sf = from_bits(static_cast<uint32_t>(e) << 23);
  }
  const float r = 1.0f / sf;
  PeerGroup g{{}, sf};
  for (float v : x) g.codes.push_back(fp8_torch(v * r));
  return g;
}

// ---- TransformerEngine ---------------------------------------------------------------------------
// Current scaling (recipe_common.cuh compute_scale_from_amax, then the cast kernel): scale =
// 448 / amax (1 when amax is 0; FLT_MAX when the quotient overflows; pow2: mantissa bits
// cleared); codes = satfinite(x * scale); stored scale_inv = 1 / scale.
PeerGroup te_current(const std::vector<float>& x, bool pow2) {
  const float amax = group_amax(x);
  float scale = 1.0f;
  if (amax != 0.0f) {
    scale = 448.0f / amax;
    if (std::isinf(scale)) scale = kFltMax;
    if (pow2) scale = from_bits(bits(scale) & 0xFF800000u);
  }
  PeerGroup g{{}, 1.0f / scale};
  for (float v : x) g.codes.push_back(fp8_sat(v * scale));
  return g;
}

// MXFP8 (quantize_mxfp8.cuh with ptx_arch_spec.cuh float_to_e8m0 on sm_90): e = the E8M0 code of
// amax * RN(1/448) rounded up (no increment past 254; a subnormal <= 2^-127 stays 0, a larger one
// becomes 1); elements times 2^(127 - e), built from bits; the stored scale is 2^(e - 127).
uint32_t te_float_to_e8m0(float v) {
  const uint32_t b = bits(v);
  uint32_t e = b >> 23;
  const uint32_t m = b & 0x7FFFFFu;
  if (m != 0u && e != 0xFEu && !(e == 0u && m <= 0x400000u)) ++e;
  return e;
}
float pow2_from_code(uint32_t e) {  // 2^(e - 127) for e in [0, 254]
  return e == 0u ? from_bits(0x00400000u) : from_bits(e << 23);
}
PeerGroup te_mxfp8(const std::vector<float>& x) {
  const uint32_t e = te_float_to_e8m0(group_amax(x) * kR448);
  const float inv = e == 254u ? from_bits(0x00400000u) : from_bits((254u - e) << 23);  // 2^(127 - e)
  PeerGroup g{{}, pow2_from_code(e)};
  for (float v : x) g.codes.push_back(fp8_sat(v * inv));
  return g;
}

// ---- torchao MX (mx_tensor.py to_mx) --------------------------------------------------------------
// FLOOR: exponent of amax (from its bits: -127 for zero and subnormals) minus 8 (E4M3's largest
// exponent), clamped below at -127; CEIL adds one when amax's mantissa bits are not all zero;
// EVEN first rounds amax half-up at E4M3's 3 mantissa bits (add 2^19 to the bits, clear the
// mantissa). Elements times the exact reciprocal 2^(127 - e), clamped to +-448, then cast.
enum class TorchaoMode { Floor, Ceil, Even };
PeerGroup torchao(const std::vector<float>& x, TorchaoMode mode) {
  uint32_t a = bits(group_amax(x));
  if (mode == TorchaoMode::Even) a = (a + (1u << 19)) & 0xFF800000u;
  int p = static_cast<int>(a >> 23) - 127;
  if (mode == TorchaoMode::Ceil && (a & 0x7FFFFFu) != 0u) p += 1;
  const int u = std::max(p - 8, -127);
  const uint32_t e = static_cast<uint32_t>(u + 127);
  const float inv = e == 254u ? from_bits(0x00400000u) : from_bits((254u - e) << 23);
  PeerGroup g{{}, pow2_from_code(e)};
  for (float v : x) {
    float q = v * inv;
    q = std::min(std::max(q, -448.0f), 448.0f);
    g.codes.push_back(fp8_torch(q));
  }
  return g;
}

// ---- COAT (coat/activation/real_quantization) ------------------------------------------------------
// 1x16 activations: mx = amax + 1e-10 (fp32); s = mx / 448 and q = fp8(x / s), both Triton
// divisions (div.full.f32); the stored scale is s rounded to bf16.
PeerGroup coat_act(const std::vector<float>& x) {
  const float mx = group_amax(x) + 1e-10f;
  const float s = div_full(mx, 448.0f);
  PeerGroup g{{}, bf16_to_f32(f32_to_bf16_rne(s))};
  for (float v : x) g.codes.push_back(fp8_sat(div_full(v, s)));
  return g;
}
// fp32 weights per tensor: s = (max |W| + 1e-10) / 448 in PyTorch (an fp32 add, then the CUDA
// division by a scalar: a product with RN(1/448)); q = fp8(W / s) in Triton (div.full.f32).
PeerGroup coat_weight(const std::vector<float>& x) {
  const float s = (group_amax(x) + 1e-10f) * kR448;
  PeerGroup g{{}, s};
  for (float v : x) g.codes.push_back(fp8_sat(div_full(v, s)));
  return g;
}

// ---- the comparison ------------------------------------------------------------------------------

// Element indices of every group of `spec` over a rows x cols tensor, row-major over the grid.
std::vector<std::vector<int64_t>> group_members(const GroupGeometry& g) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(g.num_groups()));
  for (int64_t i = 0; i < g.num_groups(); ++i) {
    int64_t r0, r1, c0, c1;
    g.group_bounds(i, r0, r1, c0, c1);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) out[static_cast<size_t>(i)].push_back(r * g.cols + c);
  }
  return out;
}

struct Input {
  std::string name;
  int64_t rows, cols;
  std::vector<float> x;
};

std::vector<Input> inputs() {
  std::vector<Input> in;
  std::mt19937_64 gen(2024);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::cauchy_distribution<double> cd(0.0, 1.0);
  auto make = [&](const std::string& name, int64_t rows, int64_t cols, auto&& f) {
    Input t{name, rows, cols, std::vector<float>(static_cast<size_t>(rows * cols))};
    for (size_t i = 0; i < t.x.size(); ++i) t.x[i] = f(i);
    in.push_back(std::move(t));
  };
  make("normal", 67, 300, [&](size_t) { return static_cast<float>(nd(gen)); });
  make("lognormal sigma 5", 131, 257,
       [&](size_t) { return static_cast<float>((nd(gen) < 0 ? -1 : 1) * std::exp(5.0 * nd(gen))); });
  make("heavy tails", 64, 384, [&](size_t) { return static_cast<float>(cd(gen)); });
  make("bf16 values", 40, 512, [&](size_t) { return bf16_to_f32(f32_to_bf16_rne(static_cast<float>(3 * nd(gen)))); });
  make("zeros and outliers", 130, 260, [&](size_t i) {
    const size_t r = i / 260;
    if (r % 3 == 0) return 0.0f;                                      // all-zero rows
    if (i % 97 == 5) return static_cast<float>(1e4 * (1 + nd(gen)));  // single outliers
    return static_cast<float>(1e-3 * nd(gen));
  });
  make("subnormal range", 33, 200,
       [&](size_t i) { return static_cast<float>(std::ldexp(nd(gen), -140 + static_cast<int>(i % 30))); });
  make("tiny amax", 16, 160, [&](size_t i) { return static_cast<float>(1e-38 * nd(gen) * (i % 5)); });
  // Quotients at FP8 midpoints: each 32-group's amax is 448 * 2^j, so x / s = x * 2^-j exactly.
  make("fp8 midpoints", 48, 256, [&](size_t i) {
    const int j = static_cast<int>((i / 32) % 7) - 3;
    if (i % 32 == 0) return std::ldexp(448.0f, j);
    const float mid = (decode_fp8<E4M3Traits>(static_cast<uint8_t>(gen() % 0x7E)) +
                       decode_fp8<E4M3Traits>(static_cast<uint8_t>(gen() % 0x7E + 1))) /
                      2;
    return std::ldexp((i % 2 ? -1.0f : 1.0f) * mid, j);
  });
  return in;
}

void expect_peer(const char* spec_text, const PeerRule& rule) {
  const QuantSpec spec = QuantSpec::parse(spec_text);
  int64_t groups = 0, elements = 0;
  for (const Input& t : inputs()) {
    const std::vector<int64_t> shape{t.rows, t.cols};
    const QuantizedTensor q = quantize(t.x.data(), shape, spec);
    const auto members = group_members(q.geometry);
    int64_t bad_codes = 0, bad_scales = 0;
    std::string first;
    for (size_t gi = 0; gi < members.size(); ++gi) {
      std::vector<float> gx;
      for (int64_t i : members[gi]) gx.push_back(t.x[static_cast<size_t>(i)]);
      const PeerGroup want = rule(gx);
      if (bits(want.scale) != bits(q.scales[gi])) {
        if (bad_scales++ == 0 && first.empty())
          first = "group " + std::to_string(gi) + " scale " + std::to_string(q.scales[gi]) + " peer " +
                  std::to_string(want.scale);
      }
      for (size_t j = 0; j < gx.size(); ++j) {
        const uint8_t got = q.codes[static_cast<size_t>(members[gi][j])];
        if (got != want.codes[j] && bad_codes++ == 0 && first.empty())
          first = "group " + std::to_string(gi) + " x " + std::to_string(gx[j]) + " code " + std::to_string(got) +
                  " peer " + std::to_string(want.codes[j]);
      }
      ++groups;
      elements += static_cast<int64_t>(gx.size());
    }
    EXPECT_EQ(bad_codes, 0) << spec_text << " on " << t.name << ": " << first;
    EXPECT_EQ(bad_scales, 0) << spec_text << " on " << t.name << ": " << first;
  }
  EXPECT_GE(groups, 8) << spec_text;  // at least one group of every input
  EXPECT_GT(elements, 100000) << spec_text;
}

TEST(QuantizePeers, DeepGemmPerTokenAndPerBlock) {
  expect_peer("deepseek-act", [](const auto& x) { return deepgemm(x, false); });
  expect_peer("deepseek-w", [](const auto& x) { return deepgemm(x, false); });
  expect_peer("deepseek-act-ue8m0", [](const auto& x) { return deepgemm(x, true); });
  expect_peer("deepseek-w-ue8m0", [](const auto& x) { return deepgemm(x, true); });
}

TEST(QuantizePeers, TransformerEngineCurrentScalingAndMxfp8) {
  expect_peer("te-current", [](const auto& x) { return te_current(x, false); });
  expect_peer("te-current-pow2", [](const auto& x) { return te_current(x, true); });
  expect_peer("e4m3:g128:apply=mul", [](const auto& x) { return te_current(x, false); });  // per block too
  expect_peer("te-mxfp8", [](const auto& x) { return te_mxfp8(x); });
  expect_peer("mxfp8", [](const auto& x) { return te_mxfp8(x); });
}

TEST(QuantizePeers, TorchaoMxScaleModes) {
  expect_peer("torchao-mxfp8", [](const auto& x) { return torchao(x, TorchaoMode::Floor); });
  expect_peer("e4m3:g32:scale=e8m0:mx=ceil", [](const auto& x) { return torchao(x, TorchaoMode::Ceil); });
  expect_peer("e4m3:g32:scale=e8m0:mx=even", [](const auto& x) { return torchao(x, TorchaoMode::Even); });
  expect_peer("torchao-mxfp8-rceil", [](const auto& x) { return te_mxfp8(x); });
}

TEST(QuantizePeers, CoatTritonQuantizers) {
  expect_peer("coat-act", [](const auto& x) { return coat_act(x); });
  expect_peer("coat-w", [](const auto& x) { return coat_weight(x); });
}

// The old, idealised meanings differ from the peers (which is why the presets changed), and stay
// reachable through explicit keys.
TEST(QuantizePeers, IdealisedSpecsDifferFromThePeers) {
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> x(64 * 4096);
  for (auto& v : x) v = bf16_to_f32(f32_to_bf16_rne(static_cast<float>(nd(gen))));
  const std::vector<int64_t> shape{64, 4096};
  auto differing = [&](const char* a, const char* b) {
    const QuantizedTensor qa = quantize(x.data(), shape, QuantSpec::parse(a));
    const QuantizedTensor qb = quantize(x.data(), shape, QuantSpec::parse(b));
    int64_t n = 0;
    for (size_t i = 0; i < qa.codes.size(); ++i) n += qa.codes[i] != qb.codes[i];
    for (size_t i = 0; i < qa.scales.size(); ++i) n += bits(qa.scales[i]) != bits(qb.scales[i]);
    return n;
  };
  EXPECT_GT(differing("deepseek-act", "e4m3:g128"), 0);
  EXPECT_GT(differing("coat-act", "e4m3:g16:scale=bf16:eps=1e-10"), 0);
  // Per tensor, x * (448 / amax) and x / (amax / 448) part on a few codes or on the stored scale
  // for some amaxes: look over a range of them.
  int64_t te = 0;
  for (int k = 0; k < 64; ++k) {
    x[0] = 8.0f + 0.37f * static_cast<float>(k);  // the tensor's amax
    te += differing("te-current", "e4m3:tensor");
  }
  EXPECT_GT(te, 0);
  // torchao's FLOOR lets a block's maximum reach [256, 512): it saturates where RCEIL does not.
  EXPECT_GT(differing("torchao-mxfp8", "mxfp8"), 0);
}

// COAT's FP8 AdamW kernel's group minimum (coat_kernel_group_min), against the same reduction
// written as its binomial tree: after the shfl_down steps 16, 8, ..., o, lane l holds
// R(l, o) = combine(R(l, 2o), R(l + o, 2o)) when l + o < 32, else R(l, 2o).
float tree_min(const std::vector<float>& lanes, int l, int o) {
  if (o == 32) return lanes[static_cast<size_t>(l)];
  const float mine = tree_min(lanes, l, 2 * o);
  if (l + o >= 32) return mine;
  const float other = tree_min(lanes, l + o, 2 * o);
  return other > 0.0f ? std::fmin(mine, other) : mine;
}
float coat_min_reference(const std::vector<float>& x) {  // x: up to 128 finite values
  std::vector<float> block(32, 1e9f);
  for (int w = 0; w < 4; ++w) {
    std::vector<float> lanes(32);
    for (int l = 0; l < 32; ++l) {
      const size_t i = static_cast<size_t>(32 * w + l);
      lanes[static_cast<size_t>(l)] = i < x.size() ? std::fabs(x[i]) : kFltMax;
    }
    block[static_cast<size_t>(w)] = tree_min(lanes, 0, 1);
  }
  return tree_min(block, 0, 1);
}

TEST(QuantizePeers, CoatKernelGroupMinimum) {
  std::mt19937_64 gen(9);
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  // Hand cases: element 0 zero -> 0; every magnitude above 1e9 -> 1e9; a zero at lane 1 hides
  // the odd lanes (lane 1 merges lanes 17, 9, 5, 3, ... before lane 0 reads it, last).
  std::vector<float> x(128);
  for (auto& v : x) v = ud(gen);
  x[3] = 1e-3f;
  EXPECT_EQ(coat_kernel_group_min(x.data(), 128), 1e-3f);
  x[1] = 0.0f;
  EXPECT_GT(coat_kernel_group_min(x.data(), 128), 0.4f);
  x[0] = 0.0f;
  EXPECT_EQ(coat_kernel_group_min(x.data(), 128), 0.0f);
  for (auto& v : x) v = 3e9f * ud(gen);
  EXPECT_EQ(coat_kernel_group_min(x.data(), 128), 1e9f);
  // Random groups with zeros sprinkled in, full and short.
  for (int trial = 0; trial < 4000; ++trial) {
    const int n = trial % 5 == 0 ? 1 + static_cast<int>(gen() % 128) : 128;
    std::vector<float> g(static_cast<size_t>(n));
    for (auto& v : g) v = (gen() % 7 == 0) ? 0.0f : std::ldexp(ud(gen), static_cast<int>(gen() % 40) - 20);
    ASSERT_EQ(bits(coat_kernel_group_min(g.data(), n)), bits(coat_min_reference(g))) << "trial " << trial;
  }
  // In quantize: coat-opt uses that minimum; groups without zeros and below 1e9 agree with the
  // exact-minimum spec, and a group whose first element is 0 does not.
  std::vector<float> t(4 * 128);
  for (auto& v : t) v = ud(gen) * ((gen() % 3) ? 1.0f : -1.0f);
  const std::vector<int64_t> shape{static_cast<int64_t>(t.size())};
  const QuantizedTensor a = quantize(t.data(), shape, QuantSpec::parse("coat-opt"));
  const QuantizedTensor b = quantize(t.data(), shape, QuantSpec::parse("e4m3:g128:de=coat"));
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.expand_k, b.expand_k);
  t[128] = 0.0f;
  const QuantizedTensor c = quantize(t.data(), shape, QuantSpec::parse("coat-opt"));
  const QuantizedTensor d = quantize(t.data(), shape, QuantSpec::parse("e4m3:g128:de=coat"));
  EXPECT_NE(c.expand_k[1], d.expand_k[1]);  // min 0 + 1e-30: a far larger ratio, a smaller k
  EXPECT_EQ(c.expand_k[0], d.expand_k[0]);
}

// div.full.f32's model: the fix-ups at the range ends, and the reciprocal table's deviations.
TEST(QuantizePeers, DivFullModel) {
  EXPECT_EQ(div_full(6.0f, 3.0f), 2.0f);
  EXPECT_EQ(div_full(1.0f, 4.0f), 0.25f);  // powers of two are exact
  EXPECT_TRUE(std::isinf(div_full(1.0f, 0.0f)));
  EXPECT_EQ(div_full(1.0f, std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(div_full(0.0f, 0.0f)));
  // Within 2 ulp of the IEEE quotient everywhere (PTX's bound), and different from it somewhere.
  std::mt19937 gen(3);
  int differ = 0;
  for (int i = 0; i < 200000; ++i) {
    const float a = from_bits((gen() & 0x807FFFFFu) | ((60u + gen() % 130u) << 23));
    const float b = from_bits((gen() & 0x807FFFFFu) | ((60u + gen() % 130u) << 23));
    const float q = div_full(a, b), r = a / b;
    const int64_t ulps = std::llabs(static_cast<int64_t>(bits(q)) - static_cast<int64_t>(bits(r)));
    ASSERT_LE(ulps, 2) << a << " / " << b;
    differ += ulps != 0;
  }
  EXPECT_GT(differ, 1000);
  // A huge divisor takes the quarter fix-up; a subnormal one the 2^24 fix-up.
  EXPECT_EQ(div_full(0x1p127f, 0x1p127f), 1.0f);
  EXPECT_EQ(div_full(0x1p-140f, 0x1p-140f), 1.0f);
}

}  // namespace
}  // namespace fp8sim
