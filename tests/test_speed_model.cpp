// The step-time model on the CPU: the kernel plan per recipe, calibration files, the prediction
// rules and the step arithmetic. Expected values are computed here from the model dimensions and
// from sums over the plan, never read back from the code under test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "sim/common/build_info.hpp"
#include "sim/common/check.hpp"
#include "sim/common/json.hpp"
#include "sim/recipe/recipe.hpp"
#include "sim/speed/calibrate.hpp"
#include "sim/speed/calibration.hpp"
#include "sim/speed/group16.hpp"
#include "sim/speed/kernel_versions.hpp"
#include "sim/speed/plan.hpp"
#include "sim/speed/speed.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::speed {
namespace {

// Every registry recipe the replay models, as speed sees them.
std::vector<PlanRecipe> registry_plans() {
  std::vector<PlanRecipe> out;
  for (const auto& n : recipe::speed_names()) out.push_back({n, *recipe::get(n).speed_plan});
  return out;
}

ModelShape llama7b() {
  ModelShape m;
  m.name = "llama2-7b";
  m.hidden = 4096;
  m.ffn = 11008;
  m.layers = 32;
  m.heads = 32;
  m.kv_heads = 32;
  m.head_dim = 128;
  m.vocab = 32000;
  m.params = 6738415616;
  m.root_params = 2 * 32000 * 4096 + 4096;  // untied embedding and LM head, the final RMSNorm
  return m;
}

ModelShape gqa_model() {  // small, with grouped-query attention
  ModelShape m;
  m.name = "gqa";
  m.hidden = 512;
  m.ffn = 1376;
  m.layers = 3;
  m.heads = 8;
  m.kv_heads = 2;
  m.head_dim = 64;
  m.vocab = 1024;
  m.params = 10'000'000;
  return m;
}

// A synthetic device: GEMMs at fixed TFLOP/s per operand type, attention at 400 TFLOP/s,
// memory-bound kernels at 3 TB/s plus 4 us. Independent of calibration.cpp's fitting rules.
double synthetic_ms(const KernelOp& op) {
  if (op.kind == Kind::Gemm) return op.flops / ((op.variant.rfind("bf16", 0) == 0 ? 700.0 : 1300.0) * 1e9);
  if (op.kind == Kind::Attention) return op.flops / (400.0 * 1e9);
  return 0.004 + op.bytes / (3000.0 * 1e6);
}

Measurement synthetic_measurement(const KernelOp& op) {
  Measurement m;
  m.key = op.key();
  m.kind = op.kind;
  m.variant = op.variant;
  m.dims = op.dims;
  m.median_ms = m.min_ms = m.max_ms = synthetic_ms(op);
  m.reps = 1;
  m.flops = op.flops;
  m.bytes = op.bytes;
  m.impl = "synthetic";
  return m;
}

void add_plan(Calibration& c, const std::vector<KernelOp>& ops) {
  for (const KernelOp& op : ops) c.add(synthetic_measurement(op));
}

PlanOptions po(int64_t batch, int64_t seq, int64_t gpus = 1) {
  PlanOptions o;
  o.batch = batch;
  o.seq = seq;
  o.gpus = gpus;
  return o;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// ------------------------------------------------------------------------------------ plan
TEST(SpeedPlan, GemmFlopsEqualSixTimesTokensTimesLinearParams) {
  const ModelShape m = llama7b();
  const int64_t B = 2, S = 2048, T = B * S;
  const double layer_linear_params =
      static_cast<double>(m.hidden) * m.hidden * 4 + 3.0 * m.hidden * m.ffn;  // q,k,v,o (MHA) + gate, up, down
  const double expected = m.layers * 6.0 * T * layer_linear_params + 6.0 * T * m.hidden * m.vocab;
  for (Plan r : all_plans()) {
    double flops = 0;
    int gemms_per_layer = 0;
    for (const KernelOp& op : build_plan(m, r, po(B, S)))
      if (op.kind == Kind::Gemm) {
        flops += op.flops * op.count;
        if (op.per_layer) ++gemms_per_layer;
      }
    EXPECT_NEAR(flops / expected, 1.0, 1e-12) << plan_name(r);
    EXPECT_EQ(gemms_per_layer, 21) << plan_name(r);  // 7 Linears x fprop, dgrad, wgrad
  }
}

TEST(SpeedPlan, GqaShapesAndAttentionFlops) {
  const ModelShape m = gqa_model();
  const int64_t B = 3, S = 256, T = B * S, KV = m.kv_heads * m.head_dim;
  for (const KernelOp& op : build_plan(m, Plan::BF16, po(B, S))) {
    if (op.name == "k_proj.fprop") {
      EXPECT_EQ(op.dims, (std::vector<int64_t>{T, KV, m.hidden}));
    }
    if (op.name == "v_proj.wgrad") {
      EXPECT_EQ(op.dims, (std::vector<int64_t>{KV, m.hidden, T}));
    }
    if (op.name == "attention.fwd") {
      EXPECT_EQ(op.dims, (std::vector<int64_t>{B, m.heads, m.kv_heads, S, m.head_dim}));
      EXPECT_DOUBLE_EQ(op.flops, 2.0 * B * m.heads * S * S * m.head_dim);  // causal: half of 4*B*h*S^2*d
    }
    if (op.name == "attention.bwd") {
      EXPECT_DOUBLE_EQ(op.flops, 2.5 * 2.0 * B * m.heads * S * S * m.head_dim);
    }
  }
}

TEST(SpeedPlan, Fp8GemmsUseKContiguousOperandsAndTheRecipeFormats) {
  for (Plan r : {Plan::TE, Plan::COAT}) {
    for (const KernelOp& op : build_plan(llama7b(), r, po(1, 2048))) {
      if (op.kind != Kind::Gemm) continue;
      if (op.name.rfind("lm_head", 0) == 0) {
        EXPECT_EQ(op.variant.substr(0, 14), "bf16*bf16>bf16") << op.name;  // the LM head stays BF16
        continue;
      }
      if (op.name.ends_with(".fprop")) {
        EXPECT_EQ(op.variant, "e4m3*e4m3>bf16,mk.nk,fast") << op.name;
      } else {
        EXPECT_EQ(op.variant, "e5m2*e4m3>bf16,mk.nk,split") << op.name;
      }
    }
  }
  std::map<std::string, std::string> bf16_layouts;
  for (const KernelOp& op : build_plan(llama7b(), Plan::BF16, po(1, 2048)))
    if (op.kind == Kind::Gemm) bf16_layouts[op.name.substr(op.name.find('.') + 1)] = op.variant;
  EXPECT_EQ(bf16_layouts["fprop"], "bf16*bf16>bf16,mk.nk");
  EXPECT_EQ(bf16_layouts["dgrad"], "bf16*bf16>bf16,mk.kn");
  EXPECT_EQ(bf16_layouts["wgrad"], "bf16*bf16>bf16,km.kn");
}

TEST(SpeedPlan, RecipesDifferOnlyWhereTheyShould) {
  const ModelShape m = llama7b();
  std::map<Plan, std::map<Kind, int>> per_layer;
  std::map<Plan, int> step_casts;
  for (Plan r : all_plans())
    for (const KernelOp& op : build_plan(m, r, po(1, 2048))) {
      if (op.per_layer && op.phase != Phase::Step) per_layer[r][op.kind]++;
      if (op.phase == Phase::Step && op.kind == Kind::CastTranspose) {
        step_casts[r]++;
        EXPECT_EQ(op.count, m.layers) << op.name;  // once per layer per step
      }
    }
  // BF16 has no quantization kernels at all.
  for (Kind k : {Kind::CastTranspose, Kind::Transpose, Kind::QuantizeG16, Kind::GroupMax, Kind::ReduceMax})
    EXPECT_EQ(per_layer[Plan::BF16][k], 0) << kind_name(k);
  // TE: one cast+transpose per distinct Linear input (4 forward) and per output gradient (7).
  EXPECT_EQ(per_layer[Plan::TE][Kind::CastTranspose], 11);
  EXPECT_EQ(step_casts[Plan::TE], 7);
  EXPECT_EQ(step_casts[Plan::BF16], 0);
  // COAT: gate/up outputs quantized 1x16; SiLU*Mul on FP8 inputs; grads transposed from FP8.
  EXPECT_EQ(per_layer[Plan::COAT][Kind::QuantizeG16], 2);
  EXPECT_EQ(per_layer[Plan::COAT][Kind::Transpose], 2);
  EXPECT_EQ(step_casts[Plan::COAT], 7);
  // Every recipe: 2 norms forward and backward, one SiLU*Mul each way, attention BF16.
  for (Plan r : all_plans()) {
    EXPECT_EQ(per_layer[r][Kind::RmsNormFwd], 2);
    EXPECT_EQ(per_layer[r][Kind::RmsNormBwd], 2);
    EXPECT_EQ(per_layer[r][Kind::SiluMulFwd], 1);
    EXPECT_EQ(per_layer[r][Kind::Attention], 2);
  }
}

TEST(SpeedPlan, BytesOfElementwiseKernels) {
  const ModelShape m = llama7b();
  const double T = 2048, H = 4096, F = 11008;
  std::map<std::string, const KernelOp*> by_name;
  const auto coat = build_plan(m, Plan::COAT, po(1, 2048));
  for (const KernelOp& op : coat) by_name[op.name] = &op;
  // read g, u as E4M3+scales (1.125 B each), write SiLU 1x16 (1.125), product bf16 (2), gmax (0.125)
  EXPECT_DOUBLE_EQ(by_name.at("silu_mul.fwd")->bytes, T * F * (1.125 * 3 + 2 + 0.125));
  EXPECT_DOUBLE_EQ(by_name.at("attn_residual.fwd")->bytes, T * H * (2 + 2 + 2 + 1.125));
  EXPECT_DOUBLE_EQ(by_name.at("silu_mul.out.cast")->bytes, T * F * (2 + 1 + 1));
  EXPECT_EQ(by_name.at("silu_mul.out.scale")->dims, (std::vector<int64_t>{2048 * 11008 / 16}));
  const auto bf16 = build_plan(m, Plan::BF16, po(1, 2048));
  for (const KernelOp& op : bf16)
    if (op.name == "mlp_residual.fwd") {
      EXPECT_DOUBLE_EQ(op.bytes, T * H * 6);
    }
}

TEST(SpeedPlan, OptimizerIsShardedOverGpus) {
  const ModelShape m = llama7b();
  for (int64_t gpus : {1, 4, 8})
    for (Plan r : all_plans())
      for (const KernelOp& op : build_plan(m, r, po(1, 2048, gpus)))
        if (op.kind == Kind::Optimizer) {
          const double per_gpu = std::ceil(static_cast<double>(m.params) / gpus);
          EXPECT_DOUBLE_EQ(op.count * op.dims[0], per_gpu);
          const std::map<Plan, std::string> own{
              {Plan::COAT, "adamw_fp8_de"}, {Plan::FP8LM, "adamw_fp8lm"}, {Plan::DEEPSEEK, "adamw_bf16m"}};
          EXPECT_EQ(op.variant, own.count(r) ? own.at(r) : "adamw_fp32") << plan_name(r);
        }
}

// FP8-LM, DeepSeek-V3 and MXFP8: the kernels each adds to a layer and a step, their variants, shapes
// and bytes, counted here from the recipes' descriptions (docs/speed-model.md).
TEST(SpeedPlan, Fp8lmDeepseekAndMxfp8RunTheirRecipesKernels) {
  const ModelShape m = llama7b();
  const double T = 2 * 2048, H = 4096, F = 11008;
  auto count = [](const std::vector<KernelOp>& plan, auto&& pred) {
    int n = 0;
    for (const KernelOp& op : plan) n += pred(op) ? 1 : 0;
    return n;
  };
  auto layer = [](const KernelOp& op) { return op.per_layer && op.phase != Phase::Step; };
  auto step = [](const KernelOp& op) { return op.phase == Phase::Step && op.kind != Kind::Optimizer; };
  auto optimizer = [](const std::vector<KernelOp>& plan) {
    for (const KernelOp& op : plan)
      if (op.kind == Kind::Optimizer) return op;
    return KernelOp{};
  };
  const int64_t probe = PlanOptions{}.optimizer_probe_params;

  // FP8-LM: TE's layer exactly, plus per weight and step an amax and a cast of the weight and of its
  // gradient; AdamW with E4M3 m and FP16 v (18 bytes a parameter: fp32 p read and written, g, m, v).
  const auto te = build_plan(m, Plan::TE, po(2, 2048)), lm = build_plan(m, Plan::FP8LM, po(2, 2048));
  std::multiset<std::string> te_layer, lm_layer;
  for (const KernelOp& op : te)
    if (layer(op)) te_layer.insert(op.key());
  for (const KernelOp& op : lm)
    if (layer(op)) lm_layer.insert(op.key());
  EXPECT_EQ(lm_layer, te_layer);
  EXPECT_EQ(count(lm, [&](const KernelOp& op) { return step(op) && op.kind == Kind::Amax; }), 14);
  EXPECT_EQ(count(lm, [&](const KernelOp& op) { return step(op) && op.variant == "bf16>e4m3+e4m3T"; }), 7);
  EXPECT_EQ(count(lm, [&](const KernelOp& op) { return step(op) && op.variant == "bf16>e4m3"; }), 7);
  EXPECT_EQ(optimizer(lm).variant, "adamw_fp8lm");
  // The step moves p (8 bytes), g (4), m (E4M3, 2) and v (FP16, 4); the amax pass that the
  // per-tensor scales need reads g, m and v once more (7).
  EXPECT_DOUBLE_EQ(optimizer(lm).bytes, (8.0 + 4.0 + 2.0 + 4.0 + 7.0) * probe);
  EXPECT_FALSE(optimizer(lm).deviation.empty());

  // DeepSeek-V3: 4 Linear inputs and 7 output gradients a layer quantized 1x128 with the transposed
  // copy; 14 GEMMs 1x128 x 128x128 (fprop, dgrad), 7 wgrads 1x128 x 1x128 with K = tokens; the 7
  // weights in 128x128 blocks once per step; AdamW with BF16 moments (20 bytes a parameter).
  const auto ds = build_plan(m, Plan::DEEPSEEK, po(2, 2048));
  EXPECT_EQ(count(ds, [&](const KernelOp& op) { return layer(op) && op.variant == "bf16>e4m3g128+e4m3g128T"; }), 11);
  EXPECT_EQ(count(ds, [&](const KernelOp& op) { return layer(op) && op.kind == Kind::CastTranspose; }), 0);
  EXPECT_EQ(count(ds,
                  [&](const KernelOp& op) {
                    return layer(op) && op.kind == Kind::Gemm && op.variant == "e4m3g128*e4m3b128>bf16,mk.nk";
                  }),
            14);
  EXPECT_EQ(count(ds,
                  [&](const KernelOp& op) {
                    return layer(op) && op.kind == Kind::Gemm && op.variant == "e4m3g128*e4m3g128>bf16,mk.nk" &&
                           op.name.ends_with(".wgrad") && op.dims[2] == T;
                  }),
            7);
  EXPECT_EQ(count(ds, [&](const KernelOp& op) { return step(op) && op.variant == "bf16>e4m3b128+e4m3b128T"; }), 7);
  EXPECT_EQ(optimizer(ds).variant, "adamw_bf16m");
  EXPECT_DOUBLE_EQ(optimizer(ds).bytes, 20.0 * probe);
  for (const KernelOp& op : ds) {
    if (op.name == "mlp_norm.out.quant") {
      EXPECT_DOUBLE_EQ(op.bytes, T * H * (2 + 1 + 1 + 4.0 / 128 + 4.0 / 128));
    }
    if (op.name == "down_proj.wgrad") {  // dW (H, F) = dY^T (H, T) x X^T (F, T)
      EXPECT_EQ(op.dims, (std::vector<int64_t>{4096, 11008, 4096}));
      EXPECT_DOUBLE_EQ(op.bytes, H * T * (1 + 4.0 / 128) + F * T * (1 + 4.0 / 128) + H * F * 2);
    }
  }

  // MXFP8 on Hopper: the same 11 quantizations (1x32 and 32x1 blocks, E8M0), each Linear input's
  // row-wise copy dequantized for fprop (4) and column-wise for the wgrad (4), each gradient both
  // ways (14); BF16's GEMMs exactly; per step each weight quantized and dequantized both ways;
  // fp32 AdamW.
  const auto mx = build_plan(m, Plan::MXFP8, po(2, 2048)), bf = build_plan(m, Plan::BF16, po(2, 2048));
  EXPECT_EQ(count(mx, [&](const KernelOp& op) { return layer(op) && op.variant == "bf16>e4m3mx+e4m3mxC"; }), 11);
  EXPECT_EQ(count(mx, [&](const KernelOp& op) { return layer(op) && op.variant == "e4m3mx>bf16"; }), 4 + 7);
  EXPECT_EQ(count(mx, [&](const KernelOp& op) { return layer(op) && op.variant == "e4m3mxC>bf16"; }), 4 + 7);
  std::multiset<std::string> mx_gemms, bf_gemms;
  for (const KernelOp& op : mx)
    if (op.kind == Kind::Gemm) mx_gemms.insert(op.key());
  for (const KernelOp& op : bf)
    if (op.kind == Kind::Gemm) bf_gemms.insert(op.key());
  EXPECT_EQ(mx_gemms, bf_gemms);
  EXPECT_EQ(count(mx, [&](const KernelOp& op) { return step(op) && op.kind == Kind::BlockQuantize; }), 7);
  EXPECT_EQ(count(mx, [&](const KernelOp& op) { return step(op) && op.kind == Kind::Dequantize; }), 14);
  EXPECT_EQ(optimizer(mx).variant, "adamw_fp32");
  for (const KernelOp& op : mx)
    if (op.kind == Kind::Dequantize) {
      EXPECT_FALSE(op.deviation.empty()) << op.name;
      EXPECT_DOUBLE_EQ(op.bytes, static_cast<double>(op.dims[0]) * op.dims[1] * (1 + 1.0 / 32 + 2)) << op.name;
    }

  // Widths and tokens their blocks need.
  EXPECT_THROW(build_plan(m, Plan::DEEPSEEK, po(1, 2064)), UsageError);  // 2064 tokens: 16 x 129
  EXPECT_THROW(build_plan(m, Plan::MXFP8, po(1, 2064)), UsageError);
  EXPECT_NO_THROW(build_plan(m, Plan::MXFP8, po(1, 2080)));  // 65 x 32
  ModelShape odd = llama7b();
  odd.ffn = 11008 + 16;
  for (Plan p : {Plan::DEEPSEEK, Plan::MXFP8}) {
    try {
      build_plan(odd, p, po(1, 2048));
      ADD_FAILURE() << plan_name(p) << " accepted intermediate_size " << odd.ffn;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("intermediate_size"), std::string::npos) << e.what();
    }
  }
}

TEST(SpeedModel, NewPlansAreFittedFromTheirOwnKernelsOnly) {
  const ModelShape m = llama7b();
  for (Plan r : {Plan::FP8LM, Plan::DEEPSEEK, Plan::MXFP8}) {
    Calibration c;
    add_plan(c, build_plan(m, r, po(2, 2048)));
    // Batch 4, never measured: each kernel fitted from its own kind and variant (GEMMs at the same
    // TFLOP/s), and the step is still the count-weighted sum.
    const auto plan4 = build_plan(m, r, po(4, 2048));
    double step = 0;
    for (const KernelOp& op : plan4) {
      const Prediction p = c.predict(op);
      step += op.count * p.ms;
      if (op.phase == Phase::Step) continue;  // weights and the optimizer probe: the same shapes at any batch
      ASSERT_NE(p.from, nullptr) << op.key();
      EXPECT_FALSE(p.measured) << op.key();
      EXPECT_EQ(p.from->variant, op.variant) << op.key();
      if (op.kind == Kind::Gemm) {
        EXPECT_NEAR(p.ms / synthetic_ms(op), 1.0, 1e-9) << op.key();
      }
    }
    SpeedOptions so;
    const RecipeSpeed e = evaluate_recipe(m, {plan_name(r), r}, po(4, 2048), c, so, false);
    EXPECT_NEAR(e.step_ms, step, 1e-9 * step) << plan_name(r);
    EXPECT_GT(e.breakdown_ms.quantize, 0) << plan_name(r);
  }
  // A block-scaled GEMM is never fitted from a per-tensor one: with TE's kernels only, DeepSeek's
  // first block-scaled GEMM has no data.
  Calibration te;
  add_plan(te, build_plan(m, Plan::TE, po(2, 2048)));
  for (const KernelOp& op : build_plan(m, Plan::DEEPSEEK, po(2, 2048)))
    if (op.kind == Kind::Gemm && op.variant.find("g128") != std::string::npos) {
      try {
        te.predict(op);
        ADD_FAILURE() << op.key() << " was fitted from TE's per-tensor GEMMs";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("fp8sim calibrate"), std::string::npos) << e.what();
      }
      break;
    }
}

TEST(SpeedPlan, KeysNameKernelVariantAndShape) {
  const auto plan = build_plan(llama7b(), Plan::BF16, po(1, 2048));
  EXPECT_EQ(plan.front().key(), "embedding_fwd:bf16:2048x4096x32000");
  bool found = false;
  for (const KernelOp& op : plan)
    if (op.name == "q_proj.fprop") {
      EXPECT_EQ(op.key(), "gemm:bf16*bf16>bf16,mk.nk:2048x4096x4096");
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(SpeedPlan, RejectsBadShapesWithOneLineErrors) {
  ModelShape m = llama7b();
  m.kv_heads = 5;
  EXPECT_THROW(build_plan(m, Plan::BF16, po(1, 2048)), Error);
  m = llama7b();
  m.ffn = 11000;  // not a multiple of 16
  try {
    build_plan(m, Plan::COAT, po(1, 2048));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate_size"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  m = llama7b();
  m.activation = "gelu";
  EXPECT_THROW(build_plan(m, Plan::BF16, po(1, 2048)), Error);
  EXPECT_THROW(build_plan(llama7b(), Plan::BF16, po(1, 1000)), Error);  // 1000 tokens: not a multiple of 16
  EXPECT_THROW(build_plan(llama7b(), Plan::BF16, po(0, 2048)), Error);
  EXPECT_FALSE(find_plan("nvfp4").has_value());
  EXPECT_EQ(find_plan("coat"), Plan::COAT);
  for (Plan p : all_plans()) EXPECT_EQ(find_plan(plan_name(p)), p);
}

TEST(SpeedPlan, ByteTransposeSelectors) {
  // The 4x4 byte transpose the cast kernel does in registers.
  const uint32_t w[4] = {0x03020100u, 0x13121110u, 0x23222120u, 0x33323130u};  // row k, column m = 0xkm
  uint32_t o[4];
  transpose4x4_bytes(w, o);
  EXPECT_EQ(o[0], 0x30201000u);
  EXPECT_EQ(o[1], 0x31211101u);
  EXPECT_EQ(o[2], 0x32221202u);
  EXPECT_EQ(o[3], 0x33231303u);
  EXPECT_EQ(byte_perm(0x03020100u, 0x07060504u, 0x7531u), 0x07050301u);
}

TEST(SpeedPlan, GroupScaleNeverLetsAGroupOverflow) {
  for (float m : {448.0f, 1.0f, 3.14159f, 1e-20f, 0.0f, 65504.0f}) {
    const uint16_t s = g16_scale(m, kE4M3Max);
    const float inv = g16_inverse(s);
    EXPECT_LE(mul_rn(m, inv), kE4M3Max) << m;
    EXPECT_GT(bf16_to_f32(s), 0.0f) << m;
  }
  EXPECT_EQ(bf16_round_up(1.0f), 0x3F80);
  EXPECT_EQ(bf16_round_up(1.0000001f), 0x3F81);
}

// ------------------------------------------------------------------------------ calibration
TEST(SpeedCalibration, RoundTripsAndPredictsMeasuredKeys) {
  Calibration c;
  const auto plan = build_plan(gqa_model(), Plan::COAT, po(1, 256));
  add_plan(c, plan);
  c.device["name"] = "test GPU";
  const Calibration back = Calibration::from_json(Json::parse(c.to_json().dump()), "roundtrip");
  EXPECT_EQ(back.measurements().size(), c.measurements().size());
  for (const KernelOp& op : plan) {
    const Prediction p = back.predict(op);
    EXPECT_TRUE(p.measured) << op.key();
    EXPECT_EQ(p.source, "measured");
    EXPECT_DOUBLE_EQ(p.ms, synthetic_ms(op)) << op.key();
  }
}

// ------------------------------------------------------------------------------ versions
TEST(SpeedVersions, EveryKernelOfEveryPlanHasAFamilyWithAVersion) {
  std::set<std::string> names;
  for (const KernelFamily& f : kernel_families()) {
    EXPECT_TRUE(names.insert(f.name).second) << "family listed twice: " << f.name;
    EXPECT_GE(f.version, 1) << f.name;
  }
  std::set<std::string> used;
  for (Plan p : all_plans())
    for (const KernelOp& op : build_plan(llama7b(), p, po(2, 2048))) {
      const KernelFamily* f = kernel_family(op.kind, op.variant);
      const bool torch = op.kind == Kind::Attention || (op.kind == Kind::Optimizer && op.variant == "adamw_fp32");
      EXPECT_EQ(f == nullptr, torch) << op.key();
      if (f) used.insert(f->name);
    }
  for (const Fig4bPaperRow& r : fig4b_paper()) {
    const Fig4bOps f = fig4b_ops(r.rows, r.cols);
    for (const KernelOp* op : {&f.jit_amax, &f.stage2_reduce, &f.producer_plain, &f.producer_with_gmax}) {
      const KernelFamily* fam = kernel_family(op->kind, op->variant);
      ASSERT_NE(fam, nullptr) << op->key();
      used.insert(fam->name);
    }
  }
  // No family is left over: each versions kernels some plan (or Figure 4(b)) runs.
  for (const std::string& n : names) EXPECT_TRUE(used.count(n)) << "no plan runs a kernel of family " << n;
  EXPECT_THROW(kernel_family(Kind::Optimizer, "adamw_sgd"), Error);
}

TEST(SpeedVersions, BuildCommitIsRecorded) {
  const std::string c = build_commit();
  ASSERT_FALSE(c.empty());
  if (c != "unknown") {
    const std::string hex = c.substr(0, c.find('-'));
    EXPECT_EQ(hex.size(), 40u) << c;
    EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos) << c;
    EXPECT_TRUE(c.size() == 40 || c.substr(40) == "-dirty") << c;
  }
}

TEST(SpeedVersions, CalibrationRoundTripsVersionsAndCommit) {
  Calibration c;
  const auto plan = build_plan(gqa_model(), Plan::TE, po(1, 256));
  for (const KernelOp& op : plan) {
    Measurement m = synthetic_measurement(op);
    if (const KernelFamily* f = kernel_family(op.kind, op.variant)) m.version = f->version + 2;
    c.add(m);
  }
  c.commit = "0123456789abcdef0123456789abcdef01234567";
  const Json doc = c.to_json();
  EXPECT_EQ(doc.at("fp8sim").at("commit").as_string(), c.commit);
  for (const KernelFamily& f : kernel_families())
    EXPECT_EQ(doc.at("fp8sim").at("kernel_versions").at(f.name).as_int(), f.version) << f.name;
  const Calibration back = Calibration::from_json(Json::parse(doc.dump()), "roundtrip");
  EXPECT_EQ(back.commit, c.commit);
  for (const auto& [k, m] : back.measurements()) EXPECT_EQ(m.version, c.find(k)->version) << k;
  // A version that is no positive integer is refused, naming the field.
  Json bad = doc;
  bad["measurements"].as_array()[0]["kernel_version"] = 1.5;
  try {
    Calibration::from_json(bad, "bad.json");
    ADD_FAILURE() << "a fractional kernel_version was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel_version"), std::string::npos) << e.what();
  }
}

TEST(SpeedVersions, StaleFamiliesAreThoseWhoseMeasurementsCarryAnotherVersion) {
  // TE's kernels at llama-7b batch 2: rmsnorm measured before versions existed (0), cast_transpose at
  // a newer version than this build's, everything else current. Batch 4 is fitted from batch 2, so
  // its kernels are as stale as the measurements they come from.
  Calibration c;
  const auto plan2 = build_plan(llama7b(), Plan::TE, po(2, 2048));
  for (const KernelOp& op : plan2) {
    Measurement m = synthetic_measurement(op);
    const KernelFamily* f = kernel_family(op.kind, op.variant);
    m.version = !f                                         ? 0
                : std::string(f->name) == "rmsnorm"        ? 0
                : std::string(f->name) == "cast_transpose" ? f->version + 1
                                                           : f->version;
    c.add(m);
  }
  const std::vector<StaleFamily> st = c.stale_families(plan2);
  ASSERT_EQ(st.size(), 2u);
  std::map<std::string, int> expected_kernels;  // distinct keys per stale family
  std::set<std::string> keys;
  for (const KernelOp& op : plan2)
    if (keys.insert(op.key()).second)
      if (const KernelFamily* f = kernel_family(op.kind, op.variant);
          f && (std::string(f->name) == "rmsnorm" || std::string(f->name) == "cast_transpose"))
        ++expected_kernels[f->name];
  // kernel_families() order: rmsnorm before cast_transpose.
  EXPECT_EQ(st[0].family, "rmsnorm");
  EXPECT_EQ(st[0].calibration_versions, std::vector<int>{0});
  EXPECT_EQ(st[0].build_version, kRmsNormKernelVersion);
  EXPECT_EQ(st[0].kernels, expected_kernels["rmsnorm"]);
  EXPECT_EQ(st[1].family, "cast_transpose");
  EXPECT_EQ(st[1].calibration_versions, std::vector<int>{kCastTransposeKernelVersion + 1});
  EXPECT_EQ(st[1].kernels, expected_kernels["cast_transpose"]);
  EXPECT_NE(st[0].message("cal.json").find("before kernel versions were recorded"), std::string::npos);
  EXPECT_NE(st[1].message("cal.json").find(fmt::format("at version {}", kCastTransposeKernelVersion + 1)),
            std::string::npos);
  EXPECT_NE(st[1].message("cal.json").find("fp8sim calibrate"), std::string::npos);
  // Fitted kernels (batch 4) inherit their measurement's staleness; attention (PyTorch's) never is.
  const std::vector<StaleFamily> st4 = c.stale_families(build_plan(llama7b(), Plan::TE, po(4, 2048)));
  ASSERT_EQ(st4.size(), 2u);
  EXPECT_EQ(st4[0].family, "rmsnorm");
  EXPECT_EQ(st4[1].family, "cast_transpose");
  // A calibration at this build's versions has nothing stale.
  Calibration fresh;
  for (const KernelOp& op : plan2) {
    Measurement m = synthetic_measurement(op);
    if (const KernelFamily* f = kernel_family(op.kind, op.variant)) m.version = f->version;
    fresh.add(m);
  }
  EXPECT_TRUE(fresh.stale_families(plan2).empty());
}

TEST(SpeedVersions, CalibrationSetCoversEveryPlanAtEveryShape) {
  const std::vector<CalibrationShape> shapes{{"llama2-7b", 2, 2048}, {"llama3-8b", 1, 2048}};
  std::vector<std::string> notes;
  const std::vector<KernelOp> ops = calibration_kernels(shapes, notes);
  EXPECT_TRUE(notes.empty()) << notes.front();
  std::set<std::string> keys;
  for (const KernelOp& op : ops) {
    EXPECT_TRUE(keys.insert(op.key()).second) << "listed twice: " << op.key();
    EXPECT_FALSE(op.kind == Kind::Attention) << op.key();
    EXPECT_FALSE(op.kind == Kind::Optimizer && op.variant == "adamw_fp32") << op.key();
  }
  for (const CalibrationShape& s : shapes)
    for (Plan p : all_plans())
      for (const KernelOp& op : build_plan(load_model_shape(s.model), p, po(s.batch, s.seq))) {
        const bool torch = op.kind == Kind::Attention || (op.kind == Kind::Optimizer && op.variant == "adamw_fp32");
        EXPECT_EQ(keys.count(op.key()), torch ? 0u : 1u) << op.key();
      }
  for (const Fig4bPaperRow& r : fig4b_paper()) EXPECT_TRUE(keys.count(fig4b_ops(r.rows, r.cols).jit_amax.key()));
  // The documented set: every model of models/ at 1, 2, 4, 8 x 2048, and Table 7's 13B row at 1 x 1024.
  const std::vector<CalibrationShape> set = default_calibration_shapes();
  for (const char* m : {"llama2-7b", "llama2-13b", "llama-30b", "llama3-8b"})
    for (int64_t b : {1, 2, 4, 8})
      EXPECT_TRUE(std::any_of(set.begin(), set.end(),
                              [&](const CalibrationShape& s) { return s.model == m && s.batch == b && s.seq == 2048; }))
          << m << " " << b;
  EXPECT_TRUE(std::any_of(set.begin(), set.end(), [](const CalibrationShape& s) {
    return s.model == "llama2-13b" && s.batch == 1 && s.seq == 1024;
  }));
}

TEST(SpeedCalibration, FitsUnmeasuredShapesFromTheNearestMeasurement) {
  Calibration c;
  add_plan(c, build_plan(llama7b(), Plan::BF16, po(2, 2048)));
  // Batch 4: every GEMM is fitted at the same TFLOP/s as its batch-2 twin (flops double).
  for (const KernelOp& op : build_plan(llama7b(), Plan::BF16, po(4, 2048))) {
    const Prediction p = c.predict(op);
    if (op.kind == Kind::Optimizer) {  // timed at a fixed probe size: the same key at any batch
      EXPECT_TRUE(p.measured);
      continue;
    }
    EXPECT_FALSE(p.measured) << op.key();
    EXPECT_EQ(p.source.rfind("fitted from ", 0), 0u) << p.source;
    if (op.kind == Kind::Gemm || op.kind == Kind::Attention) {
      EXPECT_NEAR(p.ms / synthetic_ms(op), 1.0, 1e-9) << op.key();
    }
  }
  // A memory-bound kernel: t0 + bytes * (t' - t0) / bytes' with t0 the smallest median in the file.
  double t0 = 1e9;
  for (const auto& [k, m] : c.measurements()) t0 = std::min(t0, m.median_ms);
  t0 = std::min(t0, 0.010);
  KernelOp big = build_plan(llama7b(), Plan::BF16, po(4, 2048)).front();  // embedding at batch 4
  const KernelOp small = build_plan(llama7b(), Plan::BF16, po(2, 2048)).front();
  const Prediction p = c.predict(big);
  const double net = std::max(synthetic_ms(small) - t0, synthetic_ms(small) * 0.05);
  EXPECT_NEAR(p.ms, t0 + big.bytes * net / small.bytes, 1e-12);
}

TEST(SpeedCalibration, NothingOfTheKindIsAnError) {
  Calibration c;
  add_plan(c, build_plan(llama7b(), Plan::BF16, po(1, 2048)));
  for (const KernelOp& op : build_plan(llama7b(), Plan::COAT, po(1, 2048))) {
    if (op.kind != Kind::QuantizeG16) continue;
    try {
      c.predict(op);
      FAIL() << "expected an error for " << op.key();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("quantize_g16"), std::string::npos) << e.what();
    }
  }
}

TEST(SpeedCalibration, MergeKeepsOldEntriesAndNewerWins) {
  Calibration a, b;
  const auto plan = build_plan(gqa_model(), Plan::BF16, po(1, 256));
  add_plan(a, plan);
  Measurement m = synthetic_measurement(plan[0]);
  m.median_ms = m.min_ms = m.max_ms = 123.0;
  b.add(m);
  const size_t before = a.measurements().size();
  a.merge(b);
  EXPECT_EQ(a.measurements().size(), before);
  EXPECT_DOUBLE_EQ(a.find(plan[0].key())->median_ms, 123.0);
  EXPECT_DOUBLE_EQ(a.find(plan[1].key())->median_ms, synthetic_ms(plan[1]));
}

TEST(SpeedCalibration, BadFilesGiveOneLineErrorsNamingTheProblem) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    const std::string path = write_temp("cal.json", text);
    try {
      Calibration::load(path);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(needle), std::string::npos) << w;
      EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    }
  };
  expect_error("{", "cal.json");
  expect_error("{\"schema\": \"other\", \"measurements\": []}", "schema");
  expect_error("{\"schema\": \"fp8sim-speed-calibration/1\", \"measurements\": []}", "empty");
  const std::string head = "{\"schema\": \"fp8sim-speed-calibration/1\", \"measurements\": [";
  expect_error(head + "{\"kind\": \"gemm\", \"variant\": \"x\", \"dims\": [1,2,3], \"median_ms\": -1, \"flops\": 1}]}",
               "median_ms");
  expect_error(head + "{\"kind\": \"warp\", \"variant\": \"x\", \"dims\": [1], \"median_ms\": 1, \"bytes\": 1}]}",
               "warp");
  expect_error(
      head + "{\"kind\": \"add\", \"variant\": \"bf16>bf16\", \"dims\": [1, 0], \"median_ms\": 1, \"bytes\": 1}]}",
      "dims");
  expect_error(head +
                   "{\"kind\": \"add\", \"variant\": \"bf16>bf16\", \"dims\": [16, 16], \"median_ms\": 1, "
                   "\"min_ms\": 2, \"bytes\": 1}]}",
               "min_ms");
  expect_error(
      head +
          "{\"key\": \"add:bf16>bf16:1x1\", \"kind\": \"add\", \"variant\": \"bf16>bf16\", \"dims\": [16, 16], "
          "\"median_ms\": 1, \"bytes\": 1}]}",
      "key");
  expect_error(head + "{\"kind\": \"add\", \"variant\": \"bf16>bf16\", \"dims\": [16, 16], \"median_ms\": 1}]}",
               "bytes");
  try {
    Calibration::load(test::temp_dir() + "/missing.json");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------------- step arithmetic
TEST(SpeedModel, StepIsTheCountWeightedSumOfKernelTimes) {
  const ModelShape m = llama7b();
  SpeedOptions so;
  for (Plan r : all_plans()) {
    for (int64_t accum : {1, 3}) {
      PlanOptions o = po(2, 2048, 4);
      o.grad_accum = accum;
      const auto plan = build_plan(m, r, o);
      Calibration c;
      add_plan(c, plan);
      double step = 0, fwd = 0, bwd = 0, opt = 0;
      for (const KernelOp& op : plan) {
        step += op.count * synthetic_ms(op);
        if (op.per_layer && op.phase == Phase::Forward) fwd += synthetic_ms(op);
        if (op.per_layer && op.phase == Phase::Backward) bwd += synthetic_ms(op);
        if (op.kind == Kind::Optimizer) opt += op.count * synthetic_ms(op);
      }
      const RecipeSpeed e = evaluate_recipe(m, {plan_name(r), r}, o, c, so, false);
      EXPECT_NEAR(e.step_ms, step, 1e-9 * step);
      EXPECT_NEAR(e.layer_fwd_ms, fwd, 1e-9 * fwd);
      EXPECT_NEAR(e.layer_bwd_ms, bwd, 1e-9 * bwd);
      EXPECT_NEAR(e.optimizer_ms, opt, 1e-9 * opt);
      EXPECT_NEAR(e.tokens_per_s_per_gpu, 2.0 * 2048 * accum / (step / 1000), 1e-6);
      EXPECT_DOUBLE_EQ(e.measured_fraction, 1.0);
      double parts = 0;
      for (const auto& [k, v] : e.breakdown_ms.items()) parts += v;
      EXPECT_NEAR(parts, step, 1e-9 * step);
    }
  }
}

TEST(SpeedModel, FsdpCommunicationModel) {
  const ModelShape m = llama7b();
  const PlanOptions o = po(2, 2048, 4);
  Calibration c;
  add_plan(c, build_plan(m, Plan::BF16, o));
  SpeedOptions so;
  const double compute = evaluate_recipe(m, {"bf16", Plan::BF16}, o, c, so, false).step_ms;
  so.fsdp_comm = "serial";
  so.link_gbps = 200;
  // Layers all-gathered twice (forward, backward), the root (embedding, final norm, LM head) once,
  // every gradient reduce-scattered once: 2 x 2 B per layer parameter + 2 B per root parameter +
  // 2 B per parameter, x 3/4 of it over the link.
  const double P = static_cast<double>(m.params), R = static_cast<double>(m.root_params), PL = P - R;
  ASSERT_EQ(m.root_params, 2 * m.vocab * m.hidden + m.hidden);             // untied embedding and head, RMSNorm
  const double comm = (4 * PL + 2 * R + 2 * P) * 3.0 / 4.0 / 200e9 * 1e3;  // ms
  EXPECT_NEAR(evaluate_recipe(m, {"bf16", Plan::BF16}, o, c, so, false).step_ms, compute + comm, 1e-6);
  so.fsdp_comm = "overlap";
  // Exposed: the root's and the first layer's all-gathers and reduce-scatters.
  const double exposed = (2 * R + 2 * PL / m.layers + 2 * PL / m.layers + 2 * R) * 3.0 / 4.0 / 200e9 * 1e3;
  EXPECT_NEAR(evaluate_recipe(m, {"bf16", Plan::BF16}, o, c, so, false).comm_ms,
              exposed + std::max(0.0, comm - exposed - compute), 1e-6);
}

// A calibration file covering Table 7 and Figure 4(b) in full, built from the plans themselves.
std::string full_calibration_file(bool with_torch) {
  Calibration c;
  c.device["name"] = "Synthetic GPU";
  c.created = "2025-11-30T00:00:00Z";
  const struct {
    const char* model;
    int64_t gpus, seq, b[3];
  } rows[] = {{"llama2-7b", 1, 2048, {0, 0, 1}},  {"llama2-7b", 2, 2048, {1, 1, 4}},
              {"llama2-7b", 4, 2048, {2, 2, 4}},  {"llama2-7b", 8, 2048, {4, 4, 8}},
              {"llama2-13b", 2, 1024, {0, 0, 1}}, {"llama2-13b", 4, 2048, {1, 1, 2}},
              {"llama2-13b", 8, 2048, {2, 2, 4}}, {"llama-30b", 8, 2048, {0, 0, 1}}};
  for (const auto& r : rows) {
    const ModelShape m = load_model_shape(r.model);
    for (int i = 0; i < 3; ++i)
      if (r.b[i]) add_plan(c, build_plan(m, all_plans()[i], po(r.b[i], r.seq, r.gpus)));
    if (r.b[0]) add_plan(c, build_plan(m, Plan::COAT, po(r.b[0], r.seq, r.gpus)));
  }
  // The plans outside Table 7 at the default micro-batch.
  for (Plan p : {Plan::FP8LM, Plan::DEEPSEEK, Plan::MXFP8})
    add_plan(c, build_plan(load_model_shape("llama2-7b"), p, po(1, 2048, 4)));
  for (const Fig4bPaperRow& p : fig4b_paper()) {
    const Fig4bOps f = fig4b_ops(p.rows, p.cols);
    add_plan(c, {f.jit_amax, f.stage2_reduce, f.producer_plain, f.producer_with_gmax});
  }
  if (with_torch) {
    Json t = Json::object();
    t["schema"] = "fp8sim-torch-times/1";
    t["torch_version"] = "test";
    Json cfg = Json::object();
    cfg["model"] = "llama2-7b";
    cfg["batch"] = 2;
    cfg["seq"] = 2048;
    Json lt = Json::object();
    lt["median"] = 100.0;
    cfg["layer_fwd_bwd_ms"] = lt;
    Json configs = Json::array();
    configs.push_back(cfg);
    t["configs"] = configs;
    c.torch = t;
  }
  return write_temp("calibration.json", c.to_json().dump());
}

TEST(SpeedReport, ModelledFromACalibrationFile) {
  SpeedOptions o;
  o.model = "llama2-7b";
  o.recipes = registry_plans();
  o.recipe_batch = {{"bf16", 2}, {"te", 2}, {"coat", 4}};
  o.gpus = 4;
  o.table7 = true;
  o.calibration = full_calibration_file(true);
  const SpeedResult res = speed_report(o);
  EXPECT_EQ(res.timing.mode, "modelled");
  EXPECT_TRUE(res.timing.modelled);
  EXPECT_NE(res.timing.statement.find("MODELLED"), std::string::npos);
  EXPECT_EQ(res.timing.device, "Synthetic GPU");
  const auto& recipes = res.recipes;
  ASSERT_EQ(recipes.size(), registry_plans().size());
  const double bf16_tps = recipes[0].tokens_per_s_per_gpu;
  for (const RecipeSpeed& r : recipes) {
    const Json rj = r.to_json();
    for (const char* k : {"recipe", "step_ms", "tokens_per_s_per_gpu", "speedup_vs_bf16"})
      EXPECT_TRUE(rj.contains(k)) << k;
    ASSERT_TRUE(r.speedup_vs_bf16.has_value());
    EXPECT_NEAR(*r.speedup_vs_bf16, r.tokens_per_s_per_gpu / bf16_tps, 1e-12);
    EXPECT_DOUBLE_EQ(r.measured_fraction, 1.0);
  }
  EXPECT_EQ(recipes[2].batch, 4);
  // Table 7: eight rows, ratios where the paper has BF16.
  ASSERT_TRUE(res.table7.has_value());
  const auto& t7 = *res.table7;
  ASSERT_EQ(t7.size(), 8u);
  int with_ratio = 0;
  for (const Table7Row& r : t7)
    if (r.coat_vs_bf16) {
      ++with_ratio;
      const auto& ms = r.methods;
      EXPECT_NEAR(*r.coat_vs_bf16, ms[2].tokens_per_s_per_gpu.value() / ms[0].tokens_per_s_per_gpu.value(), 1e-12);
    }
  EXPECT_EQ(with_ratio, 5);
  EXPECT_NEAR(t7[2].paper_coat_vs_bf16.value(), 11257.0 / 7730.0, 1e-12);  // COAT Table 7
  EXPECT_NEAR(t7[2].paper_te_vs_bf16.value(), 9577.0 / 7730.0, 1e-12);
  // Figure 4(b): four sizes, group scaling = stage-1 extra + stage 2.
  ASSERT_TRUE(res.fig4b.has_value());
  const auto& f = *res.fig4b;
  ASSERT_EQ(f.size(), 4u);
  for (const Fig4bRow& r : f) {
    EXPECT_NEAR(r.group_scaling_ms, r.group_stage1_overhead_ms + r.group_stage2_ms, 1e-12);
    EXPECT_EQ(r.source, "measured");
  }
  // Validation against the (synthetic) PyTorch layer time.
  ASSERT_TRUE(res.validation.has_value());
  const auto& v = res.validation->rows;
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NEAR(v[0].difference, v[0].fp8sim_bf16_layer_ms / 100.0 - 1.0, 1e-12);
  const std::string md = speed_markdown(res);
  EXPECT_NE(md.find("MODELLED"), std::string::npos);
  EXPECT_NE(md.find("Figure 4(b)"), std::string::npos);
  EXPECT_NE(md.find("Table 7"), std::string::npos);
}

TEST(SpeedReport, NoCalibrationAndNoGpuSaysSo) {
  SpeedOptions o;
  o.recipes = registry_plans();
  o.calibration = test::temp_dir() + "/none.json";
  EXPECT_THROW(speed_report(o), Error);
  ::setenv("FP8SIM_CALIBRATION", (test::temp_dir() + "/absent.json").c_str(), 1);
  SpeedOptions d;
  d.recipes = registry_plans();
  try {
    speed_report(d);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no calibration exists"), std::string::npos) << e.what();
  }
  ::unsetenv("FP8SIM_CALIBRATION");
}

TEST(SpeedReport, TorchTimesBecomeAttentionMeasurements) {
  Json t = Json::parse(R"({"schema": "fp8sim-torch-times/1", "torch_version": "2.11",
    "configs": [{"model": "llama2-7b", "batch": 2, "seq": 2048, "heads": 32, "kv_heads": 32, "head_dim": 128,
                 "sdpa_fwd_ms": {"median": 1.5, "min": 1.4, "max": 1.6, "reps": 10},
                 "sdpa_bwd_ms": {"median": 4.0, "min": 3.9, "max": 4.2, "reps": 10}},
                {"model": "llama2-7b", "batch": 64, "seq": 2048, "error": "CUDA out of memory"}],
    "adamw_fused_fp32": {"params": 268435456, "median": 2.2, "min": 2.1, "max": 2.3, "reps": 10}})");
  const auto ms = torch_measurements(t);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(ms[0].key, "attention:bf16,causal,fwd:2x32x32x2048x128");
  EXPECT_EQ(ms[1].key, "attention:bf16,causal,bwd:2x32x32x2048x128");
  EXPECT_DOUBLE_EQ(ms[0].flops, attention_flops(2, 32, 2048, 128, true));
  EXPECT_DOUBLE_EQ(ms[1].flops, 2.5 * ms[0].flops);
  EXPECT_EQ(ms[2].key, "optimizer:adamw_fp32:268435456");
  EXPECT_DOUBLE_EQ(ms[2].median_ms, 2.2);
  t["schema"] = "something else";
  EXPECT_THROW(torch_measurements(t), Error);
  Json bad = Json::parse(R"({"schema": "fp8sim-torch-times/1", "configs": [{"batch": 2, "seq": 2048, "heads": 32,
    "kv_heads": 32, "head_dim": 128, "sdpa_fwd_ms": {"median": -1}, "sdpa_bwd_ms": {"median": 1}}]})");
  EXPECT_THROW(torch_measurements(bad), Error);
}

// SDPA's default backend and SDPA with an explicit mask (transformers under torch.compile) become
// the ",default" and ",masked" variants beside the pinned backend's, where the script timed them.
TEST(SpeedReport, TorchTimesKeepTheDefaultAndMaskedSdpa) {
  const Json t = Json::parse(R"({"schema": "fp8sim-torch-times/1", "torch_version": "2.11",
    "configs": [{"model": "tinyllama-1.1b", "batch": 4, "seq": 2048, "heads": 32, "kv_heads": 4, "head_dim": 64,
                 "sdpa_fwd_ms": {"median": 0.35}, "sdpa_bwd_ms": {"median": 1.0},
                 "sdpa_default_fwd_ms": {"median": 0.19}, "sdpa_default_bwd_ms": {"median": 0.73},
                 "sdpa_masked_fwd_ms": {"median": 0.71}, "sdpa_masked_bwd_ms": {"median": 1.65}}]})");
  const auto ms = torch_measurements(t);
  ASSERT_EQ(ms.size(), 6u);
  EXPECT_EQ(ms[2].key, "attention:bf16,causal,fwd,default:4x32x4x2048x64");
  EXPECT_EQ(ms[4].key, "attention:bf16,causal,fwd,masked:4x32x4x2048x64");
  EXPECT_EQ(ms[5].key, "attention:bf16,causal,bwd,masked:4x32x4x2048x64");
  EXPECT_DOUBLE_EQ(ms[5].median_ms, 1.65);
  EXPECT_NE(ms[4].impl.find("attn_mask"), std::string::npos) << ms[4].impl;
  EXPECT_EQ(ms[4].flops, ms[2].flops);  // the same useful work: the mask costs time, not FLOPs
}

// The collectives priced by scripts/bench_allgather.py's fits: a latency per FSDP unit (each layer
// and the root) and call, the bytes at the fitted bus bandwidth; FP8 codes for the FP8 recipes'
// all-gathers (--fp8-allgather), fp32 reduce-scatters (--reduce-dtype fp32). The BF16 recipe keeps
// BF16 all-gathers.
TEST(SpeedModel, FsdpCommunicationFromFittedCollectives) {
  const ModelShape m = llama7b();
  const PlanOptions o = po(2, 2048, 4);
  Calibration c;
  add_plan(c, build_plan(m, Plan::BF16, o));
  add_plan(c, build_plan(m, Plan::TE, o));
  const std::string path = test::temp_dir() + "/allgather.json";
  std::ofstream(path) << R"({"format": "fp8sim-allgather-bench", "version": 1,
    "machine": {"device": "cuda", "gpu": "GPU X", "backend": "nccl", "world_size": 4},
    "fits": [{"collective": "all_gather", "dtype": "bfloat16", "latency_us": 30, "bus_gbps": 300},
             {"collective": "all_gather", "dtype": "uint8", "latency_us": 25, "bus_gbps": 280},
             {"collective": "reduce_scatter", "dtype": "bfloat16", "latency_us": 40, "bus_gbps": 250},
             {"collective": "reduce_scatter", "dtype": "float32", "latency_us": 45, "bus_gbps": null,
              "note": "no bandwidth"}]})";
  SpeedOptions so;
  so.fsdp_comm = "serial";
  so.comm_fit = load_comm_fit(path);
  EXPECT_EQ(so.comm_fit->gpus, 4);
  EXPECT_EQ(so.comm_fit->device, "GPU X");
  EXPECT_FALSE(so.comm_fit->reduce_scatter_f32.has_value());  // a fit without a bandwidth is not used
  const double P = static_cast<double>(m.params), R = static_cast<double>(m.root_params), PL = P - R;
  const double frac = 3.0 / 4.0, L = m.layers;
  // The root's BF16 all-gather once (one call); each layer's twice (2L calls); L + 1 reduce-scatters.
  const double root_ag = 30e-3 + 2 * R * frac / 300e9 * 1e3;
  const double bf16_ag = root_ag + 2 * (L * 30e-3 + 2 * PL * frac / 300e9 * 1e3);
  const double rs = (L + 1) * 40e-3 + 2 * P * frac / 250e9 * 1e3;
  EXPECT_NEAR(evaluate_recipe(m, {"bf16", Plan::BF16}, o, c, so, false).comm_ms, bf16_ag + rs, 1e-9);
  so.fp8_allgather = true;  // the FP8 recipes' layers as FP8 codes; the root stays BF16
  const double fp8_ag = root_ag + 2 * (L * 25e-3 + 1 * PL * frac / 280e9 * 1e3);
  EXPECT_NEAR(evaluate_recipe(m, {"te", Plan::TE}, o, c, so, false).comm_ms, fp8_ag + rs, 1e-9);
  EXPECT_NEAR(evaluate_recipe(m, {"bf16", Plan::BF16}, o, c, so, false).comm_ms, bf16_ag + rs, 1e-9);
  // Without a fit: --link-gbps, no latency, 4 bytes per parameter reduce-scattered in fp32.
  so.comm_fit.reset();
  so.reduce_dtype = "fp32";
  so.link_gbps = 200;
  EXPECT_NEAR(evaluate_recipe(m, {"te", Plan::TE}, o, c, so, false).comm_ms,
              (2 * 1 * PL + 2 * R + 4 * P) * frac / 200e9 * 1e3, 1e-9);
  // A fit that lacks the collective asked for, or a document of another kind, is refused by name.
  so.comm_fit = load_comm_fit(path);
  so.recipes = {{"bf16", Plan::BF16}};
  so.calibration = full_calibration_file(false);
  try {
    speed_report(so);
    ADD_FAILURE() << "an fp32 reduce-scatter priced without its fit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32 reduce-scatter"), std::string::npos) << e.what();
  }
  std::ofstream(path) << R"({"format": "fp8sim-step-measurement"})";
  EXPECT_THROW(load_comm_fit(path), Error);
  // A CPU run on gloo prices no GPU link.
  std::ofstream(path) << R"({"format": "fp8sim-allgather-bench", "machine": {"device": "cpu", "backend": "gloo",
    "world_size": 2}, "fits": []})";
  try {
    load_comm_fit(path);
    ADD_FAILURE() << "a gloo fit accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'gloo' backend"), std::string::npos) << e.what();
  }
}

TEST(SpeedReport, RejectsNonsenseOptions) {
  SpeedOptions o;
  o.recipes = registry_plans();
  o.calibration = full_calibration_file(false);
  o.fsdp_comm = "sometimes";
  EXPECT_THROW(speed_report(o), Error);
  o.fsdp_comm = "none";
  o.link_gbps = -1;
  EXPECT_THROW(speed_report(o), Error);
  o.link_gbps = 360;
  o.model = "no-such-model";
  EXPECT_THROW(speed_report(o), Error);
}

}  // namespace
}  // namespace fp8sim::speed
