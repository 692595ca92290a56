#include "sim/quant/spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "sim/common/check.hpp"

namespace fp8sim {

std::string_view granularity_name(Granularity g) {
  switch (g) {
    case Granularity::Tensor:
      return "tensor";
    case Granularity::Row:
      return "row";
    case Granularity::Col:
      return "col";
    case Granularity::Group:
      return "group";
    case Granularity::Block:
      return "block";
  }
  return "?";
}

std::string_view scale_mode_name(ScaleMode m) {
  switch (m) {
    case ScaleMode::Fp32:
      return "fp32";
    case ScaleMode::Pow2:
      return "pow2";
    case ScaleMode::E8M0:
      return "e8m0";
    case ScaleMode::Bf16:
      return "bf16";
    case ScaleMode::None:
      return "none";
    case ScaleMode::E4M3:
      return "e4m3";
  }
  return "?";
}

std::string_view expand_mode_name(ExpandMode m) {
  switch (m) {
    case ExpandMode::None:
      return "none";
    case ExpandMode::Coat:
      return "coat";
    case ExpandMode::Robust:
      return "robust";
  }
  return "?";
}

std::string_view scale_div_name(ScaleDiv d) {
  switch (d) {
    case ScaleDiv::Ieee:
      return "ieee";
    case ScaleDiv::Rcp:
      return "rcp";
    case ScaleDiv::Fdiv:
      return "fdiv";
  }
  return "?";
}

std::string_view apply_name(Apply a) {
  switch (a) {
    case Apply::Div:
      return "div";
    case Apply::Rcp:
      return "rcp";
    case Apply::Fdiv:
      return "fdiv";
    case Apply::Mul:
      return "mul";
  }
  return "?";
}

std::string_view mx_round_name(MxRound m) {
  switch (m) {
    case MxRound::Rceil:
      return "rceil";
    case MxRound::Floor:
      return "floor";
    case MxRound::Ceil:
      return "ceil";
    case MxRound::Even:
      return "even";
  }
  return "?";
}

std::string_view de_min_name(DeMin m) { return m == DeMin::Kernel ? "kernel" : "nonzero"; }

namespace {

struct Alias {
  const char* name;
  const char* expansion;
};
// Whole specs under one name (a format's or a peer kernel's). Keys given after an alias override
// or extend it.
// NOT-RECIPES: spec aliases (several share a training recipe's name: the recipe uses that spec).
constexpr Alias kAliases[] = {
    // OCP MXFP8 with TE's MXFP8 rounding (= torchao RCEIL): E8M0 = amax * RN(1/fmax) rounded up.
    {"mxfp8", "e4m3:g32:scale=e8m0:scale_div=rcp"},
    {"mxfp8-e5m2", "e5m2:g32:scale=e8m0:scale_div=rcp"},
    {"te-mxfp8", "e4m3:g32:scale=e8m0:scale_div=rcp"},
    {"torchao-mxfp8", "e4m3:g32:scale=e8m0:mx=floor"},  // torchao to_mx's default (FLOOR)
    {"torchao-mxfp8-rceil", "e4m3:g32:scale=e8m0:scale_div=rcp"},
    // OCP MX v1.0's 4- and 6-bit formats: 32-element blocks, E8M0 scale 2^(floor(log2 amax) - emax).
    {"mxfp4", "e2m1:g32:scale=e8m0:mx=floor"},
    {"mxfp6-e2m3", "e2m3:g32:scale=e8m0:mx=floor"},
    {"mxfp6-e3m2", "e3m2:g32:scale=e8m0:mx=floor"},
    // NVIDIA's NVFP4 as TransformerEngine's recipe quantizes: E4M3 scales per 16 elements (per
    // 16x16 block for weights) under an fp32 scale per tensor.
    {"nvfp4", "e2m1:g16:scale=e4m3"},
    {"nvfp4-w", "e2m1:b16x16:scale=e4m3"},
    // COAT's kernels: the optimizer's DE with its kernel's group minimum; the Triton quantizers'
    // approximate divisions (activations 1x16 with bf16 scales; fp32 weights per tensor).
    {"coat-opt", "e4m3:g128:de=coat:de_min=kernel"},
    {"coat-opt-noexpand", "e4m3:g128:eps=1e-20:eps_add=fp64"},
    {"coat-act", "e4m3:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv"},
    {"coat-w", "e4m3:tensor:eps=1e-10:scale_div=rcp:apply=fdiv"},
    // DeepSeek-V3 / DeepGEMM reference casts: amax >= 1e-4, s = amax * RN(1/448), x * RN(1/s).
    {"deepseek-act", "e4m3:g128:amax_floor=1e-4:scale_div=rcp:apply=rcp"},
    {"deepseek-act-ue8m0", "e4m3:g128:scale=e8m0:amax_floor=1e-4:scale_div=rcp:apply=rcp"},
    {"deepseek-w", "e4m3:b128x128:amax_floor=1e-4:scale_div=rcp:apply=rcp"},
    {"deepseek-w-ue8m0", "e4m3:b128x128:scale=e8m0:amax_floor=1e-4:scale_div=rcp:apply=rcp"},
    // TransformerEngine: current scaling (x * fmax/amax), its power-of-two variant, delayed scaling.
    {"te-current", "e4m3:tensor:apply=mul"},
    {"te-current-pow2", "e4m3:tensor:scale=pow2:apply=mul"},
    {"te-delayed", "e4m3:tensor:delayed=1024,max"},
};

// NOT-RECIPES: formats and spec aliases.
constexpr const char* kValidFormats =
    "e4m3, e5m2, e2m1 (fp4), e2m3, e3m2, bf16, fp16 (or an alias: mxfp8, mxfp8-e5m2, te-mxfp8, torchao-mxfp8, "
    "torchao-mxfp8-rceil, mxfp4, mxfp6-e2m3, mxfp6-e3m2, nvfp4, nvfp4-w, "
    "coat-opt, coat-opt-noexpand, coat-act, coat-w, deepseek-act, deepseek-act-ue8m0, deepseek-w, "
    "deepseek-w-ue8m0, te-current, te-current-pow2, te-delayed)";
constexpr const char* kValidKeys =
    "scale, eps, eps_add, de, de_target, delayed, round, seed, sat, amax_floor, scale_div, apply, mx, de_min, rht, "
    "rht_seed";

[[noreturn]] void bad(std::string_view text, const std::string& what) {
  throw UsageError(fmt::format("bad quant spec '{}': {}", text, what));
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    out.emplace_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

bool parse_int64(std::string_view s, int64_t& v) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  auto r = std::from_chars(b, e, v);
  return r.ec == std::errc() && r.ptr == e;
}

bool parse_uint64(std::string_view s, uint64_t& v) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    b += 2;
    base = 16;
  }
  auto r = std::from_chars(b, e, v, base);
  return r.ec == std::errc() && r.ptr == e;
}

bool parse_double(std::string_view s, double& v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

Format parse_storage_format(std::string_view text, std::string_view tok) {
  if (tok == "e4m3" || tok == "e4m3fn") return Format::E4M3;
  if (tok == "e5m2") return Format::E5M2;
  if (tok == "bf16" || tok == "bfloat16") return Format::BF16;
  if (tok == "fp16" || tok == "float16") return Format::FP16;
  if (tok == "e2m1" || tok == "fp4") return Format::E2M1;
  if (tok == "e2m3") return Format::E2M3;
  if (tok == "e3m2") return Format::E3M2;
  bad(text, fmt::format("unknown format '{}' (valid: {})", tok, kValidFormats));
}

void parse_granularity(std::string_view text, std::string_view tok, QuantSpec& s) {
  if (tok == "tensor") {
    s.granularity = Granularity::Tensor;
    return;
  }
  if (tok == "row") {
    s.granularity = Granularity::Row;
    return;
  }
  if (tok == "col") {
    s.granularity = Granularity::Col;
    return;
  }
  const std::string valid = "valid: tensor, row, col, gN (1xN groups, e.g. g128), bRxC (blocks, e.g. b128x128)";
  if (!tok.empty() && tok[0] == 'g') {
    int64_t g = 0;
    if (!parse_int64(tok.substr(1), g) || g < 1)
      bad(text, fmt::format("bad group size in '{}': N must be a positive integer ({})", tok, valid));
    s.granularity = Granularity::Group;
    s.group_size = g;
    return;
  }
  if (!tok.empty() && tok[0] == 'b') {
    const size_t x = tok.find('x');
    int64_t r = 0, c = 0;
    if (x == std::string_view::npos || !parse_int64(tok.substr(1, x - 1), r) || !parse_int64(tok.substr(x + 1), c) ||
        r < 1 || c < 1)
      bad(text, fmt::format("bad block '{}': R and C must be positive integers ({})", tok, valid));
    s.granularity = Granularity::Block;
    s.block_rows = r;
    s.block_cols = c;
    return;
  }
  bad(text, fmt::format("unknown granularity '{}' ({})", tok, valid));
}

void parse_delayed(std::string_view text, std::string_view value, DelayedSpec& d) {
  const auto parts = split(value, ',');
  int64_t h = 0;
  if (!parse_int64(parts[0], h) || h < 1 || h > (int64_t{1} << 24))
    bad(text,
        fmt::format("bad delayed history '{}' (delayed=H[,max|recent][,margin=M] with 1 <= H <= 2^24)", parts[0]));
  d.history = static_cast<int>(h);
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "max") d.algo = AmaxAlgo::Max;
    else if (p == "recent" || p == "most_recent") d.algo = AmaxAlgo::MostRecent;
    else if (p.rfind("margin=", 0) == 0) {
      int64_t m = 0;
      if (!parse_int64(std::string_view(p).substr(7), m) || m < 0 || m > 64)
        bad(text, fmt::format("bad delayed margin '{}' (an integer in [0, 64])", p));
      d.margin = static_cast<int>(m);
    } else {
      bad(text, fmt::format("unknown delayed option '{}' (valid: max, recent, margin=M)", p));
    }
  }
}

double default_eps(ExpandMode e) { return e == ExpandMode::Coat ? 1e-30 : 0.0; }
EpsAdd default_eps_add(ExpandMode e) { return e == ExpandMode::Coat ? EpsAdd::Fp64 : EpsAdd::Fp32; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

uint64_t parse_seed(std::string_view text, std::string_view what) {
  uint64_t v = 0;
  if (!parse_uint64(text, v))
    throw UsageError(fmt::format("bad {} '{}' (a non-negative integer below 2^64, decimal or 0x hex)", what, text));
  return v;
}

QuantSpec QuantSpec::parse(std::string_view raw) {
  std::string text = lower(raw);
  // Strip surrounding whitespace; inner whitespace is an error.
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t lead = 0;
  while (lead < text.size() && std::isspace(static_cast<unsigned char>(text[lead]))) ++lead;
  text.erase(0, lead);
  if (text.empty())
    bad(raw, fmt::format("empty spec (FORMAT:GRANULARITY[:KEY=VALUE...], FORMAT one of {})", kValidFormats));

  std::vector<std::string> tokens = split(text, ':');
  for (const auto& a : kAliases) {
    if (tokens[0] == a.name) {
      std::vector<std::string> expanded = split(a.expansion, ':');
      expanded.insert(expanded.end(), tokens.begin() + 1, tokens.end());
      tokens = std::move(expanded);
      break;
    }
  }

  QuantSpec s;
  s.format = parse_storage_format(raw, tokens[0]);
  size_t next = 1;
  if (tokens.size() > 1 && tokens[1].find('=') == std::string::npos) {
    parse_granularity(raw, tokens[1], s);
    next = 2;
  }

  // Keys: later occurrences override earlier ones (so keys after an alias override it), but a
  // key repeated within the user's own text is an error.
  std::set<std::string> seen_user;
  bool eps_set = false, eps_add_set = false, target_set = false, scale_set = false;
  const size_t alias_keys_end = tokens.size() - (split(text, ':').size() - 1);
  for (size_t i = next; i < tokens.size(); ++i) {
    const std::string& tok = tokens[i];
    if (tok.empty()) bad(raw, "empty field (two ':' in a row or a trailing ':')");
    const size_t eq = tok.find('=');
    if (eq == std::string::npos) {
      bad(raw,
          fmt::format("'{}' is not KEY=VALUE (valid keys: {}); the granularity must come second", tok, kValidKeys));
    }
    const std::string key = tok.substr(0, eq);
    const std::string value = tok.substr(eq + 1);
    if (i >= alias_keys_end && !seen_user.insert(key).second) bad(raw, fmt::format("key '{}' given twice", key));
    if (value.empty()) bad(raw, fmt::format("key '{}' has no value", key));
    if (key == "scale") {
      if (value == "fp32") s.scale = ScaleMode::Fp32;
      else if (value == "pow2") s.scale = ScaleMode::Pow2;
      else if (value == "e8m0") s.scale = ScaleMode::E8M0;
      else if (value == "bf16") s.scale = ScaleMode::Bf16;
      else if (value == "none") s.scale = ScaleMode::None;
      else if (value == "e4m3") s.scale = ScaleMode::E4M3;
      else bad(raw, fmt::format("unknown scale '{}' (valid: fp32, pow2, e8m0, bf16, none, e4m3)", value));
      scale_set = true;
    } else if (key == "eps") {
      double e = 0;
      if (!parse_double(value, e) || !std::isfinite(e) || e < 0 || e > kMaxEps)
        bad(raw, fmt::format("bad eps '{}' (a number in [0, {:g}], e.g. 1e-10)", value, kMaxEps));
      s.eps = e;
      eps_set = true;
    } else if (key == "eps_add") {
      if (value == "fp32") s.eps_add = EpsAdd::Fp32;
      else if (value == "fp64") s.eps_add = EpsAdd::Fp64;
      else bad(raw, fmt::format("unknown eps_add '{}' (valid: fp32, fp64)", value));
      eps_add_set = true;
    } else if (key == "de") {
      if (value == "none") s.expand = ExpandMode::None;
      else if (value == "coat") s.expand = ExpandMode::Coat;
      else if (value == "robust") s.expand = ExpandMode::Robust;
      else bad(raw, fmt::format("unknown de '{}' (valid: none, coat, robust)", value));
    } else if (key == "de_target") {
      if (value == "e4m3") s.expand_target = Format::E4M3;
      else if (value == "e5m2") s.expand_target = Format::E5M2;
      else if (value == "e2m1") s.expand_target = Format::E2M1;
      else if (value == "e2m3") s.expand_target = Format::E2M3;
      else if (value == "e3m2") s.expand_target = Format::E3M2;
      else bad(raw, fmt::format("unknown de_target '{}' (valid: e4m3, e5m2, e2m1, e2m3, e3m2)", value));
      target_set = true;
    } else if (key == "delayed") {
      s.delayed = DelayedSpec{};
      parse_delayed(raw, value, s.delayed);
    } else if (key == "round") {
      if (value == "nearest" || value == "rne") s.rounding = Rounding::Nearest;
      else if (value == "stochastic" || value == "sr") s.rounding = Rounding::Stochastic;
      else bad(raw, fmt::format("unknown round '{}' (valid: nearest, stochastic)", value));
    } else if (key == "seed") {
      try {
        s.seed = parse_seed(value, "seed");
      } catch (const UsageError& e) {
        bad(raw, e.what());
      }
    } else if (key == "amax_floor") {
      double f = 0;
      if (!parse_double(value, f) || !std::isfinite(f) || f < 0 || f > kMaxEps)
        bad(raw, fmt::format("bad amax_floor '{}' (a number in [0, {:g}], e.g. 1e-4)", value, kMaxEps));
      s.amax_floor = static_cast<float>(f);
    } else if (key == "scale_div") {
      if (value == "ieee") s.scale_div = ScaleDiv::Ieee;
      else if (value == "rcp") s.scale_div = ScaleDiv::Rcp;
      else if (value == "fdiv") s.scale_div = ScaleDiv::Fdiv;
      else bad(raw, fmt::format("unknown scale_div '{}' (valid: ieee, rcp, fdiv)", value));
    } else if (key == "apply") {
      if (value == "div") s.apply = Apply::Div;
      else if (value == "rcp") s.apply = Apply::Rcp;
      else if (value == "fdiv") s.apply = Apply::Fdiv;
      else if (value == "mul") s.apply = Apply::Mul;
      else bad(raw, fmt::format("unknown apply '{}' (valid: div, rcp, fdiv, mul)", value));
    } else if (key == "mx") {
      if (value == "rceil") s.mx = MxRound::Rceil;
      else if (value == "floor") s.mx = MxRound::Floor;
      else if (value == "ceil") s.mx = MxRound::Ceil;
      else if (value == "even") s.mx = MxRound::Even;
      else bad(raw, fmt::format("unknown mx '{}' (valid: rceil, floor, ceil, even)", value));
    } else if (key == "de_min") {
      if (value == "nonzero") s.de_min = DeMin::Nonzero;
      else if (value == "kernel") s.de_min = DeMin::Kernel;
      else bad(raw, fmt::format("unknown de_min '{}' (valid: nonzero, kernel)", value));
    } else if (key == "rht") {
      int64_t n = 0;
      if (!parse_int64(value, n) || (n != 4 && n != 16 && n != 64 && n != 256))
        bad(raw, fmt::format("bad rht '{}' (a Hadamard block of 4, 16, 64 or 256 elements)", value));
      s.rht = static_cast<int>(n);
    } else if (key == "rht_seed") {
      try {
        s.rht_seed = parse_seed(value, "rht_seed");
      } catch (const UsageError& e) {
        bad(raw, e.what());
      }
      s.rht_seeded = true;
    } else if (key == "sat") {
      if (value == "finite") s.saturation = Saturation::Finite;
      else if (value == "none") s.saturation = Saturation::None;
      else bad(raw, fmt::format("unknown sat '{}' (valid: finite, none)", value));
    } else {
      bad(raw, fmt::format("unknown key '{}' (valid keys: {})", key, kValidKeys));
    }
  }
  if (!scale_set) s.scale = s.is_16bit() ? ScaleMode::None : ScaleMode::Fp32;
  if (!eps_set) s.eps = default_eps(s.expand);
  if (!eps_add_set) s.eps_add = default_eps_add(s.expand);
  if (!target_set) s.expand_target = is_fp8(s.format) || is_fp4_fp6(s.format) ? s.format : Format::E4M3;
  try {
    s.validate();
  } catch (const UsageError& e) {
    bad(raw, e.what());
  }
  return s;
}

std::string QuantSpec::to_string() const {
  std::string out(format_name(format));
  switch (granularity) {
    case Granularity::Tensor:
      out += ":tensor";
      break;
    case Granularity::Row:
      out += ":row";
      break;
    case Granularity::Col:
      out += ":col";
      break;
    case Granularity::Group:
      out += fmt::format(":g{}", group_size);
      break;
    case Granularity::Block:
      out += fmt::format(":b{}x{}", block_rows, block_cols);
      break;
  }
  if (scale != (is_16bit() ? ScaleMode::None : ScaleMode::Fp32))
    out += fmt::format(":scale={}", scale_mode_name(scale));
  if (expand != ExpandMode::None) out += fmt::format(":de={}", expand_mode_name(expand));
  if (expand != ExpandMode::None && expand_target != format)
    out += fmt::format(":de_target={}", format_name(expand_target));
  if (eps != default_eps(expand)) out += fmt::format(":eps={}", eps);
  if (eps_add != default_eps_add(expand)) out += fmt::format(":eps_add={}", eps_add == EpsAdd::Fp32 ? "fp32" : "fp64");
  if (delayed.enabled()) {
    out += fmt::format(":delayed={},{}", delayed.history, delayed.algo == AmaxAlgo::Max ? "max" : "recent");
    if (delayed.margin) out += fmt::format(",margin={}", delayed.margin);
  }
  if (rounding != Rounding::Nearest) out += ":round=stochastic";
  if (seed != 0) out += fmt::format(":seed={}", seed);
  if (saturation != Saturation::Finite) out += ":sat=none";
  if (amax_floor != 0.0f) out += fmt::format(":amax_floor={}", amax_floor);
  if (scale_div != ScaleDiv::Ieee) out += fmt::format(":scale_div={}", scale_div_name(scale_div));
  if (apply != Apply::Div) out += fmt::format(":apply={}", apply_name(apply));
  if (mx != MxRound::Rceil) out += fmt::format(":mx={}", mx_round_name(mx));
  if (de_min != DeMin::Nonzero) out += fmt::format(":de_min={}", de_min_name(de_min));
  if (rht) out += fmt::format(":rht={}", rht);
  if (rht_seeded) out += fmt::format(":rht_seed={}", rht_seed);
  return out;
}

void QuantSpec::validate() const {
  auto fail = [](const std::string& m) { throw UsageError(m); };
  if (!is_fp8(format) && !is_16bit() && !is_fp4_fp6(format))
    fail(fmt::format("format must be e4m3, e5m2, e2m1, e2m3, e3m2, bf16 or fp16, not {}", format_name(format)));
  if (is_fp4_fp6(format)) {
    const std::string f(format_name(format));
    if (expand == ExpandMode::Robust || delayed.enabled())
      fail(fmt::format("{}: de=robust and delayed scaling are defined for e4m3 / e5m2 only", f));
    if (scale != ScaleMode::E8M0 && scale != ScaleMode::E4M3 && scale != ScaleMode::Fp32 && scale != ScaleMode::Pow2)
      fail(fmt::format("{} takes scale=e8m0 (OCP MX), e4m3 (NVFP4), fp32 or pow2, not {}", f, scale_mode_name(scale)));
    if (scale == ScaleMode::E4M3 && eps != 0.0) fail("scale=e4m3 follows NVFP4's own arithmetic: eps does not apply");
    if (saturation != Saturation::Finite)
      fail(fmt::format("{} has no Inf or NaN: it saturates (sat=none does not apply)", f));
  }
  if (rht != 0 && rht != 4 && rht != 16 && rht != 64 && rht != 256) fail("rht must be 4, 16, 64 or 256");
  if (rht_seeded && rht == 0) fail("rht_seed sets the signs of rht=N: it needs rht");
  if (rht && (expand != ExpandMode::None || delayed.enabled() || is_16bit()))
    fail("rht transforms GEMM operands before block scaling: it does not combine with de, delayed or 16-bit storage");
  if (granularity == Granularity::Group && group_size < 1) fail("group size must be >= 1");
  if (granularity == Granularity::Block && (block_rows < 1 || block_cols < 1)) fail("block sides must be >= 1");
  if (!std::isfinite(eps) || eps < 0 || eps > kMaxEps) fail(fmt::format("eps must be a number in [0, {:g}]", kMaxEps));
  if (!is_fp8(expand_target) && !is_fp4_fp6(expand_target)) fail("de_target must be e4m3, e5m2, e2m1, e2m3 or e3m2");
  if (is_fp8(format) && !is_fp8(expand_target))
    fail(fmt::format("de_target '{}': e4m3 / e5m2 storage takes de_target e4m3, e5m2", format_name(expand_target)));
  if (delayed.enabled() && (delayed.history < 1 || delayed.margin < 0)) fail("delayed: history >= 1, margin >= 0");
  if (!std::isfinite(amax_floor) || amax_floor < 0 || amax_floor > kMaxEps)
    fail(fmt::format("amax_floor must be a number in [0, {:g}]", kMaxEps));
  const bool peer_keys = amax_floor != 0.0f || scale_div != ScaleDiv::Ieee || apply != Apply::Div ||
                         mx != MxRound::Rceil || de_min != DeMin::Nonzero;
  if (peer_keys) {
    if (!is_fp8(format) && !is_fp4_fp6(format))
      fail("amax_floor, scale_div, apply, mx and de_min apply to scaled e4m3 / e5m2 / e2m1 / e2m3 / e3m2 storage");
    if (delayed.enabled()) fail("delayed scaling has TE's own scale rule: amax_floor, scale_div, apply do not apply");
    if (expand != ExpandMode::None && (amax_floor != 0.0f || scale_div != ScaleDiv::Ieee || apply != Apply::Div))
      fail("de scales by its own formulas: amax_floor, scale_div and apply do not apply");
    if (mx != MxRound::Rceil && scale != ScaleMode::E8M0) fail("mx= rounds E8M0 exponents: it needs scale=e8m0");
    if (scale_div != ScaleDiv::Ieee &&
        !(scale == ScaleMode::Fp32 || scale == ScaleMode::Bf16 || (scale == ScaleMode::E8M0 && mx == MxRound::Rceil)))
      fail(fmt::format(
          "scale_div shapes the quotient amax/fmax of fp32, bf16 and e8m0 (mx=rceil) scales, not "
          "scale={}{}",
          scale_mode_name(scale), scale == ScaleMode::E8M0 ? " with mx=" + std::string(mx_round_name(mx)) : ""));
    if (apply == Apply::Mul && !(scale == ScaleMode::Fp32 || scale == ScaleMode::Pow2))
      fail("apply=mul (TE's multiplier fmax/amax) takes scale=fp32 or pow2");
    if (apply == Apply::Mul && scale_div != ScaleDiv::Ieee)
      fail("apply=mul computes its multiplier fmax/amax itself: scale_div does not apply");
    if (de_min != DeMin::Nonzero &&
        !(expand == ExpandMode::Coat && granularity == Granularity::Group && group_size == 128))
      fail("de_min=kernel reproduces COAT's 128-thread group reduction: it needs de=coat and granularity g128");
  }
  if (scale == ScaleMode::E4M3 && !is_fp4_fp6(format))
    fail(fmt::format("scale=e4m3 (NVFP4's two-level scaling) is for e2m1 / e2m3 / e3m2 elements, not {}",
                     format_name(format)));
  if (scale == ScaleMode::E4M3 && peer_keys)
    fail("scale=e4m3 follows NVFP4's own arithmetic: amax_floor, scale_div, apply and mx do not apply");
  if (is_16bit()) {
    const std::string f(format_name(format));
    if (expand != ExpandMode::None || delayed.enabled())
      fail(fmt::format("{} is a 16-bit format: de and delayed do not apply", f));
    if (rounding != Rounding::Nearest) fail(fmt::format("{}: only round=nearest is supported", f));
    if (scale == ScaleMode::None) {
      if (granularity != Granularity::Tensor)
        fail(fmt::format("unscaled {} (scale=none) has no groups: its granularity must be 'tensor'", f));
      if (eps != 0.0) fail(fmt::format("unscaled {} (scale=none) takes no eps", f));
    } else if (scale != ScaleMode::Fp32 && scale != ScaleMode::Pow2) {
      fail(fmt::format("{} takes scale=none, fp32 or pow2, not {}", f, scale_mode_name(scale)));
    }
    return;
  }
  if (scale == ScaleMode::None) fail(fmt::format("{} needs a scale: scale=none is for bf16/fp16", format_name(format)));
  if (expand != ExpandMode::None) {
    if (scale != ScaleMode::Fp32)
      fail(fmt::format("de={} keeps fp32 scales (s, k, c): scale={} does not apply", expand_mode_name(expand),
                       scale_mode_name(scale)));
    if (delayed.enabled()) fail("de and delayed scaling cannot be combined");
    if (expand == ExpandMode::Robust && eps != 0.0) fail("de=robust handles zero groups itself and takes no eps");
  }
  if (delayed.enabled()) {
    if (granularity != Granularity::Tensor) fail("delayed scaling is per-tensor: the granularity must be 'tensor'");
    if (scale != ScaleMode::Fp32) fail("delayed scaling keeps an fp32 scale: scale= does not apply");
    if (eps != 0.0) fail("delayed scaling takes no eps");
  }
}

int QuantSpec::metadata_bytes_per_group() const {
  int b = 4;
  if (scale == ScaleMode::Bf16) b = 2;
  if (scale == ScaleMode::E8M0 || scale == ScaleMode::E4M3) b = 1;
  if (scale == ScaleMode::None) b = 0;
  if (expand != ExpandMode::None) b += 8;
  return b;
}

int QuantSpec::bits_per_code() const { return format_info(format).bits; }

float QuantSpec::fmax() const { return static_cast<float>(format_info(format).max); }

void GroupGeometry::group_bounds(int64_t g, int64_t& r0, int64_t& r1, int64_t& c0, int64_t& c1) const {
  const int64_t gi = g / grid_cols, gj = g % grid_cols;
  r0 = gi * group_rows;
  r1 = std::min(rows, r0 + group_rows);
  c0 = gj * group_cols;
  c1 = std::min(cols, c0 + group_cols);
}

}  // namespace fp8sim
