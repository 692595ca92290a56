#include "sim/memory/recipes.hpp"

#include <fmt/format.h>

#include "sim/common/check.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::memory {

using model::SavedRole;

Storage Storage::plain(int bytes, std::string label, int64_t per_tensor_extra) {
  Storage s;
  s.quantized = false;
  s.plain_bytes = bytes;
  s.per_tensor_extra = per_tensor_extra;
  s.label = std::move(label);
  return s;
}

Storage Storage::quant(std::string_view spec_text) {
  Storage s;
  s.quantized = true;
  s.spec = QuantSpec::parse(spec_text);
  // The canonical spec text (aliases such as coat-act expanded) says exactly what is stored.
  s.label = s.spec.to_string();
  return s;
}

StorageBytes storage_bytes(const Storage& s, std::span<const int64_t> shape) {
  StorageBytes b;
  if (s.quantized) {
    const QuantizedSize q = quantized_size(s.spec, shape);
    b.data = q.code_bytes;
    b.meta = q.metadata_bytes();
  } else {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    b.data = n * s.plain_bytes;
  }
  b.meta += s.per_tensor_extra;
  return b;
}

const Storage& Recipe::activation(SavedRole role) const {
  for (const auto& [r, s] : activations)
    if (r == role) return s;
  FP8SIM_CHECK(false, "recipe {} has no storage for role {}", name, model::saved_role_name(role));
  return activations.front().second;  // unreachable
}

namespace {

// Roles outside the decoder layers are never quantized by any recipe here: the embedding, the
// final norm, the LM head and the loss stay as in BF16 training (COAT, TE and DeepSeek-V3 keep
// them in high precision).
void add_outside(std::vector<std::pair<SavedRole, Storage>>& a) {
  a.emplace_back(SavedRole::TokenIds, Storage::plain(8, "int64"));
  // HF LlamaRMSNorm upcasts its input to fp32 and autograd keeps that copy.
  a.emplace_back(SavedRole::FinalNormInput, Storage::plain(4, "fp32"));
  a.emplace_back(SavedRole::HeadInput, Storage::plain(2, "bf16"));
  a.emplace_back(SavedRole::Logits, Storage::plain(2, "bf16"));
  // cross_entropy = log_softmax (keeps its fp32 output) + nll_loss, on logits upcast to fp32.
  a.emplace_back(SavedRole::LossBuffer, Storage::plain(4, "fp32"));
}

// Roles every recipe keeps in BF16 or fp32: attention (COAT keeps RoPE and FlashAttention in BF16;
// so do TE and DeepSeek-V3) and the small fp32 statistics.
void add_attention_and_stats(std::vector<std::pair<SavedRole, Storage>>& a) {
  a.emplace_back(SavedRole::RopeInput, Storage::plain(2, "bf16"));
  a.emplace_back(SavedRole::AttnInput, Storage::plain(2, "bf16"));
  a.emplace_back(SavedRole::AttnStats, Storage::plain(4, "fp32"));
  a.emplace_back(SavedRole::NormStats, Storage::plain(4, "fp32"));
  // o_proj's input is FlashAttention's output, which FlashAttention's backward reads in BF16:
  // COAT saves it in BF16 and requantizes in backward ("we do not save an extra flash_x");
  // Table 2 counts o_proj's input as 1U for TE and COAT alike.
  a.emplace_back(SavedRole::AttnOutput, Storage::plain(2, "bf16"));
}

std::vector<Recipe> make_recipes() {
  std::vector<Recipe> rs;
  const Storage fp32 = Storage::plain(4, "fp32");
  const Storage bf16 = Storage::plain(2, "bf16");

  {
    Recipe r;
    r.name = "bf16";
    r.description = "BF16 mixed precision: fp32 master/grads/AdamW states; activations bf16, norm inputs fp32";
    r.master = fp32;
    r.grad = fp32;
    r.exp_avg = fp32;
    r.exp_avg_sq = fp32;
    r.foreach_adamw_temporary = true;
    auto& a = r.activations;
    a.emplace_back(SavedRole::NormInput, fp32);  // LlamaRMSNorm: hidden_states.to(float32) is saved
    a.emplace_back(SavedRole::LinearInput, bf16);
    a.emplace_back(SavedRole::ActInput, bf16);
    a.emplace_back(SavedRole::MulInput, bf16);
    add_attention_and_stats(a);
    add_outside(a);
    rs.push_back(r);
  }
  {
    Recipe r;
    r.name = "te";
    r.description = "TransformerEngine FP8: Linear inputs E4M3 per-tensor (delayed scaling), norm/SiLU/Mul bf16";
    r.master = fp32;
    r.grad = fp32;
    r.exp_avg = fp32;
    r.exp_avg_sq = fp32;
    r.foreach_adamw_temporary = true;
    r.fp8_gemm = true;
    r.te_amax_history = 1024;
    auto& a = r.activations;
    a.emplace_back(SavedRole::NormInput, bf16);  // LayerNormLinear keeps its bf16 input
    a.emplace_back(SavedRole::LinearInput, Storage::quant("e4m3:tensor"));
    a.emplace_back(SavedRole::ActInput, bf16);
    a.emplace_back(SavedRole::MulInput, bf16);
    add_attention_and_stats(a);
    add_outside(a);
    rs.push_back(r);
  }
  {
    Recipe r;
    r.name = "coat";
    r.description = "COAT: Linear inputs E4M3 per-tensor, norm/SiLU/Mul E4M3 1x16 (bf16 scales); AdamW E4M3 g128 + DE";
    r.master = fp32;
    r.grad = fp32;
    r.exp_avg = Storage::quant("coat-opt");  // e4m3:g128:de=coat: fp32 scale + k + centre per group
    r.exp_avg_sq = Storage::quant("coat-opt");
    r.fp8_gemm = true;
    auto& a = r.activations;
    a.emplace_back(SavedRole::NormInput, Storage::quant("coat-act"));  // e4m3:g16:scale=bf16
    a.emplace_back(SavedRole::LinearInput, Storage::quant("e4m3:tensor"));
    a.emplace_back(SavedRole::ActInput, Storage::quant("coat-act"));
    a.emplace_back(SavedRole::MulInput, Storage::quant("coat-act"));
    add_attention_and_stats(a);
    add_outside(a);
    rs.push_back(r);
  }
  {
    Recipe r;
    r.name = "fp8lm";
    r.description =
        "FP8-LM (MS-AMP O2): fp16 master (scaled), AdamW m E4M3 per-tensor + v fp16 (scaled); activations as te";
    r.master = Storage::quant("fp16:tensor:scale=fp32");  // fp16 codes + one fp32 scale per tensor
    r.grad = fp32;
    r.exp_avg = Storage::quant("e4m3:tensor");
    r.exp_avg_sq = Storage::quant("fp16:tensor:scale=fp32");
    r.fp8_gemm = true;
    r.te_amax_history = 1024;
    auto& a = r.activations;
    a.emplace_back(SavedRole::NormInput, bf16);
    a.emplace_back(SavedRole::LinearInput, Storage::quant("e4m3:tensor"));
    a.emplace_back(SavedRole::ActInput, bf16);
    a.emplace_back(SavedRole::MulInput, bf16);
    add_attention_and_stats(a);
    add_outside(a);
    rs.push_back(r);
  }
  {
    Recipe r;
    r.name = "deepseek";
    r.description = "DeepSeek-V3 style: Linear inputs E4M3 1x128 (fp32 scales), weights 128x128; AdamW m, v bf16";
    r.master = fp32;
    r.grad = fp32;
    r.exp_avg = bf16;
    r.exp_avg_sq = bf16;
    r.fp8_gemm = true;
    auto& a = r.activations;
    a.emplace_back(SavedRole::NormInput, bf16);
    a.emplace_back(SavedRole::LinearInput, Storage::quant("deepseek-act"));  // e4m3:g128
    a.emplace_back(SavedRole::ActInput, bf16);
    a.emplace_back(SavedRole::MulInput, bf16);
    add_attention_and_stats(a);
    add_outside(a);
    rs.push_back(r);
  }
  return rs;
}

const std::vector<Recipe>& all_recipes() {
  static const std::vector<Recipe> rs = make_recipes();
  return rs;
}

}  // namespace

const Recipe& find_recipe(std::string_view name) {
  for (const auto& r : all_recipes())
    if (r.name == name) return r;
  std::string valid;
  for (const auto& r : all_recipes()) valid += (valid.empty() ? "" : ", ") + r.name;
  throw UsageError(fmt::format("unknown recipe '{}' (valid: {})", name, valid));
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> n;
  for (const auto& r : all_recipes()) n.push_back(r.name);
  return n;
}

}  // namespace fp8sim::memory
