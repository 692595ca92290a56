#include "sim/optim/state_recipe.hpp"

#include <fmt/format.h>

#include "sim/common/check.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/scale.hpp"

namespace fp8sim::optim {

const std::vector<StateRecipePreset>& state_recipe_presets() {
  // NOT-RECIPES: the optimizer-state presets; a training recipe names one (sim/recipe).
  static const std::vector<StateRecipePreset> presets = {
      {"fp32", "fp32", "fp32", "fp32 moments (torch.optim.AdamW): the reference"},
      {"bf16", "bf16", "bf16", "bf16 moments, no scale (DeepSeek-V3)"},
      {"coat", "e4m3:g128:de=coat", "e4m3:g128:de=coat",
       "E4M3, 1x128 groups of the flattened parameter, Dynamic Range Expansion (COAT)"},
      {"coat-noexpand", "coat-opt-noexpand", "coat-opt-noexpand",
       "E4M3, 1x128 groups, s = (absmax + 1e-20)/448 (COAT's kernel without expansion)"},
      {"te-fp8", "e4m3:tensor", "e4m3:tensor",
       "E4M3, one fp32 scale per tensor from the new moment's amax (TransformerEngine FusedAdam, uint8 states)"},
      {"fp8lm", "e4m3:tensor:scale=pow2", "fp16:tensor:scale=pow2",
       "E4M3 m, FP16 v, each with a power-of-two per-tensor scale (FP8-LM / MS-AMP LBAdamW)"},
  };
  return presets;
}

std::string MomentSpec::to_string() const { return spec ? spec->to_string() : std::string("fp32"); }

MomentSpec MomentSpec::parse(std::string_view text) {
  MomentSpec s;
  if (text == "fp32") return s;
  if (text.empty()) throw UsageError("empty moment spec (give fp32 or a quantization spec such as e4m3:g128:de=coat)");
  s.spec = QuantSpec::parse(text);
  // The fused state kernels (CPU and GPU) divide by the group scale (plain_scales_common) and
  // reduce the group minimum exactly; the other peer forms are for quantize / analyze.
  const ScaleConsts sc = scale_consts(*s.spec);
  if (!plain_scales_common_ok(sc) || s.spec->de_min != DeMin::Nonzero)
    throw UsageError(
        fmt::format("moment spec '{}': optimizer states take scale_div=ieee|rcp, apply=div, mx=rceil "
                    "and de_min=nonzero (e.g. e4m3:g128:de=coat)",
                    text));
  return s;
}

namespace {

std::string preset_names() {
  std::string out;
  for (const auto& p : state_recipe_presets()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

// Splits "m=A,v=B" (or "v=B,m=A") at the separator that starts the second moment's key. A
// QuantSpec may contain commas (delayed=1024,max), so only ",m=" / ",v=" split.
void split_moments(std::string_view text, std::string& m_text, std::string& v_text) {
  auto starts = [&](std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; };
  std::string_view first_key = starts(text, "m=") ? "m=" : (starts(text, "v=") ? "v=" : "");
  if (first_key.empty())
    throw UsageError(fmt::format("state recipe '{}': expected a preset ({}) or m=SPEC,v=SPEC", text, preset_names()));
  const std::string_view other = first_key == "m=" ? ",v=" : ",m=";
  const size_t cut = text.find(other);
  if (cut == std::string_view::npos)
    throw UsageError(
        fmt::format("state recipe '{}': missing '{}SPEC' (give both moments, e.g. "
                    "m=e4m3:g128:de=coat,v=e5m2:g128; fp32 keeps a moment in fp32)",
                    text, other.substr(1)));
  const std::string a(text.substr(2, cut - 2)), b(text.substr(cut + 3));
  if (b.find(",m=") != std::string::npos || b.find(",v=") != std::string::npos)
    throw UsageError(fmt::format("state recipe '{}': a moment is given twice", text));
  m_text = first_key == "m=" ? a : b;
  v_text = first_key == "m=" ? b : a;
}

}  // namespace

StateRecipe StateRecipe::parse(std::string_view text) {
  StateRecipe r;
  for (const auto& p : state_recipe_presets()) {
    if (text == p.name) {
      r.name = p.name;
      r.m = MomentSpec::parse(p.m);
      r.v = MomentSpec::parse(p.v);
      return r;
    }
  }
  std::string m_text, v_text;
  split_moments(text, m_text, v_text);
  try {
    r.m = MomentSpec::parse(m_text);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("state recipe '{}', first moment: {}", text, e.what()));
  }
  try {
    r.v = MomentSpec::parse(v_text);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("state recipe '{}', second moment: {}", text, e.what()));
  }
  r.name = std::string(text);
  return r;
}

void StateRecipe::check_supported() const {
  // Moments are requantized from their own new values every step; the replay keeps no amax
  // history of earlier steps to scale them by.
  for (const MomentSpec* ms : {&m, &v})
    if (ms->spec && ms->spec->delayed.enabled())
      throw UsageError(
          fmt::format("state recipe '{}': spec '{}' uses delayed scaling, which optimizer states do not "
                      "support (they are rescaled from their new values every step): drop the "
                      "delayed=... key",
                      name, ms->spec->to_string()));
}

std::string StateRecipe::to_string() const { return "m=" + m.to_string() + ",v=" + v.to_string(); }

StateRecipe StateRecipe::with_rounding(Rounding rnd, uint64_t seed) const {
  StateRecipe out = *this;
  for (MomentSpec* ms : {&out.m, &out.v}) {
    if (ms->spec && is_fp8(ms->spec->format)) {
      ms->spec->rounding = rnd;
      ms->spec->seed = seed;
    }
  }
  return out;
}

size_t moment_bytes(const MomentSpec& s, int64_t n) {
  FP8SIM_CHECK(n >= 0, "negative element count {}", n);
  if (s.is_fp32()) return static_cast<size_t>(n) * 4;
  const Shape shape{n};
  return quantized_bytes(*s.spec, shape);
}

size_t state_bytes(const StateRecipe& r, int64_t n) { return moment_bytes(r.m, n) + moment_bytes(r.v, n); }

}  // namespace fp8sim::optim
