#pragma once
// How an optimizer keeps its two moments: a storage spec per moment (fp32, or any QuantSpec).
//
// Text form (the --recipe option of `fp8sim optim`):
//   NAME                      a preset (state_recipe_presets())
//   m=SPEC,v=SPEC             one spec per moment; SPEC is `fp32` or any QuantSpec text
//                             (sim/quant/spec.hpp), e.g. m=e4m3:g128:de=coat,v=e5m2:g128
//                             (either order; a QuantSpec may itself contain commas, as in
//                             delayed=1024,max: the split is at ",m=" / ",v=")
//
// Presets:
//   fp32           m, v fp32 (torch.optim.AdamW): the reference
//   bf16           m, v bf16, no scale (DeepSeek-V3 keeps its moments in BF16)
//   coat           m, v e4m3:g128:de=coat (COAT: per 128-group E4M3 with Dynamic Range Expansion)
//   coat-noexpand  m, v e4m3:g128, s = (absmax + 1e-20)/448 (COAT's kernel without expansion)
//   te-fp8         m, v e4m3:tensor (TransformerEngine FusedAdam with exp_avg_dtype =
//                  exp_avg_sq_dtype = uint8: one fp32 scale per tensor from the current amax
//                  of the new moment, E4M3)
//   fp8lm          m e4m3:tensor:scale=pow2, v fp16:tensor:scale=pow2 (FP8-LM / MS-AMP LBAdamW:
//                  FP8 first moment, FP16 second moment, each with MS-AMP's power-of-two
//                  per-tensor scaling factor from the new moment's amax)
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/formats/format.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim::optim {

// The storage of one moment: fp32 (no quantization) or a QuantSpec.
struct MomentSpec {
  std::optional<QuantSpec> spec;  // nullopt: fp32
  bool is_fp32() const { return !spec.has_value(); }
  std::string to_string() const;                   // "fp32" or the canonical QuantSpec text
  static MomentSpec parse(std::string_view text);  // "fp32" or a QuantSpec (UsageError otherwise)
  bool operator==(const MomentSpec&) const = default;
};

struct StateRecipe {
  std::string name;  // the preset name, or the text it was parsed from
  MomentSpec m, v;
  std::string note;  // caveats of a preset (printed beside results), may be empty

  // Parses a preset name or "m=SPEC,v=SPEC". Throws UsageError listing the presets.
  static StateRecipe parse(std::string_view text);
  // "m=<spec>,v=<spec>" in canonical form.
  std::string to_string() const;
  // Throws UsageError when the recipe uses a quantizer the optimizer replay cannot run (delayed
  // scaling, which needs an amax history the replay does not keep).
  void check_supported() const;
  bool is_fp32() const { return m.is_fp32() && v.is_fp32(); }
  // A copy whose FP8 moments use `r` (and `seed`); pass-through (bf16/fp16) and fp32 moments
  // are unchanged, since they round to nearest only.
  StateRecipe with_rounding(Rounding r, uint64_t seed) const;
};

struct StateRecipePreset {
  const char* name;
  const char* m;
  const char* v;
  const char* description;
};
const std::vector<StateRecipePreset>& state_recipe_presets();

// Exact bytes of both moments (codes + metadata: scales, DE k and c) of a flattened parameter
// of n elements under `r`: 4 B per element for an fp32 moment, quantized_bytes(spec, {n})
// otherwise (sim/quant's accounting).
size_t state_bytes(const StateRecipe& r, int64_t n);
size_t moment_bytes(const MomentSpec& s, int64_t n);

}  // namespace fp8sim::optim
