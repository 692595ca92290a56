// The speed replay's timing driver (see replay.hpp). Compiled by the host compiler: formatting
// and errors live here, kernels in kernels.cu.
#include "gpu/speed/replay.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "gpu/common/buffer.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/common/device.hpp"
#include "gpu/gemm/cublaslt.hpp"
#include "gpu/optim/adamw.hpp"
#include "gpu/speed/kernels.hpp"
#include "sim/common/check.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/optim/state_recipe.hpp"
#include "sim/speed/kernel_versions.hpp"

namespace fp8sim::gpu::speed {

using fp8sim::speed::Calibration;
using fp8sim::speed::KernelOp;
using fp8sim::speed::Kind;
using fp8sim::speed::Measurement;

namespace {

constexpr const char* kSpeedKernel = "fp8sim speed kernel (gpu/speed/kernels.cu)";

// Device buffers by slot, grown on demand and reused across kernels (no allocation while timing).
class Pool {
 public:
  template <class T>
  T* get(size_t slot, size_t count) {
    if (slots_.size() <= slot) slots_.resize(slot + 1);
    const size_t bytes = std::max<size_t>(count * sizeof(T), 256);
    if (slots_[slot].size() < bytes) {
      slots_[slot].release();  // free first: the largest kernels need most of the memory
      slots_[slot].allocate(bytes);
    }
    return reinterpret_cast<T*>(slots_[slot].get());
  }

 private:
  std::vector<DeviceBuffer<uint8_t>> slots_;
};

struct Prepared {
  std::function<void()> launch;
  std::string impl;
  std::string note;
};

// A GEMM operand's encoding: its format and how it is scaled ("e4m3g128": 1x128 groups along K,
// "e4m3b128": 128x128 blocks; otherwise per tensor, or none for bf16).
struct Operand {
  Format format = Format::BF16;
  char blocks = 0;  // 0, 'g' (1x128 groups) or 'b' (128x128 blocks)
};
Operand parse_operand(const std::string& s) {
  if (s == "bf16") return {Format::BF16, 0};
  if (s == "e4m3") return {Format::E4M3, 0};
  if (s == "e5m2") return {Format::E5M2, 0};
  if (s == "e4m3g128") return {Format::E4M3, 'g'};
  if (s == "e4m3b128") return {Format::E4M3, 'b'};
  throw Error(fmt::format("speed replay: unknown GEMM operand type '{}'", s));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

void require(bool launched, const KernelOp& op) {
  FP8SIM_REQUIRE(launched, "speed replay: kernel '{}' does not support this shape", op.key());
}

class Replayer {
 public:
  explicit Replayer(cudaStream_t s) : s_(s) {
    FP8SIM_CUDA_CHECK(cudaMalloc(&dev_scalars_, 16 * sizeof(float)));
    // Per-tensor scales of 1 for the FP8 GEMMs; amax inputs of 4 for the casts (a typical
    // activation magnitude: the value does not change the work).
    const float host[16] = {1, 1, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    FP8SIM_CUDA_CHECK(cudaMemcpy(dev_scalars_, host, sizeof host, cudaMemcpyHostToDevice));
  }
  ~Replayer() {
    if (dev_scalars_) cudaFree(dev_scalars_);
  }
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // The launch of one kernel of the plan on buffers of its shape (pooled, filled with data of a
  // typical magnitude); throws for a kernel the replay does not run.
  Prepared prepare(const KernelOp& op) {
    switch (op.kind) {
      case Kind::Gemm:
        return prepare_gemm(op, dev_scalars_);
      case Kind::Attention:
        throw Error(
            fmt::format("speed replay: attention '{}' is timed by PyTorch (scripts/torch_layer_time.py)", op.key()));
      case Kind::RmsNormFwd:
        return prepare_rmsnorm_fwd(op);
      case Kind::RmsNormBwd:
        return prepare_rmsnorm_bwd(op);
      case Kind::SiluMulFwd:
        return prepare_silu_mul_fwd(op);
      case Kind::SiluMulBwd:
        return prepare_silu_mul_bwd(op);
      case Kind::Add:
        return prepare_add(op);
      case Kind::RopeFwd:
      case Kind::RopeBwd:
        return prepare_rope(op);
      case Kind::CastTranspose:
        return prepare_cast_transpose(op);
      case Kind::Transpose:
        return prepare_transpose(op);
      case Kind::QuantizeG16:
        return prepare_quantize_g16(op);
      case Kind::GroupMax:
        return prepare_group_max(op);
      case Kind::ReduceMax:
        return prepare_reduce_max(op);
      case Kind::Amax:
        return prepare_amax(op);
      case Kind::BlockQuantize:
        return prepare_block_quantize(op);
      case Kind::Dequantize:
        return prepare_dequantize(op);
      case Kind::CrossEntropy:
        return prepare_cross_entropy(op);
      case Kind::EmbeddingFwd:
      case Kind::EmbeddingBwd:
        return prepare_embedding(op);
      case Kind::Optimizer:
        return prepare_optimizer(op);
    }
    unknown(op);
  }

 private:
  cudaStream_t s_;
  Pool pool_;
  std::unique_ptr<CublasLt> lt_;
  std::vector<GemmPlan> plans_;   // kept alive: run() needs them
  float* dev_scalars_ = nullptr;  // [0, 2): scales of 1; [2, 4): amax inputs of 4; 4: amax out; 5: max out
  uint64_t seed_ = 1;

  [[noreturn]] static void unknown(const KernelOp& op) {
    throw Error(fmt::format("speed replay: no kernel for '{}'", op.key()));
  }
  uint16_t* bf16(size_t slot, int64_t n, float stddev = 1.0f) {
    uint16_t* p = pool_.get<uint16_t>(slot, n);
    fill_bf16_normal(p, n, seed_++, stddev, s_);
    return p;
  }
  uint8_t* codes(size_t slot, int64_t n, bool e5m2) {
    uint8_t* p = pool_.get<uint8_t>(slot, n);
    fill_fp8_codes(p, n, seed_++, e5m2, s_);
    return p;
  }
  uint16_t* scales(size_t slot, int64_t n) {
    uint16_t* p = pool_.get<uint16_t>(slot, n);
    fill_bf16_scales(p, n, seed_++, s_);
    return p;
  }
  float* uniform(size_t slot, int64_t n, float lo, float hi) {
    float* p = pool_.get<float>(slot, n);
    fill_f32_uniform(p, n, seed_++, lo, hi, s_);
    return p;
  }

  // Dimension i of the op, which must exist and be positive.
  static int64_t dim(const KernelOp& op, size_t i) {
    const auto& d = op.dims;
    FP8SIM_REQUIRE(i < d.size() && d[i] > 0, "speed replay: kernel '{}' lacks dimension {}", op.key(), i);
    return d[i];
  }

  // One prepare_<kind> per kernel kind (prepare's steps): the op's buffers from the pool, filled
  // in a fixed order (the fills draw seeds in sequence), and the launch of its variant; an
  // unknown variant throws.
  Prepared prepare_rmsnorm_fwd(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t rows = dim(op, 0), cols = dim(op, 1);
    FP8SIM_REQUIRE(rmsnorm_supported(cols), "speed replay: RMSNorm width {} unsupported", cols);
    uint16_t* w = bf16(1, cols, 1.0f);
    uint16_t* y = pool_.get<uint16_t>(2, rows * cols);
    float* rstd = pool_.get<float>(3, rows);
    if (op.variant == "bf16>bf16") {
      uint16_t* x = bf16(0, rows * cols);
      p.launch = [=, this] { require(rmsnorm_fwd_bf16(x, w, y, rstd, rows, cols, 1e-5f, s_), op); };
    } else if (op.variant == "e4m3g16>bf16+rowmax") {
      uint8_t* xq = codes(0, rows * cols, false);
      uint16_t* xs = scales(4, rows * cols / 16);
      float* rowmax = pool_.get<float>(5, rows);
      p.launch = [=, this] { require(rmsnorm_fwd_g16(xq, xs, w, y, rstd, rowmax, rows, cols, 1e-5f, s_), op); };
    } else {
      unknown(op);
    }
    return p;
  }

  Prepared prepare_rmsnorm_bwd(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t rows = dim(op, 0), cols = dim(op, 1);
    FP8SIM_REQUIRE(rmsnorm_supported(cols), "speed replay: RMSNorm width {} unsupported", cols);
    uint16_t* w = bf16(1, cols, 1.0f);
    float* rstd = uniform(3, rows, 0.5f, 2.0f);
    uint16_t* dy = bf16(6, rows * cols);
    uint16_t* dx = pool_.get<uint16_t>(2, rows * cols);
    float* part = pool_.get<float>(7, static_cast<size_t>(rmsnorm_bwd_partial_rows(rows)) * cols);
    float* dw = pool_.get<float>(8, cols);
    if (op.variant == "x=bf16") {
      uint16_t* x = bf16(0, rows * cols);
      p.launch = [=, this] { require(rmsnorm_bwd_bf16(x, w, rstd, dy, dx, part, dw, rows, cols, s_), op); };
    } else if (op.variant == "x=e4m3g16") {
      uint8_t* xq = codes(0, rows * cols, false);
      uint16_t* xs = scales(4, rows * cols / 16);
      p.launch = [=, this] { require(rmsnorm_bwd_g16(xq, xs, w, rstd, dy, dx, part, dw, rows, cols, s_), op); };
    } else {
      unknown(op);
    }
    return p;
  }

  Prepared prepare_silu_mul_fwd(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0) * dim(op, 1);
    uint16_t* m = pool_.get<uint16_t>(2, n);
    if (op.variant == "bf16>bf16") {
      uint16_t *g = bf16(0, n), *u = bf16(1, n);
      p.launch = [=, this] { require(silu_mul_fwd_bf16(g, u, m, n, s_), op); };
    } else if (op.variant == "e4m3g16>e4m3g16+bf16+gmax") {
      uint8_t *gq = codes(0, n, false), *uq = codes(1, n, false);
      uint16_t *gs = scales(4, n / 16), *us = scales(5, n / 16);
      uint8_t* sq = pool_.get<uint8_t>(6, n);
      uint16_t* ss = pool_.get<uint16_t>(7, n / 16);
      uint16_t* mg = pool_.get<uint16_t>(8, n / 16);
      p.launch = [=, this] { require(silu_mul_fwd_g16(gq, gs, uq, us, sq, ss, m, mg, n, s_), op); };
    } else {
      unknown(op);
    }
    return p;
  }

  Prepared prepare_silu_mul_bwd(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0) * dim(op, 1);
    uint16_t* dm = bf16(2, n);
    uint16_t *dg = pool_.get<uint16_t>(3, n), *du = pool_.get<uint16_t>(6, n);
    if (op.variant == "bf16>bf16") {
      uint16_t *g = bf16(0, n), *u = bf16(1, n);
      p.launch = [=, this] { require(silu_mul_bwd_bf16(g, u, dm, dg, du, n, s_), op); };
    } else if (op.variant == "e4m3g16>bf16+gmax") {
      uint8_t *gq = codes(0, n, false), *uq = codes(1, n, false);
      uint16_t *gs = scales(4, n / 16), *us = scales(5, n / 16);
      uint16_t *dgm = pool_.get<uint16_t>(7, n / 16), *dum = pool_.get<uint16_t>(8, n / 16);
      p.launch = [=, this] { require(silu_mul_bwd_g16(gq, gs, uq, us, dm, dg, dgm, du, dum, n, s_), op); };
    } else {
      unknown(op);
    }
    return p;
  }

  Prepared prepare_add(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0) * dim(op, 1);
    uint16_t *a = bf16(0, n), *b = bf16(1, n), *c = pool_.get<uint16_t>(2, n);
    if (op.variant == "bf16>bf16") {
      p.launch = [=, this] { require(add_bf16(a, b, c, n, s_), op); };
    } else if (op.variant == "bf16>bf16+e4m3g16") {
      uint8_t* cq = pool_.get<uint8_t>(3, n);
      uint16_t* cs = pool_.get<uint16_t>(4, n / 16);
      p.launch = [=, this] { require(add_bf16_g16(a, b, c, cq, cs, n, s_), op); };
    } else if (op.variant == "bf16>bf16+gmax") {
      uint16_t* cg = pool_.get<uint16_t>(4, n / 16);
      p.launch = [=, this] { require(add_bf16_gmax(a, b, c, cg, n, s_), op); };
    } else {
      unknown(op);
    }
    return p;
  }

  Prepared prepare_rope(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t tokens = dim(op, 0), heads = dim(op, 1), kv = dim(op, 2), hd = dim(op, 3), seq = dim(op, 4);
    FP8SIM_REQUIRE(op.variant == "bf16", "speed replay: unknown RoPE variant '{}'", op.variant);
    uint16_t *q = bf16(0, tokens * heads * hd), *k = bf16(1, tokens * kv * hd);
    float2* table = pool_.get<float2>(2, seq * (hd / 2));
    rope_table(table, seq, hd, 10000.0f, s_);
    const bool bwd = op.kind == Kind::RopeBwd;
    p.launch = [=, this] { require(rope(q, k, table, tokens, heads, kv, hd, seq, bwd, s_), op); };
    return p;
  }

  Prepared prepare_cast_transpose(const KernelOp& op) {
    const float* amax_in = dev_scalars_ + 2;
    float* amax_out = dev_scalars_ + 4;
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t rows = dim(op, 0), cols = dim(op, 1);
    const auto arrow = op.variant.find('>');
    FP8SIM_REQUIRE(op.variant.substr(0, arrow) == "bf16" && arrow != std::string::npos,
                   "speed replay: unknown cast variant '{}'", op.variant);
    bool plain = false, trans = false, amax = false, e5m2 = false, fmt_seen = false;
    for (const std::string& t : split(op.variant.substr(arrow + 1), '+')) {
      if (t == "amax") {
        amax = true;
        continue;
      }
      const bool tr = !t.empty() && t.back() == 'T';
      const std::string f = tr ? t.substr(0, t.size() - 1) : t;
      FP8SIM_REQUIRE(f == "e4m3" || f == "e5m2", "speed replay: unknown cast output '{}' in '{}'", t, op.variant);
      FP8SIM_REQUIRE(!fmt_seen || e5m2 == (f == "e5m2"), "speed replay: mixed formats in '{}'", op.variant);
      fmt_seen = true;
      e5m2 = f == "e5m2";
      (tr ? trans : plain) = true;
    }
    FP8SIM_REQUIRE(cast_transpose_supported(rows, cols, trans), "speed replay: cast of {}x{} unsupported", rows, cols);
    uint16_t* x = bf16(0, rows * cols);
    uint8_t* out = plain ? pool_.get<uint8_t>(1, rows * cols) : nullptr;
    uint8_t* out_t = trans ? pool_.get<uint8_t>(2, rows * cols) : nullptr;
    float* am = amax ? amax_out : nullptr;
    p.launch = [=, this] { require(cast_transpose(x, rows, cols, amax_in, e5m2, out, out_t, am, s_), op); };
    return p;
  }

  Prepared prepare_transpose(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t rows = dim(op, 0), cols = dim(op, 1);
    FP8SIM_REQUIRE(op.variant == "e5m2>e5m2T" || op.variant == "e4m3>e4m3T", "speed replay: unknown transpose '{}'",
                   op.variant);
    uint8_t* x = codes(0, rows * cols, op.variant[1] == '5');
    uint8_t* xt = pool_.get<uint8_t>(1, rows * cols);
    p.launch = [=, this] { require(transpose_fp8(x, rows, cols, xt, s_), op); };
    return p;
  }

  Prepared prepare_quantize_g16(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0) * dim(op, 1);
    FP8SIM_REQUIRE(op.variant == "bf16>e4m3g16" || op.variant == "bf16>e5m2g16", "speed replay: unknown quantize '{}'",
                   op.variant);
    const bool e5m2 = op.variant == "bf16>e5m2g16";
    uint16_t* x = bf16(0, n);
    uint8_t* q = pool_.get<uint8_t>(1, n);
    uint16_t* s = pool_.get<uint16_t>(2, n / 16);
    p.launch = [=, this] { require(quantize_g16(x, q, s, n, e5m2, s_), op); };
    return p;
  }

  Prepared prepare_group_max(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0) * dim(op, 1);
    FP8SIM_REQUIRE(op.variant == "bf16>gmax", "speed replay: unknown group max '{}'", op.variant);
    uint16_t* x = bf16(0, n);
    uint16_t* g = pool_.get<uint16_t>(1, n / 16);
    p.launch = [=, this] { require(group_max(x, g, n, s_), op); };
    return p;
  }

  Prepared prepare_reduce_max(const KernelOp& op) {
    float* reduce_out = dev_scalars_ + 5;
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0);
    if (op.variant == "gmax") {
      uint16_t* v = scales(0, n);
      p.launch = [=, this] { require(reduce_max_bf16(v, n, reduce_out, s_), op); };
    } else if (op.variant == "rowmax") {
      float* v = uniform(0, n, 0.0f, 4.0f);
      p.launch = [=, this] { require(reduce_max_f32(v, n, reduce_out, s_), op); };
    } else {
      unknown(op);
    }
    return p;
  }

  Prepared prepare_amax(const KernelOp& op) {
    float* reduce_out = dev_scalars_ + 5;
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0) * dim(op, 1);
    FP8SIM_REQUIRE(op.variant == "bf16", "speed replay: unknown amax variant '{}'", op.variant);
    uint16_t* x = bf16(0, n);
    p.launch = [=, this] { require(amax_bf16(x, n, reduce_out, s_), op); };
    return p;
  }

  Prepared prepare_block_quantize(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t rows = dim(op, 0), cols = dim(op, 1);
    // DeepSeek-V3's activations (1x128 + transposed copy) and weights (128x128 + transposed),
    // MXFP8's 1x32 + 32x1 blocks with E8M0 scales; the numerics of these presets.
    const char* preset = op.variant == "bf16>e4m3g128+e4m3g128T"   ? "deepseek-act"
                         : op.variant == "bf16>e4m3b128+e4m3b128T" ? "deepseek-w"
                         : op.variant == "bf16>e4m3mx+e4m3mxC"     ? "mxfp8"
                                                                   : nullptr;
    if (!preset) unknown(op);
    const QuantSpec spec = QuantSpec::parse(preset);
    BlockQuantizeParams bp;
    bp.rows = rows;
    bp.cols = cols;
    bp.group = op.variant.find("mx") != std::string::npos ? 32 : 128;
    bp.block2d = op.variant.find("b128") != std::string::npos;
    bp.col_transposed = bp.group == 128;
    bp.e8m0 = spec.scale == ScaleMode::E8M0;
    bp.saturate = spec.saturation == Saturation::Finite;
    bp.sc = scale_consts(spec);
    FP8SIM_REQUIRE(block_quantize_supported(bp), "speed replay: block quantize of {}x{} unsupported", rows, cols);
    const int64_t ng = bp.block2d ? (rows / 128) * (cols / 128) : rows * cols / bp.group;
    const size_t sb = bp.e8m0 ? 1 : 4;
    uint16_t* x = bf16(0, rows * cols);
    uint8_t *qr = pool_.get<uint8_t>(1, rows * cols), *qc = pool_.get<uint8_t>(2, rows * cols);
    void *sr = pool_.get<uint8_t>(3, ng * sb), *sc = pool_.get<uint8_t>(4, ng * sb);
    p.launch = [=, this] { require(block_quantize(x, bp, qr, sr, qc, sc, s_), op); };
    return p;
  }

  Prepared prepare_dequantize(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t rows = dim(op, 0), cols = dim(op, 1);
    FP8SIM_REQUIRE(op.variant == "e4m3mx>bf16" || op.variant == "e4m3mxC>bf16", "speed replay: unknown dequantize '{}'",
                   op.variant);
    const bool columnwise = op.variant == "e4m3mxC>bf16";
    uint8_t* q = codes(0, rows * cols, false);
    uint8_t* sc = pool_.get<uint8_t>(1, rows * cols / 32);
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(sc, 120, static_cast<size_t>(rows * cols / 32), s_));  // 2^-7
    uint16_t* y = pool_.get<uint16_t>(2, rows * cols);
    p.launch = [=, this] { require(dequantize_mx(q, sc, rows, cols, columnwise, y, s_), op); };
    return p;
  }

  Prepared prepare_cross_entropy(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t tokens = dim(op, 0), vocab = dim(op, 1);
    uint16_t* logits = bf16(0, tokens * vocab, 2.0f);
    int32_t* labels = pool_.get<int32_t>(1, tokens);
    fill_i32_below(labels, tokens, seed_++, static_cast<int32_t>(vocab), s_);
    float* loss = pool_.get<float>(2, tokens);
    uint16_t* dl = pool_.get<uint16_t>(3, tokens * vocab);
    p.launch = [=, this] { require(cross_entropy(logits, labels, loss, dl, tokens, vocab, s_), op); };
    return p;
  }

  Prepared prepare_embedding(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t tokens = dim(op, 0), hidden = dim(op, 1), vocab = dim(op, 2);
    int32_t* ids = pool_.get<int32_t>(0, tokens);
    fill_i32_below(ids, tokens, seed_++, static_cast<int32_t>(vocab), s_);
    if (op.kind == Kind::EmbeddingFwd) {
      uint16_t* table = bf16(1, vocab * hidden);
      uint16_t* out = pool_.get<uint16_t>(2, tokens * hidden);
      p.launch = [=, this] { require(embedding_fwd(ids, table, out, tokens, hidden, s_), op); };
    } else {
      uint16_t* dy = bf16(1, tokens * hidden);
      float* dt = pool_.get<float>(2, vocab * hidden);
      p.launch = [=, this] { require(embedding_bwd(ids, dy, dt, tokens, hidden, vocab, s_), op); };
    }
    return p;
  }

  Prepared prepare_optimizer(const KernelOp& op) {
    Prepared p;
    p.impl = kSpeedKernel;
    const int64_t n = dim(op, 0);
    if (op.variant == "adamw_bf16m" || op.variant == "adamw_fp8lm") return prepare_lowp_optimizer(op, n);
    FP8SIM_REQUIRE(op.variant == "adamw_fp8_de",
                   "speed replay: optimizer '{}' is timed by PyTorch (scripts/torch_layer_time.py)", op.variant);
    // COAT's optimizer: E4M3 m and v in 1x128 groups with dynamic range expansion, fp32
    // master weights and grads, one fused pass (gpu/optim's adamw_fp8_grouped_cuda).
    const optim::StateRecipe recipe = optim::StateRecipe::parse("coat");
    const QuantSpec& sm = *recipe.m.spec;
    const QuantSpec& sv = *recipe.v.spec;
    FP8SIM_REQUIRE(sm.group_size == sv.group_size && sm.group_size > 0,
                   "speed replay: coat moments need one group size");
    const int64_t groups = (n + sm.group_size - 1) / sm.group_size;
    float* pp = uniform(0, n, -0.05f, 0.05f);
    float* g = uniform(1, n, -1e-3f, 1e-3f);
    uint8_t *mq = codes(2, n, false), *vq = codes(3, n, false);
    // Per-group (s, k, c) of plausible magnitude: s = max/448 after expansion, k in [1, 4],
    // c near the group's geometric mean.
    const Fp8MomentDev m{mq, uniform(4, groups, 1.0f / 448, 2.0f / 448), uniform(5, groups, 1.0f, 4.0f),
                         uniform(6, groups, 1e-4f, 1e-3f)};
    const Fp8MomentDev v{vq, uniform(7, groups, 1.0f / 448, 2.0f / 448), uniform(8, groups, 4.0f, 12.0f),
                         uniform(9, groups, 1e-8f, 1e-7f)};
    optim::AdamwHyper hyper;
    hyper.lr = 1e-4;
    hyper.beta2 = 0.95;
    hyper.weight_decay = 0.1;
    const optim::AdamwStepConsts consts = optim::make_step_consts(hyper, 2, optim::UpdateRule::Coat);
    const auto cm = group_moment_consts(sm, optim::state_rounding_key(sm.seed, 0, 2, 0));
    const auto cv = group_moment_consts(sv, optim::state_rounding_key(sv.seed, 0, 2, 1));
    const int gs = static_cast<int>(sm.group_size);
    p.impl = fmt::format(
        "gpu/optim adamw_fp8_grouped_cuda: fused FP8 AdamW, E4M3 m/v in 1x{} groups with COAT "
        "dynamic range expansion ({}), fp32 params and grads",
        gs, recipe.m.to_string());
    p.launch = [=, this] { adamw_fp8_grouped_cuda(pp, g, m, v, static_cast<size_t>(n), gs, consts, cm, cv, s_); };
    return p;
  }

  // AdamW with low-precision moments on fp32 params and grads: DeepSeek-V3's BF16 moments (one
  // fused pass), FP8-LM's E4M3 m and FP16 v with power-of-two per-tensor scales (an amax pass and
  // the fused step: the scale needs the amax of the whole new moment).
  Prepared prepare_lowp_optimizer(const KernelOp& op, int64_t n) {
    Prepared p;
    const bool bf16m = op.variant == "adamw_bf16m";
    // NOT-RECIPES: optimizer-state presets (sim/optim/state_recipe.cpp), not training recipes.
    const optim::StateRecipe recipe = optim::StateRecipe::parse(bf16m ? "bf16" : "fp8lm");
    optim::AdamwHyper hyper;
    hyper.lr = 1e-4;
    hyper.beta2 = 0.95;
    hyper.weight_decay = 0.1;
    const optim::AdamwStepConsts consts = optim::make_step_consts(hyper, 2, optim::UpdateRule::Torch);
    float* pp = uniform(0, n, -0.05f, 0.05f);
    float* g = uniform(1, n, -1e-3f, 1e-3f);
    if (bf16m) {
      uint16_t* m = bf16(2, n, 1e-3f);
      uint16_t* v = scales(3, n);  // positive
      p.impl = "gpu/optim adamw_bf16_moments_cuda: fused AdamW, BF16 m and v, fp32 params and grads";
      p.launch = [=, this] { adamw_bf16_moments_cuda(pp, g, m, v, static_cast<size_t>(n), consts, recipe, s_); };
      return p;
    }
    // m: E4M3 codes; v: FP16 bit patterns of positive values (the bf16 scale fill's bits read as fp16:
    // finite, positive); one scale each.
    auto moment = [&](const optim::MomentSpec& spec, size_t slot, bool sixteen) {
      LowpMomentDev d;
      d.spec = spec;
      d.codes = sixteen ? static_cast<void*>(scales(slot, n)) : static_cast<void*>(codes(slot, n, false));
      d.scales = uniform(slot + 1, 1, 1e-4f, 1e-3f);
      return d;
    };
    auto m = std::make_shared<LowpMomentDev>(moment(recipe.m, 2, false));
    auto v = std::make_shared<LowpMomentDev>(moment(recipe.v, 4, true));
    void* scratch = pool_.get<uint8_t>(6, lowp_scratch_bytes(recipe, n));
    p.impl = fmt::format(
        "gpu/optim adamw_lowp_cuda: AdamW with elementwise states (an amax pass, then dequantize, update and "
        "requantize in one pass), moments {}, fp32 params and grads",
        recipe.to_string());
    p.launch = [=, this] { adamw_lowp_cuda(pp, g, *m, *v, n, consts, 0, 2, scratch, s_); };
    return p;
  }

  Prepared prepare_gemm(const KernelOp& op, const float* one) {
    FP8SIM_REQUIRE(op.dims.size() == 3, "speed replay: GEMM '{}' needs m, n, k", op.key());
    const int64_t m = op.dims[0], n = op.dims[1], k = op.dims[2];
    // "a*b>bf16,layout[,fast|split]"
    const std::vector<std::string> parts = split(op.variant, ',');
    const auto star = parts[0].find('*'), gt = parts[0].find('>');
    FP8SIM_REQUIRE(parts.size() >= 2 && star != std::string::npos && gt != std::string::npos,
                   "speed replay: malformed GEMM variant '{}'", op.variant);
    const Operand oa = parse_operand(parts[0].substr(0, star)),
                  ob = parse_operand(parts[0].substr(star + 1, gt - star - 1));
    const Format a = oa.format, b = ob.format;
    const bool fp8 = a != Format::BF16;
    const std::string layout = parts[1];
    const bool fast = parts.size() > 2 && parts[2] == "fast";
    if (!lt_) lt_ = std::make_unique<CublasLt>();
    GemmConfig cfg;
    cfg.x_format = a;
    cfg.w_format = b;
    cfg.y_format = Format::BF16;
    cfg.scaling = fp8 ? GemmScaling::Tensor : GemmScaling::None;
    if (oa.blocks || ob.blocks) {
      // DeepSeek-V3: X in 1x128 groups, W in 128x128 blocks or (the wgrad) 1x128 groups too.
      FP8SIM_REQUIRE(oa.blocks == 'g' && ob.blocks != 0, "speed replay: block-scaled GEMM '{}' needs a 1x128 X",
                     op.key());
      cfg.scaling = ob.blocks == 'b' ? GemmScaling::Block : GemmScaling::Block1D;
    }
    cfg.fast_accum = fp8 && fast;
    // Row-major operand storage -> the wrapper's flags: "mk.kn" (dgrad) keeps W as stored,
    // "km.kn" (wgrad) reads both dY and X transposed; no copies, as PyTorch runs nn.Linear.
    FP8SIM_REQUIRE(layout == "mk.nk" || (!fp8 && (layout == "mk.kn" || layout == "km.kn")),
                   "speed replay: GEMM layout '{}' unsupported for '{}'", layout, op.key());
    cfg.x_transposed = layout == "km.kn";
    cfg.w_transposed = layout != "mk.nk";
    const size_t ea = fp8 ? 1 : 2, eb = (b == Format::BF16) ? 2 : 1;
    void* x = pool_.get<uint8_t>(0, static_cast<size_t>(m) * k * ea);
    void* w = pool_.get<uint8_t>(1, static_cast<size_t>(n) * k * eb);
    void* y = pool_.get<uint8_t>(2, static_cast<size_t>(m) * n * 2);
    if (a == Format::BF16) fill_bf16_normal(static_cast<uint16_t*>(x), m * k, seed_++, 1.0f, s_);
    else fill_fp8_codes(static_cast<uint8_t*>(x), m * k, seed_++, a == Format::E5M2, s_);
    if (b == Format::BF16) fill_bf16_normal(static_cast<uint16_t*>(w), n * k, seed_++, 1.0f, s_);
    else fill_fp8_codes(static_cast<uint8_t*>(w), n * k, seed_++, b == Format::E5M2, s_);
    GemmArgs args;
    args.x = x;
    args.w = w;
    args.y = y;
    if (fp8) {
      args.x_scale = one;
      args.w_scale = one;
    }
    if (cfg.scaling == GemmScaling::Block || cfg.scaling == GemmScaling::Block1D) {
      // Scale tables of plausible magnitude in cuBLAS's layouts (VEC128: M x kb; BLK128x128: kb
      // padded to 4, times N / 128; VEC128 for W: N x kb).
      const int64_t kb = (k + 127) / 128;
      const int64_t nw = cfg.scaling == GemmScaling::Block ? (kb + 3) / 4 * 4 * ((n + 127) / 128) : n * kb;
      args.x_scale = uniform(3, m * kb, 1.0f / 448, 4.0f / 448);
      args.w_scale = uniform(4, nw, 1.0f / 448, 4.0f / 448);
    }
    FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s_));
    GemmPlan plan = lt_->plan({m, n, k}, cfg, args, s_, 1, 0);
    FP8SIM_REQUIRE(plan.supported(), "speed replay: cuBLASLt refused '{}': {}", op.key(), plan.status());
    plans_.push_back(std::move(plan));
    const size_t idx = plans_.size() - 1;
    Prepared p;
    const GemmAlgoInfo& algo = plans_[idx].chosen();
    p.impl = fmt::format("cuBLASLt {} via gpu/gemm/cublaslt (heuristic top-1: algo {}, tile {}, stages {}, split-k {})",
                         CublasLt::version_string(), algo.algo_id, algo.tile_id, algo.stages_id, algo.splitk);
    p.launch = [this, idx, args] { lt_->run(plans_[idx], args, s_); };
    return p;
  }
};

double median_of(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (static_cast<double>(v[n / 2 - 1]) + v[n / 2]);
}

// Times `launch`: warm-up, one probe to size the repetition count, then reps each preceded by an
// L2-evicting memset, CUDA events around the kernel only.
void time_launch(const std::function<void()>& launch, cudaStream_t s, const ReplaySettings& rs, void* flush,
                 Measurement& m) {
  for (int i = 0; i < rs.warmup; ++i) launch();
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  FP8SIM_CUDA_CHECK(cudaEventCreate(&e0));
  FP8SIM_CUDA_CHECK(cudaEventCreate(&e1));
  FP8SIM_CUDA_CHECK(cudaEventRecord(e0, s));
  launch();
  FP8SIM_CUDA_CHECK(cudaEventRecord(e1, s));
  FP8SIM_CUDA_CHECK(cudaEventSynchronize(e1));
  float probe = 0;
  FP8SIM_CUDA_CHECK(cudaEventElapsedTime(&probe, e0, e1));
  FP8SIM_CUDA_CHECK(cudaEventDestroy(e0));
  FP8SIM_CUDA_CHECK(cudaEventDestroy(e1));
  const int reps = probe < 0.05f ? 3 * rs.reps : rs.reps;

  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(reps));
  for (auto& e : ev) FP8SIM_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < reps; ++r) {
    FP8SIM_CUDA_CHECK(cudaMemsetAsync(flush, r & 0xFF, rs.flush_bytes, s));
    FP8SIM_CUDA_CHECK(cudaEventRecord(ev[2 * r], s));
    launch();
    FP8SIM_CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], s));
  }
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) FP8SIM_CUDA_CHECK(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
  for (auto& e : ev) cudaEventDestroy(e);
  m.median_ms = median_of(ms);
  m.min_ms = *std::min_element(ms.begin(), ms.end());
  m.max_ms = *std::max_element(ms.begin(), ms.end());
  m.reps = reps;
}

double copy_gbps(cudaStream_t s) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  FP8SIM_CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, s));
  std::vector<float> ms;
  cudaEvent_t e0, e1;
  FP8SIM_CUDA_CHECK(cudaEventCreate(&e0));
  FP8SIM_CUDA_CHECK(cudaEventCreate(&e1));
  for (int r = 0; r < 6; ++r) {
    FP8SIM_CUDA_CHECK(cudaEventRecord(e0, s));
    FP8SIM_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
    FP8SIM_CUDA_CHECK(cudaEventRecord(e1, s));
    FP8SIM_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    FP8SIM_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (r > 0) ms.push_back(t);  // the first copy is the warm-up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * static_cast<double>(bytes) / (median_of(ms) * 1e6);
}

}  // namespace

Json device_json() {
  const DeviceInfo& d = device_info();
  Json j = Json::object();
  j["name"] = d.name;
  j["sm_count"] = d.sm_count;
  j["compute_capability"] = fmt::format("{}.{}", d.cc_major, d.cc_minor);
  j["memory_gib"] = static_cast<double>(d.total_mem) / static_cast<double>(1ull << 30);
  j["l2_mib"] = static_cast<double>(d.l2_bytes) / static_cast<double>(1ull << 20);
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  j["cuda_runtime"] = rt;
  j["cuda_driver"] = drv;
  j["cublaslt"] = CublasLt::version_string();
  return j;
}

Calibration measure_ops(const std::vector<KernelOp>& ops, const ReplaySettings& rs,
                        const std::function<void(double, double)>& progress) {
  const DeviceInfo& info = device_info();
  FP8SIM_REQUIRE(info.available, "speed replay: no GPU ({})", info.why_not);
  FP8SIM_REQUIRE(rs.reps > 0 && rs.warmup >= 0, "speed replay: reps must be positive");

  // Distinct kernels, largest work first so that a memory problem shows up at once.
  std::vector<const KernelOp*> todo;
  std::set<std::string> seen;
  for (const KernelOp& op : ops) {
    if (op.kind == Kind::Attention || (op.kind == Kind::Optimizer && op.variant == "adamw_fp32")) continue;
    if (seen.insert(op.key()).second) todo.push_back(&op);
  }
  std::stable_sort(todo.begin(), todo.end(), [](const KernelOp* a, const KernelOp* b) {
    return std::max(a->bytes, a->flops / 100) > std::max(b->bytes, b->flops / 100);
  });

  Stream stream;
  Calibration cal;
  cal.device = device_json();
  cal.copy_gbps = copy_gbps(stream.get());
  DeviceBuffer<uint8_t> flush(rs.flush_bytes);
  Replayer replayer(stream.get());
  std::vector<std::string> skipped;
  if (progress) progress(0, static_cast<double>(todo.size()));
  size_t done = 0;
  for (const KernelOp* op : todo) {
    Measurement m;
    m.key = op->key();
    m.kind = op->kind;
    m.variant = op->variant;
    m.dims = op->dims;
    m.flops = op->flops;
    m.bytes = op->bytes;
    if (const fp8sim::speed::KernelFamily* f = fp8sim::speed::kernel_family(op->kind, op->variant))
      m.version = f->version;
    try {
      Prepared p = replayer.prepare(*op);
      time_launch(p.launch, stream.get(), rs, flush.get(), m);
      m.impl = p.impl;
      m.note = p.note;
      cal.add(m);
    } catch (const Error& e) {
      // A refused configuration leaves the context usable; a fault does not, and ends the run.
      const cudaError_t sticky = cudaDeviceSynchronize();
      if (sticky != cudaSuccess)
        throw Error(fmt::format("speed replay: '{}' failed and left the GPU unusable: {} ({})", m.key, e.what(),
                                cudaGetErrorString(sticky)));
      cudaGetLastError();
      skipped.push_back(fmt::format("{}: {}", m.key, e.what()));
    }
    ++done;
    if (progress) progress(static_cast<double>(done), static_cast<double>(todo.size()));
  }
  if (!skipped.empty()) {
    Json sk = Json::array();
    for (const auto& s : skipped) sk.push_back(s);
    cal.device["skipped_kernels"] = sk;
  }
  return cal;
}

}  // namespace fp8sim::gpu::speed
