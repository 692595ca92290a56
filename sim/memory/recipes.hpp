#pragma once
// The memory view of a training recipe: how each kind of tensor is stored (master weights,
// gradients, optimizer moments, and every saved-activation role of sim/model). Quantized storage
// is a QuantSpec; its bytes come from the quantizer's exact, data-free accounting
// (quantized_size in sim/quant/quantize.hpp), so the memory model and the quantizer agree.
//
//   bf16      BF16 mixed precision: fp32 master weights, fp32 grads, fp32 AdamW m and v;
//             norms keep their input upcast to fp32 (HF LlamaRMSNorm), everything else bf16.
//   te        TransformerEngine FP8 (Table 2's TE row): Linear inputs FP8 E4M3 per-tensor,
//             fused norms keep their bf16 input, attention output bf16 (FlashAttention needs
//             it), SiLU/Mul inputs bf16; fp32 AdamW; delayed-scaling amax history per GEMM operand.
//   coat      COAT: Linear inputs E4M3 per-tensor, norm/SiLU/Mul inputs E4M3 1x16 groups with
//             bf16 scales, attention bf16; AdamW m and v E4M3 in groups of 128 with Dynamic
//             Range Expansion (fp32 scale, k and centre per group), fp32 master weights.
//   fp8lm     FP8-LM (MS-AMP O2): fp16 master weights with a per-tensor fp32 scale, fp32 grads,
//             AdamW m E4M3 per-tensor and v fp16 with a per-tensor fp32 scale; activations as te.
//   deepseek  DeepSeek-V3 style: Linear inputs E4M3 1x128 groups (fp32 scales), everything else
//             as te; AdamW m and v in bf16, fp32 master weights and grads.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/model/model.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim::memory {

// How one tensor is stored.
struct Storage {
  bool quantized = false;
  int plain_bytes = 0;           // !quantized: bytes per element (fp32 4, bf16/fp16 2, int64 8)
  QuantSpec spec;                // quantized: the quantizer's spec (codes + per-group metadata)
  int64_t per_tensor_extra = 0;  // extra bytes per tensor (a plain fp16 tensor's fp32 loss scale)
  std::string label;             // "fp32", "bf16", "e4m3:g16:scale=bf16", ...

  static Storage plain(int bytes, std::string label, int64_t per_tensor_extra = 0);
  static Storage quant(std::string_view spec_text);
};

// Bytes of a tensor of `shape` under `s`: `data` = element codes, `meta` = scales / k / centre /
// per-tensor extras. Exact (quantized_size for quantized storage).
struct StorageBytes {
  int64_t data = 0, meta = 0;
  int64_t total() const { return data + meta; }
  StorageBytes& operator+=(const StorageBytes& o) {
    data += o.data;
    meta += o.meta;
    return *this;
  }
};
StorageBytes storage_bytes(const Storage& s, std::span<const int64_t> shape);

struct Recipe {
  std::string name;
  std::string description;
  Storage master;      // master weights (what the optimizer updates)
  Storage grad;        // the gradient buffer the optimizer reads
  Storage exp_avg;     // AdamW first moment, applied to each parameter flattened to 1-D
  Storage exp_avg_sq;  // AdamW second moment
  // torch.optim.AdamW's default (foreach) path allocates sqrt(v) for every parameter of the
  // shard during the step; fused FP8 kernels update in place.
  bool foreach_adamw_temporary = false;
  bool fp8_gemm = false;    // decoder-layer Linears run in FP8 (weights cast just in time)
  int te_amax_history = 0;  // > 0: TransformerEngine delayed scaling state per FP8 GEMM operand
  std::vector<std::pair<model::SavedRole, Storage>> activations;  // storage per saved role

  const Storage& activation(model::SavedRole role) const;  // throws if the role is missing
};

// Throws UsageError for an unknown name, listing the valid ones.
const Recipe& find_recipe(std::string_view name);
std::vector<std::string> recipe_names();  // bf16, te, coat, fp8lm, deepseek

}  // namespace fp8sim::memory
