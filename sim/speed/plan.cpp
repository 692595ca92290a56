#include "sim/speed/plan.hpp"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "sim/common/check.hpp"

namespace fp8sim::speed {

namespace {

struct KindName {
  Kind kind;
  const char* name;
};
constexpr std::array<KindName, 21> kKindNames{{
    {Kind::Gemm, "gemm"},
    {Kind::Attention, "attention"},
    {Kind::RmsNormFwd, "rmsnorm_fwd"},
    {Kind::RmsNormBwd, "rmsnorm_bwd"},
    {Kind::SiluMulFwd, "silu_mul_fwd"},
    {Kind::SiluMulBwd, "silu_mul_bwd"},
    {Kind::Add, "add"},
    {Kind::RopeFwd, "rope_fwd"},
    {Kind::RopeBwd, "rope_bwd"},
    {Kind::CastTranspose, "cast_transpose"},
    {Kind::Transpose, "transpose"},
    {Kind::QuantizeG16, "quantize_g16"},
    {Kind::GroupMax, "group_max"},
    {Kind::ReduceMax, "reduce_max"},
    {Kind::Amax, "amax"},
    {Kind::BlockQuantize, "block_quantize"},
    {Kind::Dequantize, "dequantize"},
    {Kind::CrossEntropy, "cross_entropy"},
    {Kind::EmbeddingFwd, "embedding_fwd"},
    {Kind::EmbeddingBwd, "embedding_bwd"},
    {Kind::Optimizer, "optimizer"},
}};

// One Linear layer of the block: y(T, N) = x(T, K) W^T with W stored (N, K) as nn.Linear does.
struct Linear {
  const char* name;
  int64_t in;   // K
  int64_t out;  // N
};

KernelOp mk(std::string name, Phase phase, Kind kind, std::string variant, std::vector<int64_t> dims) {
  KernelOp op;
  op.name = std::move(name);
  op.phase = phase;
  op.kind = kind;
  op.variant = std::move(variant);
  op.dims = std::move(dims);
  return op;
}

// Builds one plan's kernel list. `T` is tokens per micro-batch (batch x seq).
class Builder {
 public:
  Builder(const ModelShape& m, Plan p, const PlanOptions& o)
      : m_(m), plan_(p), o_(o), T_(o.batch * o.seq), Q_(m.heads * m.head_dim), KV_(m.kv_heads * m.head_dim) {}

  std::vector<KernelOp> build() {
    check_granularity();
    const Linear q{"q_proj", m_.hidden, Q_}, k{"k_proj", m_.hidden, KV_}, v{"v_proj", m_.hidden, KV_},
        o{"o_proj", Q_, m_.hidden}, gate{"gate_proj", m_.hidden, m_.ffn}, up{"up_proj", m_.hidden, m_.ffn},
        down{"down_proj", m_.ffn, m_.hidden};
    const std::array<Linear, 7> linears{q, k, v, o, gate, up, down};

    // ---- outside the layers, forward ----
    layer_ = false;
    phase_ = Phase::Forward;
    count_ = static_cast<double>(o_.grad_accum);
    add(mk("embedding.fwd", phase_, Kind::EmbeddingFwd, "bf16", {T_, m_.hidden, m_.vocab}), 0,
        static_cast<double>(T_) * m_.hidden * 4 + T_ * 4.0);
    if (plan_ == Plan::COAT) ew(Kind::QuantizeG16, "coat.quantize_begin", "bf16>e4m3g16", T_, m_.hidden, 2 + 1.125);

    // ---- the layers, forward ----
    layer_ = true;
    count_ = static_cast<double>(o_.grad_accum) * m_.layers;
    switch (plan_) {
      case Plan::BF16:
        forward_bf16(q, k, v, o, gate, up, down);
        break;
      case Plan::TE:
        forward_te(q, k, v, o, gate, up, down);
        break;
      case Plan::COAT:
        forward_coat(q, k, v, o, gate, up, down);
        break;
      case Plan::FP8LM:
        forward_te(q, k, v, o, gate, up, down);
        break;
      case Plan::DEEPSEEK:
      case Plan::MXFP8:
        forward_blocked(q, k, v, o, gate, up, down);
        break;
    }

    // ---- outside, forward tail: final norm, LM head (BF16 in every recipe), loss ----
    layer_ = false;
    count_ = static_cast<double>(o_.grad_accum);
    rmsnorm_fwd_bf16("final_norm.fwd");
    gemm("lm_head.fprop", T_, m_.vocab, m_.hidden, "bf16", "bf16", "mk.nk");
    add(mk("loss.fwd_bwd", phase_, Kind::CrossEntropy, "bf16", {T_, m_.vocab}), 0,
        static_cast<double>(T_) * m_.vocab * 4 + T_ * 8.0,
        "softmax cross-entropy: loss and dlogits in one kernel (two reads of each row, the second from L2)");

    phase_ = Phase::Backward;
    gemm("lm_head.dgrad", T_, m_.hidden, m_.vocab, "bf16", "bf16", "mk.kn");
    gemm("lm_head.wgrad", m_.vocab, m_.hidden, T_, "bf16", "bf16", "km.kn");
    rmsnorm_bwd("final_norm.bwd", "x=bf16");
    if (plan_ == Plan::COAT) {
      // The top layer's incoming gradient as per-tensor E5M2 (COAT's add-backward output format).
      ew(Kind::GroupMax, "coat.grad_begin.gmax", "bf16>gmax", T_, m_.hidden, 2 + 0.125);
      reduce_gmax("coat.grad_begin.scale", T_, m_.hidden);
      ew(Kind::CastTranspose, "coat.grad_begin.cast", "bf16>e5m2", T_, m_.hidden, 3);
    }

    // ---- the layers, backward ----
    layer_ = true;
    count_ = static_cast<double>(o_.grad_accum) * m_.layers;
    switch (plan_) {
      case Plan::BF16:
        backward_bf16(q, k, v, o, gate, up, down);
        break;
      case Plan::TE:
        backward_te(q, k, v, o, gate, up, down);
        break;
      case Plan::COAT:
        backward_coat(q, k, v, o, gate, up, down);
        break;
      case Plan::FP8LM:
        backward_te(q, k, v, o, gate, up, down);
        break;
      case Plan::DEEPSEEK:
      case Plan::MXFP8:
        backward_blocked(q, k, v, o, gate, up, down);
        break;
    }

    layer_ = false;
    count_ = static_cast<double>(o_.grad_accum);
    add(mk("embedding.bwd", phase_, Kind::EmbeddingBwd, "bf16>fp32", {T_, m_.hidden, m_.vocab}), 0,
        static_cast<double>(m_.vocab) * m_.hidden * 4 + static_cast<double>(T_) * m_.hidden * 10 + T_ * 4.0,
        "dense fp32 gradient: zero-fill then atomic scatter-add of the token rows");

    // ---- once per optimizer step ----
    phase_ = Phase::Step;
    if (plan_ != Plan::BF16) {
      layer_ = true;
      count_ = static_cast<double>(m_.layers);  // weights are cast once per step, not per micro-batch
      for (const Linear& l : linears) weight_cast(l);
      if (plan_ == Plan::FP8LM)
        for (const Linear& l : linears) fp8lm_grad_cast(l);
    }
    layer_ = false;
    const int64_t params_per_gpu = (m_.params + o_.gpus - 1) / o_.gpus;
    count_ = static_cast<double>(params_per_gpu) / static_cast<double>(o_.optimizer_probe_params);
    const std::string sharded = fmt::format("on {} params per GPU ({} GPUs), timed on {} params and scaled linearly",
                                            params_per_gpu, o_.gpus, o_.optimizer_probe_params);
    if (plan_ == Plan::FP8LM) {
      // 18 bytes per parameter for the step, 7 more for the amax pass (g, m and v read again).
      add(mk("optimizer.step", phase_, Kind::Optimizer, "adamw_fp8lm", {o_.optimizer_probe_params}), 0,
          o_.optimizer_probe_params * 25.0,
          "AdamW with an E4M3 first moment and an FP16 second moment, power-of-two per-tensor scales, " + sharded);
      deviate(
          "FP8-LM keeps FP16 master weights (with a scale) and FP8 weight gradients; the replay times gpu/optim's "
          "elementwise-state AdamW (an amax pass, then one fused pass) with the fp8lm moments on fp32 params and "
          "grads");
    } else if (plan_ == Plan::DEEPSEEK) {
      add(mk("optimizer.step", phase_, Kind::Optimizer, "adamw_bf16m", {o_.optimizer_probe_params}), 0,
          o_.optimizer_probe_params * 20.0, "fused AdamW with BF16 moments, fp32 master weights and grads, " + sharded);
    } else if (plan_ == Plan::COAT) {
      add(mk("optimizer.step", phase_, Kind::Optimizer, "adamw_fp8_de", {o_.optimizer_probe_params}), 0,
          o_.optimizer_probe_params * 16.375,
          fmt::format("COAT FP8 AdamW with dynamic range expansion on {} params per GPU ({} GPUs), timed on {} "
                      "params and scaled linearly",
                      params_per_gpu, o_.gpus, o_.optimizer_probe_params));
      deviate(
          "the optimizer step is the project's fused FP8 AdamW with DE (gpu/optim), not COAT's own CUDA kernel, "
          "which fp8sim bench times at less than half its rate (docs/benchmarks.md)");
    } else {
      add(mk("optimizer.step", phase_, Kind::Optimizer, "adamw_fp32", {o_.optimizer_probe_params}), 0,
          o_.optimizer_probe_params * 28.0,
          fmt::format("fused AdamW, fp32 master weights and states, on {} params per GPU ({} GPUs), timed on {} "
                      "params and scaled linearly",
                      params_per_gpu, o_.gpus, o_.optimizer_probe_params));
    }
    return std::move(ops_);
  }

 private:
  const ModelShape& m_;
  Plan plan_;
  PlanOptions o_;
  int64_t T_, Q_, KV_;
  Phase phase_ = Phase::Forward;
  double count_ = 1;
  bool layer_ = false;
  std::vector<KernelOp> ops_;

  void add(KernelOp op, double flops, double bytes, std::string note = {}) {
    op.phase = phase_;
    op.count = count_;
    op.per_layer = layer_;
    op.flops = flops;
    op.bytes = bytes;
    op.note = std::move(note);
    ops_.push_back(std::move(op));
  }

  void deviate(std::string what) { ops_.back().deviation = std::move(what); }

  // Elementwise / row-wise op over a rows x cols tensor moving `bytes_per_elem` per element.
  void ew(Kind kind, const std::string& name, const std::string& variant, int64_t rows, int64_t cols,
          double bytes_per_elem, double extra_bytes = 0, std::string note = {}) {
    add(mk(name, phase_, kind, variant, {rows, cols}), 0,
        static_cast<double>(rows) * cols * bytes_per_elem + extra_bytes, std::move(note));
  }

  void gemm(const std::string& name, int64_t m, int64_t n, int64_t k, const std::string& a, const std::string& b,
            const std::string& layout) {
    const bool fp8 = a != "bf16";
    // TransformerEngine's default: fast accumulation for the forward GEMM, periodic promotion
    // ("split accumulator") for the two backward GEMMs, whose E5M2 operands need it more.
    const std::string acc = fp8 ? (name.ends_with(".fprop") ? ",fast" : ",split") : "";
    const double sa = encoding_bytes(a), sb = encoding_bytes(b);
    add(mk(name, phase_, Kind::Gemm, a + "*" + b + ">bf16," + layout + acc, {m, n, k}),
        2.0 * static_cast<double>(m) * n * k,
        static_cast<double>(m) * k * sa + static_cast<double>(n) * k * sb + static_cast<double>(m) * n * 2);
  }

  // A Linear's GEMMs. FP8: every operand K-contiguous (transposed copies made by the casts).
  // COAT's public code runs its FP8 GEMMs with its own Triton kernel; the replay uses cuBLASLt.
  void coat_gemm_deviation() {
    if (plan_ == Plan::COAT)
      deviate("FP8 GEMMs through cuBLASLt (COAT's public code uses its own Triton FP8 GEMM, 128x256x128 tiles)");
  }
  void fprop(const Linear& l, bool fp8) {
    if (fp8) {
      gemm(std::string(l.name) + ".fprop", T_, l.out, l.in, "e4m3", "e4m3", "mk.nk");
      coat_gemm_deviation();
    } else {
      gemm(std::string(l.name) + ".fprop", T_, l.out, l.in, "bf16", "bf16", "mk.nk");
    }
  }
  void dgrad_wgrad(const Linear& l, bool fp8) {
    if (fp8) {
      gemm(std::string(l.name) + ".dgrad", T_, l.in, l.out, "e5m2", "e4m3", "mk.nk");  // dY x (W^T copy)
      coat_gemm_deviation();
      gemm(std::string(l.name) + ".wgrad", l.out, l.in, T_, "e5m2", "e4m3", "mk.nk");  // dY^T copy x X^T copy
      coat_gemm_deviation();
    } else {
      gemm(std::string(l.name) + ".dgrad", T_, l.in, l.out, "bf16", "bf16", "mk.kn");
      gemm(std::string(l.name) + ".wgrad", l.out, l.in, T_, "bf16", "bf16", "km.kn");
    }
  }

  void rmsnorm_fwd_bf16(const std::string& name) {
    ew(Kind::RmsNormFwd, name, "bf16>bf16", T_, m_.hidden, 4, T_ * 4.0 + m_.hidden * 2.0);
  }
  void rmsnorm_bwd(const std::string& name, const std::string& x_enc) {
    const double xb = x_enc == "x=bf16" ? 2 : 1.125;
    ew(Kind::RmsNormBwd, name, x_enc, T_, m_.hidden, xb + 4, T_ * 4.0 + m_.hidden * 4.0,
       "dx plus per-block partial dw, then a column reduction kernel");
  }
  void residual_add(const std::string& name, const std::string& variant) {
    const double out = variant == "bf16>bf16" ? 2 : variant == "bf16>bf16+gmax" ? 2.125 : 3.125;
    ew(Kind::Add, name, variant, T_, m_.hidden, 4 + out);
  }
  void reduce_gmax(const std::string& name, int64_t rows, int64_t cols) {
    const int64_t n = rows * ((cols + 15) / 16);
    add(mk(name, phase_, Kind::ReduceMax, "gmax", {n}), 0, n * 2.0);
  }
  void reduce_rowmax(const std::string& name) { add(mk(name, phase_, Kind::ReduceMax, "rowmax", {T_}), 0, T_ * 4.0); }

  void rope(Phase p) {
    const double table = static_cast<double>(o_.seq) * (m_.head_dim / 2) * 8;
    add(mk(p == Phase::Forward ? "rope.fwd" : "rope.bwd", phase_, p == Phase::Forward ? Kind::RopeFwd : Kind::RopeBwd,
           "bf16", {T_, m_.heads, m_.kv_heads, m_.head_dim, o_.seq}),
        0, static_cast<double>(T_) * (Q_ + KV_) * 4 + table, "in place on q and k, cos/sin table");
  }
  void attention(Phase p) {
    // Causal: half of the S x S score matrix. Forward = 2 matmuls, backward = 5 (FlashAttention's
    // convention), each 2 * S * S * d / 2 per head.
    const double fwd = 2.0 * o_.batch * m_.heads * static_cast<double>(o_.seq) * o_.seq * m_.head_dim;
    const double io = static_cast<double>(T_) * (2.0 * Q_ + 2.0 * KV_) * 2 + 4.0 * o_.batch * m_.heads * o_.seq;
    const bool f = p == Phase::Forward;
    add(mk(f ? "attention.fwd" : "attention.bwd", phase_, Kind::Attention, f ? "bf16,causal,fwd" : "bf16,causal,bwd",
           {o_.batch, m_.heads, m_.kv_heads, o_.seq, m_.head_dim}),
        f ? fwd : 2.5 * fwd, f ? io : 2.0 * io, "BF16 in every recipe; PyTorch SDPA (flash) timed at this shape");
  }

  // ---------------------------------------------------------------- BF16
  void forward_bf16(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                    const Linear& up, const Linear& down) {
    phase_ = Phase::Forward;
    rmsnorm_fwd_bf16("attn_norm.fwd");
    for (const Linear* l : {&q, &k, &v}) fprop(*l, false);
    rope(Phase::Forward);
    attention(Phase::Forward);
    fprop(o, false);
    residual_add("attn_residual.fwd", "bf16>bf16");
    rmsnorm_fwd_bf16("mlp_norm.fwd");
    fprop(gate, false);
    fprop(up, false);
    ew(Kind::SiluMulFwd, "silu_mul.fwd", "bf16>bf16", T_, m_.ffn, 6);
    fprop(down, false);
    residual_add("mlp_residual.fwd", "bf16>bf16");
  }
  void backward_bf16(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                     const Linear& up, const Linear& down) {
    phase_ = Phase::Backward;
    dgrad_wgrad(down, false);
    ew(Kind::SiluMulBwd, "silu_mul.bwd", "bf16>bf16", T_, m_.ffn, 10);
    dgrad_wgrad(gate, false);
    dgrad_wgrad(up, false);
    residual_add("mlp_norm.grad_sum", "bf16>bf16");  // autograd sums the gate and up input grads
    rmsnorm_bwd("mlp_norm.bwd", "x=bf16");
    residual_add("mlp_residual.bwd", "bf16>bf16");  // residual branch + norm branch
    dgrad_wgrad(o, false);
    attention(Phase::Backward);
    rope(Phase::Backward);
    for (const Linear* l : {&q, &k, &v}) dgrad_wgrad(*l, false);
    residual_add("attn_norm.grad_sum_qk", "bf16>bf16");
    residual_add("attn_norm.grad_sum_v", "bf16>bf16");
    rmsnorm_bwd("attn_norm.bwd", "x=bf16");
    residual_add("attn_residual.bwd", "bf16>bf16");
  }

  // ---------------------------------------------------------------- TE
  void te_cast(const std::string& name, int64_t rows, int64_t cols, const char* fmt8) {
    ew(Kind::CastTranspose, name, fmt::format("bf16>{0}+{0}T+amax", fmt8), rows, cols, 4, 4,
       "delayed scaling: scale from the amax history, this pass records the new amax");
  }
  void forward_te(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                  const Linear& up, const Linear& down) {
    phase_ = Phase::Forward;
    rmsnorm_fwd_bf16("attn_norm.fwd");
    te_cast("attn_norm.out.cast", T_, m_.hidden, "e4m3");
    for (const Linear* l : {&q, &k, &v}) fprop(*l, true);
    rope(Phase::Forward);
    attention(Phase::Forward);
    te_cast("attention.out.cast", T_, Q_, "e4m3");
    fprop(o, true);
    residual_add("attn_residual.fwd", "bf16>bf16");
    rmsnorm_fwd_bf16("mlp_norm.fwd");
    te_cast("mlp_norm.out.cast", T_, m_.hidden, "e4m3");
    fprop(gate, true);
    fprop(up, true);
    ew(Kind::SiluMulFwd, "silu_mul.fwd", "bf16>bf16", T_, m_.ffn, 6);
    te_cast("silu_mul.out.cast", T_, m_.ffn, "e4m3");
    fprop(down, true);
    residual_add("mlp_residual.fwd", "bf16>bf16");
  }
  void backward_te(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                   const Linear& up, const Linear& down) {
    phase_ = Phase::Backward;
    te_cast("down_proj.grad.cast", T_, m_.hidden, "e5m2");
    dgrad_wgrad(down, true);
    ew(Kind::SiluMulBwd, "silu_mul.bwd", "bf16>bf16", T_, m_.ffn, 10);
    te_cast("gate_proj.grad.cast", T_, m_.ffn, "e5m2");
    dgrad_wgrad(gate, true);
    te_cast("up_proj.grad.cast", T_, m_.ffn, "e5m2");
    dgrad_wgrad(up, true);
    residual_add("mlp_norm.grad_sum", "bf16>bf16");
    rmsnorm_bwd("mlp_norm.bwd", "x=bf16");
    residual_add("mlp_residual.bwd", "bf16>bf16");
    te_cast("o_proj.grad.cast", T_, m_.hidden, "e5m2");
    dgrad_wgrad(o, true);
    attention(Phase::Backward);
    rope(Phase::Backward);
    for (const Linear* l : {&q, &k, &v}) {
      te_cast(std::string(l->name) + ".grad.cast", T_, l->out, "e5m2");
      dgrad_wgrad(*l, true);
    }
    residual_add("attn_norm.grad_sum_qk", "bf16>bf16");
    residual_add("attn_norm.grad_sum_v", "bf16>bf16");
    rmsnorm_bwd("attn_norm.bwd", "x=bf16");
    residual_add("attn_residual.bwd", "bf16>bf16");
  }

  // ---------------------------------------------------------------- COAT
  // Group Scaling's per-tensor quantization of a BF16 tensor that has no producing kernel of ours
  // (attention output, attention input grads, weights): stage 1 as its own pass, stage 2, cast.
  void coat_quantize_pertensor(const std::string& name, int64_t rows, int64_t cols, const std::string& cast_variant) {
    ew(Kind::GroupMax, name + ".gmax", "bf16>gmax", rows, cols, 2.125);
    reduce_gmax(name + ".scale", rows, cols);
    ew(Kind::CastTranspose, name + ".cast", cast_variant, rows, cols,
       cast_variant.find('+') != std::string::npos ? 4 : 3);
  }
  void forward_coat(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                    const Linear& up, const Linear& down) {
    phase_ = Phase::Forward;
    for (const char* norm : {"attn_norm", "mlp_norm"}) {
      const std::string n = norm;
      ew(Kind::RmsNormFwd, n + ".fwd", "e4m3g16>bf16+rowmax", T_, m_.hidden, 1.125 + 2, T_ * 8.0 + m_.hidden * 2.0,
         "reads the block input's E4M3 1x16 copy; writes BF16 plus per-row maxima (Group Scaling stage 1)");
      reduce_rowmax(n + ".out.scale");
      ew(Kind::CastTranspose, n + ".out.cast", "bf16>e4m3+e4m3T", T_, m_.hidden, 4);
      if (n == "attn_norm") {
        for (const Linear* l : {&q, &k, &v}) fprop(*l, true);
        rope(Phase::Forward);
        attention(Phase::Forward);
        coat_quantize_pertensor("attention.out", T_, Q_, "bf16>e4m3");
        fprop(o, true);
        ew(Kind::Add, "attn_residual.fwd", "bf16>bf16+e4m3g16", T_, m_.hidden, 4 + 3.125);
      }
    }
    fprop(gate, true);
    fprop(up, true);
    const char* epilogue = "COAT quantizes gate/up outputs 1x16 in its Triton GEMM's epilogue; here a separate pass";
    ew(Kind::QuantizeG16, "gate_proj.out.quant", "bf16>e4m3g16", T_, m_.ffn, 3.125);
    deviate(epilogue);
    ew(Kind::QuantizeG16, "up_proj.out.quant", "bf16>e4m3g16", T_, m_.ffn, 3.125);
    deviate(epilogue);
    ew(Kind::SiluMulFwd, "silu_mul.fwd", "e4m3g16>e4m3g16+bf16+gmax", T_, m_.ffn, 5.5);
    deviate("one fused SiLU*Mul kernel (COAT runs SiLU and Mul as two kernels, re-reading the SiLU output)");
    reduce_gmax("silu_mul.out.scale", T_, m_.ffn);
    ew(Kind::CastTranspose, "silu_mul.out.cast", "bf16>e4m3+e4m3T", T_, m_.ffn, 4);
    fprop(down, true);
    ew(Kind::Add, "mlp_residual.fwd", "bf16>bf16+e4m3g16", T_, m_.hidden, 4 + 3.125);
  }
  void backward_coat(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                     const Linear& up, const Linear& down) {
    phase_ = Phase::Backward;
    ew(Kind::Transpose, "down_proj.grad.transpose", "e5m2>e5m2T", T_, m_.hidden, 2);
    dgrad_wgrad(down, true);
    ew(Kind::SiluMulBwd, "silu_mul.bwd", "e4m3g16>bf16+gmax", T_, m_.ffn, 8.5);
    deviate("one fused SiLU*Mul backward kernel (COAT runs Mul-backward and SiLU-backward as two kernels)");
    for (const char* g : {"gate_proj", "up_proj"}) {
      reduce_gmax(std::string(g) + ".grad.scale", T_, m_.ffn);
      ew(Kind::CastTranspose, std::string(g) + ".grad.cast", "bf16>e5m2+e5m2T", T_, m_.ffn, 4);
    }
    dgrad_wgrad(gate, true);
    dgrad_wgrad(up, true);
    residual_add("mlp_norm.grad_sum", "bf16>bf16");
    rmsnorm_bwd("mlp_norm.bwd", "x=e4m3g16");
    residual_add("mlp_residual.bwd", "bf16>bf16+gmax");
    reduce_gmax("mlp_residual.bwd.scale", T_, m_.hidden);
    ew(Kind::CastTranspose, "mlp_residual.bwd.cast", "bf16>e5m2", T_, m_.hidden, 3);
    ew(Kind::Transpose, "o_proj.grad.transpose", "e5m2>e5m2T", T_, m_.hidden, 2);
    ew(Kind::CastTranspose, "attention.out.recast", "bf16>e4m3T", T_, Q_, 3, 0,
       "the transposed E4M3 attention output re-made from the saved BF16 tensor (COAT saves memory this way)");
    dgrad_wgrad(o, true);
    attention(Phase::Backward);
    rope(Phase::Backward);
    for (const Linear* l : {&q, &k, &v})
      coat_quantize_pertensor(std::string(l->name) + ".grad", T_, l->out, "bf16>e5m2+e5m2T");
    for (const Linear* l : {&q, &k, &v}) dgrad_wgrad(*l, true);
    residual_add("attn_norm.grad_sum_qk", "bf16>bf16");
    residual_add("attn_norm.grad_sum_v", "bf16>bf16");
    rmsnorm_bwd("attn_norm.bwd", "x=e4m3g16");
    residual_add("attn_residual.bwd", "bf16>bf16+gmax");
    reduce_gmax("attn_residual.bwd.scale", T_, m_.hidden);
    ew(Kind::CastTranspose, "attn_residual.bwd.cast", "bf16>e5m2", T_, m_.hidden, 3);
  }

  // Once per step per weight: the FP8 copy and its transpose (for dgrad).
  void weight_cast(const Linear& l) {
    const std::string name = std::string(l.name) + ".weight";
    switch (plan_) {
      case Plan::TE:
        ew(Kind::CastTranspose, name + ".cast", "bf16>e4m3+e4m3T+amax", l.out, l.in, 4, 4,
           "delayed scaling: scale from the amax history, this pass records the new amax");
        break;
      case Plan::FP8LM:
        ew(Kind::Amax, name + ".amax", "bf16", l.out, l.in, 2);
        ew(Kind::CastTranspose, name + ".cast", "bf16>e4m3+e4m3T", l.out, l.in, 4, 0,
           "the FP8 weight (power-of-two scale from the just-in-time amax) and its transpose");
        deviate(
            "FP8-LM casts its FP16 master weights; the replay casts a 16-bit tensor with the BF16 kernel "
            "(the same bytes)");
        break;
      case Plan::DEEPSEEK:
        block_quantize(name + ".quant", "bf16>e4m3b128+e4m3b128T", l.out, l.in,
                       "128x128 blocks and the transposed copy (dgrad's operand), one pass");
        break;
      case Plan::MXFP8:
        block_quantize(name + ".quant", "bf16>e4m3mx+e4m3mxC", l.out, l.in,
                       "1x32 blocks along K (fprop) and 32x1 along N (dgrad), E8M0 scales, one pass");
        mx_dequantize(name + ".dequant_row", "e4m3mx>bf16", l.out, l.in);
        mx_dequantize(name + ".dequant_col", "e4m3mxC>bf16", l.out, l.in);
        break;
      default:
        coat_quantize_pertensor(name, l.out, l.in, "bf16>e4m3+e4m3T");
        break;
    }
  }

  // FP8-LM: once per step per weight gradient, the FP8 copy it all-reduces (just-in-time scale).
  void fp8lm_grad_cast(const Linear& l) {
    const std::string name = std::string(l.name) + ".weight_grad";
    ew(Kind::Amax, name + ".amax", "bf16", l.out, l.in, 2);
    ew(Kind::CastTranspose, name + ".cast", "bf16>e4m3", l.out, l.in, 3, 0,
       "the FP8 weight gradient (power-of-two scale) FP8-LM all-reduces and the optimizer reads");
  }

  // ---------------------------------------------------------------- DeepSeek-V3 and MXFP8
  // The widths and tokens their groups need: whole 1x128 groups and 128x128 blocks (DeepSeek),
  // whole 1x32 and 32x1 blocks (MXFP8).
  void check_granularity() const {
    const int64_t g = plan_ == Plan::DEEPSEEK ? 128 : plan_ == Plan::MXFP8 ? 32 : 0;
    if (!g) return;
    for (auto [what, v] : {std::pair{"hidden_size", m_.hidden}, std::pair{"intermediate_size", m_.ffn},
                           std::pair{"heads x head_dim", Q_}, std::pair{"kv_heads x head_dim", KV_}})
      FP8SIM_REQUIRE(v % g == 0, "model '{}': {} = {} is not a multiple of {}, which the {} plan's blocks need",
                     m_.name, what, v, g, plan_name(plan_));
    if (T_ % g != 0)
      throw UsageError(
          fmt::format("--batch x --seq = {} tokens is not a multiple of {}, which the {} plan's blocks "
                      "along the tokens (the wgrad's K) need",
                      T_, g, plan_name(plan_)));
  }
  void block_quantize(const std::string& name, const std::string& variant, int64_t rows, int64_t cols,
                      std::string note) {
    const double scales = variant.find("b128") != std::string::npos   ? 8.0 / (128 * 128)
                          : variant.find("g128") != std::string::npos ? 8.0 / 128
                                                                      : 2.0 / 32;
    ew(Kind::BlockQuantize, name, variant, rows, cols, 2 + 2 + scales, 0, std::move(note));
  }
  void mx_dequantize(const std::string& name, const std::string& variant, int64_t rows, int64_t cols) {
    ew(Kind::Dequantize, name, variant, rows, cols, 1 + 1.0 / 32 + 2);
    deviate(
        "Hopper has no MXFP8 tensor cores: the GEMM runs in BF16 on operands dequantized from MXFP8 (on Blackwell "
        "it reads the MX operands directly)");
  }
  // A Linear input or output gradient: DeepSeek's 1x128 copy and its transpose, or MXFP8's
  // row-wise and column-wise blocks (then the row-wise copy dequantized for the GEMM that uses it now).
  void quantize_activation(const std::string& name, int64_t cols) {
    if (plan_ == Plan::DEEPSEEK) {
      block_quantize(name, "bf16>e4m3g128+e4m3g128T", T_, cols,
                     "1x128 groups and the transposed copy with 1x128 groups along the tokens (the wgrad's operand), "
                     "one pass");
    } else {
      block_quantize(name, "bf16>e4m3mx+e4m3mxC", T_, cols,
                     "1x32 blocks along the row and 32x1 along the column, E8M0 scales, one pass");
      mx_dequantize(name + ".dequant_row", "e4m3mx>bf16", T_, cols);
    }
  }
  // fprop on the quantized input: DeepSeek's block-scaled FP8 GEMM, or MXFP8's BF16 GEMM.
  void fprop_blocked(const Linear& l) {
    if (plan_ == Plan::DEEPSEEK) gemm_block(std::string(l.name) + ".fprop", T_, l.out, l.in, "e4m3g128", "e4m3b128");
    else fprop(l, false);
  }
  // dgrad and wgrad. DeepSeek: dX = dY (1x128 along N) x W^T copy (128x128), dW = dY^T copy x X^T copy
  // (both 1x128 along the tokens). MXFP8: the column-wise copies of X and dY dequantized for the wgrad
  // (X's once per distinct input, by `dequant_input`), BF16 GEMMs.
  void dgrad_wgrad_blocked(const Linear& l, bool dequant_input) {
    const std::string n = l.name;
    if (plan_ == Plan::DEEPSEEK) {
      gemm_block(n + ".dgrad", T_, l.in, l.out, "e4m3g128", "e4m3b128");
      gemm_block(n + ".wgrad", l.out, l.in, T_, "e4m3g128", "e4m3g128");
      return;
    }
    mx_dequantize(n + ".grad.dequant_col", "e4m3mxC>bf16", T_, l.out);
    if (dequant_input) mx_dequantize(n + ".input.dequant_col", "e4m3mxC>bf16", T_, l.in);
    dgrad_wgrad(l, false);
  }
  void gemm_block(const std::string& name, int64_t m, int64_t n, int64_t k, const std::string& a,
                  const std::string& b) {
    add(mk(name, phase_, Kind::Gemm, a + "*" + b + ">bf16,mk.nk", {m, n, k}), 2.0 * static_cast<double>(m) * n * k,
        static_cast<double>(m) * k * encoding_bytes(a) + static_cast<double>(n) * k * encoding_bytes(b) +
            static_cast<double>(m) * n * 2);
  }
  void forward_blocked(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                       const Linear& up, const Linear& down) {
    phase_ = Phase::Forward;
    rmsnorm_fwd_bf16("attn_norm.fwd");
    quantize_activation("attn_norm.out.quant", m_.hidden);
    for (const Linear* l : {&q, &k, &v}) fprop_blocked(*l);
    rope(Phase::Forward);
    attention(Phase::Forward);
    quantize_activation("attention.out.quant", Q_);
    fprop_blocked(o);
    residual_add("attn_residual.fwd", "bf16>bf16");
    rmsnorm_fwd_bf16("mlp_norm.fwd");
    quantize_activation("mlp_norm.out.quant", m_.hidden);
    fprop_blocked(gate);
    fprop_blocked(up);
    ew(Kind::SiluMulFwd, "silu_mul.fwd", "bf16>bf16", T_, m_.ffn, 6);
    quantize_activation("silu_mul.out.quant", m_.ffn);
    fprop_blocked(down);
    residual_add("mlp_residual.fwd", "bf16>bf16");
  }
  void backward_blocked(const Linear& q, const Linear& k, const Linear& v, const Linear& o, const Linear& gate,
                        const Linear& up, const Linear& down) {
    phase_ = Phase::Backward;
    quantize_activation("down_proj.grad.quant", m_.hidden);
    dgrad_wgrad_blocked(down, true);
    ew(Kind::SiluMulBwd, "silu_mul.bwd", "bf16>bf16", T_, m_.ffn, 10);
    quantize_activation("gate_proj.grad.quant", m_.ffn);
    dgrad_wgrad_blocked(gate, true);
    quantize_activation("up_proj.grad.quant", m_.ffn);
    dgrad_wgrad_blocked(up, false);  // the same input as gate_proj
    residual_add("mlp_norm.grad_sum", "bf16>bf16");
    rmsnorm_bwd("mlp_norm.bwd", "x=bf16");
    residual_add("mlp_residual.bwd", "bf16>bf16");
    quantize_activation("o_proj.grad.quant", m_.hidden);
    dgrad_wgrad_blocked(o, true);
    attention(Phase::Backward);
    rope(Phase::Backward);
    for (const Linear* l : {&q, &k, &v}) {
      quantize_activation(std::string(l->name) + ".grad.quant", l->out);
      dgrad_wgrad_blocked(*l, l == &q);  // q, k and v share their input
    }
    residual_add("attn_norm.grad_sum_qk", "bf16>bf16");
    residual_add("attn_norm.grad_sum_v", "bf16>bf16");
    rmsnorm_bwd("attn_norm.bwd", "x=bf16");
    residual_add("attn_residual.bwd", "bf16>bf16");
  }
};

}  // namespace

const char* plan_name(Plan p) {
  switch (p) {
    case Plan::BF16:
      return "bf16";
    case Plan::TE:
      return "te";
    case Plan::COAT:
      return "coat";
    case Plan::FP8LM:
      return "fp8lm";
    case Plan::DEEPSEEK:
      return "deepseek";
    case Plan::MXFP8:
      return "mxfp8";
  }
  return "?";
}

std::optional<Plan> find_plan(std::string_view name) {
  for (Plan p : all_plans())
    if (name == plan_name(p)) return p;
  return std::nullopt;
}

const std::vector<Plan>& all_plans() {
  static const std::vector<Plan> plans{Plan::BF16, Plan::TE, Plan::COAT, Plan::FP8LM, Plan::DEEPSEEK, Plan::MXFP8};
  return plans;
}

std::string plan_names() {
  std::string out;
  for (Plan p : all_plans()) out += (out.empty() ? "" : ", ") + std::string(plan_name(p));
  return out;
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forward:
      return "fwd";
    case Phase::Backward:
      return "bwd";
    case Phase::Step:
      return "step";
  }
  return "?";
}

const char* kind_name(Kind k) {
  for (const auto& kn : kKindNames)
    if (kn.kind == k) return kn.name;
  return "?";
}

Kind parse_kind(const std::string& s) {
  for (const auto& kn : kKindNames)
    if (s == kn.name) return kn.kind;
  throw Error(fmt::format("unknown kernel kind '{}'", s));
}

std::string KernelOp::key() const {
  std::string d;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) d += 'x';
    d += std::to_string(dims[i]);
  }
  return fmt::format("{}:{}:{}", kind_name(kind), variant, d);
}

double encoding_bytes(const std::string& enc) {
  if (enc == "bf16") return 2;
  if (enc == "e4m3" || enc == "e5m2") return 1;
  if (enc == "e4m3g16" || enc == "e5m2g16") return 1.125;
  if (enc == "gmax") return 0.125;
  if (enc == "e4m3g128") return 1 + 4.0 / 128;
  if (enc == "e4m3b128") return 1 + 4.0 / (128 * 128);
  if (enc == "e4m3mx") return 1 + 1.0 / 32;
  if (enc == "fp32") return 4;
  throw Error(fmt::format("unknown encoding '{}'", enc));
}

void check_shape(const ModelShape& m) {
  FP8SIM_REQUIRE(
      m.hidden > 0 && m.ffn > 0 && m.layers > 0 && m.heads > 0 && m.kv_heads > 0 && m.head_dim > 0 && m.vocab > 0,
      "model '{}': every size must be positive", m.name);
  FP8SIM_REQUIRE(m.heads % m.kv_heads == 0, "model '{}': {} query heads are not a multiple of {} kv heads", m.name,
                 m.heads, m.kv_heads);
  FP8SIM_REQUIRE(m.activation == "swiglu",
                 "model '{}': the speed replay covers SwiGLU MLPs only (this model uses '{}')", m.name, m.activation);
  // cuBLASLt's FP8 GEMMs want every leading dimension a multiple of 16; the 1x16 group kernels
  // want rows that are whole groups.
  for (auto [what, v] :
       {std::pair{"hidden_size", m.hidden}, std::pair{"intermediate_size", m.ffn},
        std::pair{"heads x head_dim", m.heads * m.head_dim}, std::pair{"kv_heads x head_dim", m.kv_heads * m.head_dim}})
    FP8SIM_REQUIRE(v % 16 == 0, "model '{}': {} = {} is not a multiple of 16, which the FP8 GEMMs and 1x16 groups need",
                   m.name, what, v);
  FP8SIM_REQUIRE(m.head_dim % 2 == 0, "model '{}': head_dim {} must be even for RoPE", m.name, m.head_dim);
}

std::vector<KernelOp> build_plan(const ModelShape& m, Plan plan, const PlanOptions& o) {
  check_shape(m);
  FP8SIM_REQUIRE(o.batch > 0 && o.seq > 0 && o.gpus > 0 && o.grad_accum > 0 && o.optimizer_probe_params > 0,
                 "batch, seq, gpus and grad-accum must be positive (got {}, {}, {}, {})", o.batch, o.seq, o.gpus,
                 o.grad_accum);
  // The user's numbers, so bad usage (exit 2) rather than bad data.
  if (o.batch * o.seq % 16 != 0)
    throw UsageError(
        fmt::format("--batch x --seq = {} tokens is not a multiple of 16, which the FP8 wgrad GEMM (K = tokens) needs",
                    o.batch * o.seq));
  return Builder(m, plan, o).build();
}

Fig4bOps fig4b_ops(int64_t rows, int64_t cols) {
  Fig4bOps f;
  f.rows = rows;
  f.cols = cols;
  const double n = static_cast<double>(rows) * cols;
  f.jit_amax = mk("fig4b.jit_amax", Phase::Forward, Kind::Amax, "bf16", {rows, cols});
  f.jit_amax.bytes = n * 2;
  const int64_t groups = rows * ((cols + 15) / 16);
  f.stage2_reduce = mk("fig4b.group_scaling.stage2", Phase::Forward, Kind::ReduceMax, "gmax", {groups});
  f.stage2_reduce.bytes = groups * 2.0;
  f.producer_plain = mk("fig4b.producer", Phase::Forward, Kind::Add, "bf16>bf16", {rows, cols});
  f.producer_plain.bytes = n * 6;
  f.producer_with_gmax = mk("fig4b.producer+gmax", Phase::Forward, Kind::Add, "bf16>bf16+gmax", {rows, cols});
  f.producer_with_gmax.bytes = n * 6.125;
  return f;
}

const std::vector<Fig4bPaperRow>& fig4b_paper() {
  // COAT (Xi et al., ICLR 2025) Fig. 4(b), H100.
  static const std::vector<Fig4bPaperRow> rows{
      {11008, 16384, 1.37, 0.10}, {11008, 8192, 0.89, 0.08}, {4096, 16384, 0.55, 0.07}, {4096, 8192, 0.32, 0.06}};
  return rows;
}

}  // namespace fp8sim::speed
