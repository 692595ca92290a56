#pragma once
// The step-time replay's list of kernels: for one transformer layer (forward and backward), the
// work outside the layers (embedding, final norm, LM head, loss) and the once-per-step work
// (weight casts, optimizer), each recipe's exact sequence of kernel launches at concrete shapes.
//
// A KernelOp is one launch (or one library call) with the bytes and flops it must move at
// least; its key() names the kernel and shape, and is what a calibration file stores a measured
// time under. The GPU replay (gpu/speed) runs each distinct key; the CPU model (speed.hpp) sums
// count x time. Nothing here depends on CUDA.
//
// The plans (docs/speed-model.md); a training recipe names the one it runs (sim/recipe,
// "speed_plan"), and a recipe that names none is not modelled:
//  * bf16: every GEMM and non-linear op in BF16 (PyTorch autocast-style Llama layer).
//  * te:   TransformerEngine-style per-tensor delayed scaling: each distinct Linear input is
//          cast once to E4M3 plus a transposed E4M3 copy (one fused cast+transpose pass that also
//          records the amax for the history); each output gradient likewise to E5M2; weights
//          cast+transposed once per step; norms, SiLU, Mul, adds stay BF16.
//  * coat: COAT's data flow as in NVlabs/COAT coat_llama.py: the residual stream is BF16 and
//          also kept as E4M3 with 1x16 group scales; RMSNorm reads the FP8 copy; every per-tensor
//          FP8 tensor is made with Group Scaling (producing kernel writes BF16 + per-group maxima,
//          a stage-2 max over the maxima, then one cast(+transpose) pass); gate/up outputs are
//          quantized 1x16; attention (RoPE + flash) stays BF16.
//  * fp8lm: FP8-LM / MS-AMP O2: TE's per-tensor FP8 GEMMs and casts, plus FP8 weight gradients
//          (just-in-time amax and cast) and FP8 weights cast from the master copy once per step;
//          AdamW with an E4M3 first and an FP16 second moment (power-of-two scales).
//  * deepseek: DeepSeek-V3's fine-grained FP8: every Linear input and output gradient quantized in
//          one pass to E4M3 with 1x128 groups, plus a transposed copy with 1x128 groups along the
//          tokens (the wgrad's K); weights in 128x128 blocks (and their transpose) once per step;
//          cuBLASLt's block-scaled GEMMs (1x128 x 128x128; the wgrad 1x128 x 1x128); AdamW with
//          BF16 moments. Widths and tokens must be multiples of 128.
//  * mxfp8: OCP MXFP8 as a recipe runs it on Hopper, which has no MX tensor cores: every GEMM
//          operand quantized to E4M3 with E8M0 scales in 1x32 blocks along rows and 32x1 blocks
//          along columns (one pass), dequantized to BF16 for a BF16 GEMM (the rowwise copy for
//          fprop and dgrad's gradient, the columnwise copy for the wgrad and dgrad's weight);
//          fp32 AdamW. Widths and tokens must be multiples of 32.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8sim::speed {

// The kernel sequences the replay implements.
enum class Plan { BF16, TE, COAT, FP8LM, DEEPSEEK, MXFP8 };
const char* plan_name(Plan p);
std::optional<Plan> find_plan(std::string_view name);
const std::vector<Plan>& all_plans();
std::string plan_names();  // "bf16, te, coat, ...": every plan, for messages

// The model dimensions the replay needs (filled from models/NAME.json by speed.cpp).
struct ModelShape {
  std::string name;
  int64_t hidden = 0;    // H
  int64_t ffn = 0;       // F: width of one SwiGLU branch
  int64_t layers = 0;    // L
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key/value heads (GQA)
  int64_t head_dim = 0;  // d
  int64_t vocab = 0;     // V
  bool tied = false;     // LM head shares the embedding
  std::string norm = "rmsnorm";
  std::string activation = "swiglu";
  int64_t params = 0;       // total parameters (embedding + layers + norm + head)
  int64_t root_params = 0;  // outside the layers: embedding, final norm, LM head (FSDP's root unit)
};
// Validates sizes (positive, heads dividing, alignment the FP8 GEMMs need); Error on failure.
void check_shape(const ModelShape& m);

enum class Phase { Forward, Backward, Step };
const char* phase_name(Phase p);

enum class Kind {
  Gemm,       // cuBLASLt matmul
  Attention,  // fused causal attention (flash), BF16; timed by PyTorch SDPA
  RmsNormFwd,
  RmsNormBwd,
  SiluMulFwd,
  SiluMulBwd,
  Add,
  RopeFwd,
  RopeBwd,
  CastTranspose,  // bf16 -> fp8 (and/or its transpose) with a per-tensor scale
  Transpose,      // fp8 -> transposed fp8
  QuantizeG16,    // bf16 -> fp8 with 1x16 group scales
  GroupMax,       // bf16 -> per-1x16-group max (stage 1 of Group Scaling, standalone)
  ReduceMax,      // stage 2: max over per-group / per-row maxima -> one fp32
  Amax,           // just-in-time per-tensor max|x| over a whole bf16 tensor
  BlockQuantize,  // bf16 -> fp8 with 1xG / GxG block scales, a row-wise and a column-wise (or transposed) copy
  Dequantize,     // MX fp8 (E8M0 block scales) -> bf16
  CrossEntropy,   // softmax cross-entropy forward + gradient over (tokens, vocab) logits
  EmbeddingFwd,
  EmbeddingBwd,
  Optimizer,  // AdamW step over N parameters
};
const char* kind_name(Kind k);
Kind parse_kind(const std::string& s);

// GEMM operand storage in row-major terms for C(m,n) = A(m,k) * B(k,n):
// "mk.nk" = A stored (m,k), B stored (n,k): both K-contiguous (the only FP8 layout on Hopper,
// cuBLASLt "TN"); a Linear's fprop Y = X W^T. "mk.kn": dgrad dX = dY W. "km.kn": wgrad dW = dY^T X.
struct KernelOp {
  std::string name;  // what it is in the model: "q_proj.fprop", "mlp_norm.fwd", ...
  Phase phase = Phase::Forward;
  Kind kind = Kind::Gemm;
  std::string variant;        // encodings / layout, e.g. "e4m3*e4m3>bf16,mk.nk,fast" or "bf16>bf16"
  std::vector<int64_t> dims;  // Gemm {m,n,k}; row/elementwise {rows, cols}; ReduceMax {n};
                              // Attention {batch, heads, kv_heads, seq, head_dim}; Rope {tokens, heads,
                              // kv_heads, head_dim, seq}; CrossEntropy {tokens, vocab};
                              // Embedding {tokens, hidden, vocab}; Optimizer {params}
  double count = 1;           // launches per optimizer step (layers x grad-accumulation, ...)
  double flops = 0;           // useful floating-point operations (GEMM, attention)
  double bytes = 0;           // fewest bytes through device memory (inputs read once, outputs once)
  bool per_layer = false;     // part of the transformer layer (count includes the layer count)
  std::string note;           // what the kernel does, where it is not obvious
  std::string deviation;      // how the replay differs from the recipe's reference implementation
  std::string key() const;    // kind:variant:dims, the calibration key
};

struct PlanOptions {
  int64_t batch = 1;  // micro-batch per GPU
  int64_t seq = 2048;
  int64_t gpus = 1;                                   // the optimizer state is sharded over this many GPUs (FSDP)
  int64_t grad_accum = 1;                             // micro-batches per optimizer step
  int64_t optimizer_probe_params = int64_t{1} << 28;  // size the optimizer kernel is timed at
};

// Every kernel of one optimizer step of `plan` on one GPU, in execution order.
std::vector<KernelOp> build_plan(const ModelShape& m, Plan plan, const PlanOptions& o);

// The per-tensor max of a rows x cols BF16 tensor two ways (COAT Fig. 4(b)): the just-in-time
// full pass, and Group Scaling (stage 1 = extra cost of writing 1x16 group maxima from the
// producing kernel, measured as add+gmax minus add; stage 2 = max over the maxima).
struct Fig4bOps {
  int64_t rows = 0, cols = 0;
  KernelOp jit_amax, stage2_reduce, producer_plain, producer_with_gmax;
};
Fig4bOps fig4b_ops(int64_t rows, int64_t cols);
// The four sizes of COAT Fig. 4(b) with the paper's H100 times (ms), JIT then Group Scaling.
struct Fig4bPaperRow {
  int64_t rows, cols;
  double jit_ms, group_ms;
};
const std::vector<Fig4bPaperRow>& fig4b_paper();

// Bytes per element of an encoding name used in variants: bf16 2, e4m3/e5m2 1,
// e4m3g16/e5m2g16 1.125 (fp8 + one bf16 scale per 16), gmax 0.125 (one bf16 max per 16),
// e4m3g128 1 + 4/128 (fp32 scale per 1x128), e4m3b128 1 + 4/16384 (fp32 scale per 128x128),
// e4m3mx 1 + 1/32 (E8M0 scale per 32).
double encoding_bytes(const std::string& enc);

}  // namespace fp8sim::speed
