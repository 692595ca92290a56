// QuantSpec: the text form (examples, aliases, keys), canonical round trips over
// every valid combination, validation and parse errors that name the bad token, geometry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/quant/quantize.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

TEST(QuantSpecParse, IssueExamples) {
  {
    const QuantSpec s = QuantSpec::parse("e4m3:g128:de=coat");
    EXPECT_EQ(s.format, Format::E4M3);
    EXPECT_EQ(s.granularity, Granularity::Group);
    EXPECT_EQ(s.group_size, 128);
    EXPECT_EQ(s.expand, ExpandMode::Coat);
    EXPECT_EQ(s.expand_target, Format::E4M3);
    EXPECT_EQ(s.eps, 1e-30);  // COAT's QUANT_MIN_VAL
    EXPECT_EQ(s.eps_add, EpsAdd::Fp64);
    EXPECT_EQ(s.scale, ScaleMode::Fp32);
    EXPECT_EQ(s.metadata_bytes_per_group(), 12);
  }
  {
    const QuantSpec s = QuantSpec::parse("e4m3:g16:scale=bf16");
    EXPECT_EQ(s.group_size, 16);
    EXPECT_EQ(s.scale, ScaleMode::Bf16);
    EXPECT_EQ(s.metadata_bytes_per_group(), 2);
  }
  {
    const QuantSpec s = QuantSpec::parse("e4m3:tensor");
    EXPECT_EQ(s.granularity, Granularity::Tensor);
    EXPECT_EQ(s.eps, 0.0);
    EXPECT_EQ(s.rounding, Rounding::Nearest);
    EXPECT_EQ(s.saturation, Saturation::Finite);
  }
  {
    const QuantSpec s = QuantSpec::parse("e5m2:b128x128:scale=pow2");
    EXPECT_EQ(s.format, Format::E5M2);
    EXPECT_EQ(s.granularity, Granularity::Block);
    EXPECT_EQ(s.block_rows, 128);
    EXPECT_EQ(s.block_cols, 128);
    EXPECT_EQ(s.scale, ScaleMode::Pow2);
    EXPECT_EQ(s.fmax(), 57344.0f);
  }
  {
    const QuantSpec s = QuantSpec::parse("e4m3:row:round=stochastic:seed=0x2a:sat=none");
    EXPECT_EQ(s.granularity, Granularity::Row);
    EXPECT_EQ(s.rounding, Rounding::Stochastic);
    EXPECT_EQ(s.seed, 42u);
    EXPECT_EQ(s.saturation, Saturation::None);
  }
  {
    const QuantSpec s = QuantSpec::parse("e4m3:tensor:delayed=16,recent,margin=2");
    EXPECT_EQ(s.delayed.history, 16);
    EXPECT_EQ(s.delayed.algo, AmaxAlgo::MostRecent);
    EXPECT_EQ(s.delayed.margin, 2);
  }
  // Case and surrounding whitespace are forgiven.
  EXPECT_EQ(QuantSpec::parse("  E4M3:G128  "), QuantSpec::parse("e4m3:g128"));
}

TEST(QuantSpecParse, Aliases) {
  // Presets named after a peer are that peer's kernel (see spec.hpp); the earlier, idealised
  // meanings stay reachable through explicit keys.
  EXPECT_EQ(QuantSpec::parse("mxfp8"), QuantSpec::parse("e4m3:g32:scale=e8m0:scale_div=rcp"));
  EXPECT_EQ(QuantSpec::parse("te-mxfp8"), QuantSpec::parse("mxfp8"));
  EXPECT_EQ(QuantSpec::parse("torchao-mxfp8-rceil"), QuantSpec::parse("mxfp8"));
  EXPECT_EQ(QuantSpec::parse("mxfp8-e5m2"), QuantSpec::parse("e5m2:g32:scale=e8m0:scale_div=rcp"));
  EXPECT_EQ(QuantSpec::parse("torchao-mxfp8"), QuantSpec::parse("e4m3:g32:scale=e8m0:mx=floor"));
  EXPECT_EQ(QuantSpec::parse("coat-opt"), QuantSpec::parse("e4m3:g128:de=coat:de_min=kernel"));
  EXPECT_EQ(QuantSpec::parse("coat-act"), QuantSpec::parse("e4m3:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv"));
  EXPECT_EQ(QuantSpec::parse("coat-w"), QuantSpec::parse("e4m3:tensor:eps=1e-10:scale_div=rcp:apply=fdiv"));
  EXPECT_EQ(QuantSpec::parse("deepseek-act"), QuantSpec::parse("e4m3:g128:amax_floor=1e-4:scale_div=rcp:apply=rcp"));
  EXPECT_EQ(QuantSpec::parse("deepseek-w"), QuantSpec::parse("e4m3:b128x128:amax_floor=1e-4:scale_div=rcp:apply=rcp"));
  EXPECT_EQ(QuantSpec::parse("deepseek-act-ue8m0").scale, ScaleMode::E8M0);
  EXPECT_EQ(QuantSpec::parse("deepseek-w-ue8m0").granularity, Granularity::Block);
  EXPECT_EQ(QuantSpec::parse("te-current"), QuantSpec::parse("e4m3:tensor:apply=mul"));
  EXPECT_EQ(QuantSpec::parse("te-current-pow2"), QuantSpec::parse("e4m3:tensor:scale=pow2:apply=mul"));
  EXPECT_EQ(QuantSpec::parse("deepseek-act").amax_floor, 1e-4f);
  EXPECT_EQ(QuantSpec::parse("te-delayed").delayed.history, 1024);
  const QuantSpec ne = QuantSpec::parse("coat-opt-noexpand");
  EXPECT_EQ(ne.eps, 1e-20);
  EXPECT_EQ(ne.eps_add, EpsAdd::Fp64);
  EXPECT_EQ(ne.expand, ExpandMode::None);
  // Keys after an alias extend or override it.
  const QuantSpec sr = QuantSpec::parse("mxfp8:round=stochastic:seed=7");
  EXPECT_EQ(sr.rounding, Rounding::Stochastic);
  EXPECT_EQ(sr.group_size, 32);
  EXPECT_EQ(QuantSpec::parse("coat-act:scale=fp32").scale, ScaleMode::Fp32);
  EXPECT_EQ(QuantSpec::parse("bf16").scale, ScaleMode::None);
  EXPECT_TRUE(QuantSpec::parse("fp16").is_passthrough());
  EXPECT_TRUE(QuantSpec::parse("fp16:tensor:scale=pow2").is_16bit());
  EXPECT_FALSE(QuantSpec::parse("fp16:tensor:scale=pow2").is_passthrough());
}

TEST(QuantSpecParse, CanonicalFormRoundTripsForEveryValidCombination) {
  const std::vector<std::string> formats = {"e4m3", "e5m2", "bf16", "fp16"};
  const std::vector<std::string> grans = {"tensor", "row", "col", "g1", "g16", "g128", "g100", "b128x128", "b1x32"};
  const std::vector<std::string> extras = {"",
                                           ":scale=pow2",
                                           ":scale=e8m0",
                                           ":scale=bf16",
                                           ":scale=fp32",
                                           ":scale=none",
                                           ":de=coat",
                                           ":de=robust",
                                           ":de=coat:de_target=e5m2",
                                           ":de=coat:eps=0",
                                           ":de=coat:eps_add=fp32",
                                           ":eps=1e-10",
                                           ":eps=1e-20:eps_add=fp64",
                                           ":delayed=1024,max",
                                           ":delayed=3,recent,margin=1",
                                           ":round=stochastic:seed=123456789012",
                                           ":sat=none",
                                           ":scale=pow2:round=stochastic:sat=none",
                                           ":amax_floor=1e-4",
                                           ":amax_floor=1e-4:scale_div=rcp:apply=rcp",
                                           ":scale_div=fdiv:apply=fdiv",
                                           ":scale=bf16:scale_div=fdiv:apply=fdiv:eps=1e-10",
                                           ":apply=mul",
                                           ":scale=pow2:apply=mul",
                                           ":scale=e8m0:mx=floor",
                                           ":scale=e8m0:mx=even:apply=rcp",
                                           ":scale=e8m0:scale_div=rcp",
                                           ":scale=e8m0:mx=ceil:scale_div=rcp",
                                           ":scale=bf16:apply=mul",
                                           ":mx=floor",
                                           ":de=coat:de_min=kernel",
                                           ":de=coat:apply=rcp",
                                           ":delayed=16:amax_floor=1"};
  int valid = 0, invalid = 0;
  for (const auto& f : formats)
    for (const auto& g : grans)
      for (const auto& e : extras) {
        const std::string text = f + ":" + g + e;
        QuantSpec s;
        try {
          s = QuantSpec::parse(text);
        } catch (const UsageError& err) {
          ++invalid;
          const std::string msg = err.what();
          EXPECT_NE(msg.find(text), std::string::npos) << msg;  // names the spec
          EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
          continue;
        }
        ++valid;
        const std::string canon = s.to_string();
        const QuantSpec back = QuantSpec::parse(canon);
        EXPECT_EQ(back, s) << text << " -> " << canon;
        EXPECT_EQ(back.to_string(), canon) << text;
        EXPECT_NO_THROW(s.validate());
      }
  // Both outcomes occur (the list mixes valid and invalid combinations on purpose).
  EXPECT_GT(valid, 200);
  EXPECT_GT(invalid, 100);
  EXPECT_EQ(QuantSpec::parse("e4m3:g128:de=coat").to_string(), "e4m3:g128:de=coat");
  EXPECT_EQ(QuantSpec::parse("coat-act").to_string(), "e4m3:g16:scale=bf16:eps=1e-10:scale_div=fdiv:apply=fdiv");
  EXPECT_EQ(QuantSpec::parse("deepseek-act").to_string(), "e4m3:g128:amax_floor=0.0001:scale_div=rcp:apply=rcp");
  EXPECT_EQ(QuantSpec::parse("e4m3").to_string(), "e4m3:tensor");
}

struct BadCase {
  const char* text;
  std::vector<std::string> must_contain;
};

TEST(QuantSpecParse, ErrorsNameTheTokenAndTheChoices) {
  const std::vector<BadCase> cases = {
      {"", {"empty spec"}},
      {"e4m4:tensor", {"'e4m4'", "e4m3, e5m2, e2m1 (fp4), e2m3, e3m2, bf16, fp16"}},
      {"e4m3:g0", {"'g0'", "tensor, row, col"}},
      {"e4m3:gx", {"'gx'"}},
      {"e4m3:b128", {"'b128'", "bRxC"}},
      {"e4m3:b0x4", {"'b0x4'"}},
      {"e4m3:blocks", {"'blocks'"}},
      {"e4m3:tensor:scale=fp8", {"'fp8'", "fp32, pow2, e8m0, bf16"}},
      {"e4m3:tensor:foo=1", {"'foo'", "scale, eps, eps_add, de"}},
      {"e4m3:tensor:de=yes", {"'yes'", "none, coat, robust"}},
      {"e4m3:tensor:round=up", {"'up'", "nearest, stochastic"}},
      {"e4m3:tensor:sat=clamp", {"'clamp'", "finite, none"}},
      {"e4m3:tensor:eps=-1", {"'-1'"}},
      {"e4m3:tensor:eps=abc", {"'abc'"}},
      {"e4m3:tensor:seed=-3", {"'-3'", "non-negative"}},
      {"e4m3:tensor:apply=times", {"'times'", "div, rcp, fdiv, mul"}},
      {"e4m3:tensor:scale_div=approx", {"'approx'", "ieee, rcp, fdiv"}},
      {"e4m3:g32:scale=e8m0:mx=up", {"'up'", "rceil, floor, ceil, even"}},
      {"e4m3:g128:de=coat:de_min=first", {"'first'", "nonzero, kernel"}},
      {"e4m3:tensor:amax_floor=-1", {"'-1'", "amax_floor"}},
      {"e4m3:g32:mx=floor", {"needs scale=e8m0"}},
      {"e4m3:g32:scale=e8m0:mx=floor:scale_div=rcp", {"scale_div", "mx=floor"}},
      {"e4m3:g32:scale=pow2:scale_div=rcp", {"scale_div", "pow2"}},
      {"e4m3:g32:scale=bf16:apply=mul", {"apply=mul", "fp32 or pow2"}},
      {"e4m3:g64:de=coat:de_min=kernel", {"de_min=kernel", "g128"}},
      {"e4m3:g128:de=coat:apply=rcp", {"de scales by its own formulas"}},
      {"e4m3:tensor:delayed=16:apply=mul", {"delayed"}},
      {"bf16:tensor:scale=fp32:apply=rcp", {"e4m3 / e5m2"}},
      {"e4m3:tensor:seed=+3", {"'+3'"}},
      {"e4m3:tensor:seed=18446744073709551616", {"2^64"}},
      {"e4m3:tensor:eps=3.5e38", {"'3.5e38'", "[0, 1e+30]"}},
      {"e4m3:tensor:eps=inf", {"'inf'"}},
      {"e4m3:tensor:eps=1e31", {"'1e31'"}},
      {"e4m3:tensor:delayed=0", {"'0'", "delayed=H"}},
      {"e4m3:tensor:delayed=16,median", {"'median'", "max, recent, margin=M"}},
      {"e4m3:tensor:de_target=e2m1", {"'e2m1'", "e4m3, e5m2"}},
      {"e4m3:tensor:scale=pow2:scale=fp32", {"'scale' given twice"}},
      {"e4m3:tensor:de", {"'de' is not KEY=VALUE"}},
      {"e4m3:tensor:", {"empty field"}},
      {"e4m3:tensor:row", {"'row' is not KEY=VALUE"}},
      {"e4m3:tensor:eps_add=fp16", {"'fp16'", "fp32, fp64"}},
      {"e4m3:g32:scale=e8m0:de=coat", {"scale=e8m0 does not apply"}},
      {"e4m3:g32:delayed=16", {"per-tensor"}},
      {"e4m3:tensor:delayed=16:de=coat", {"cannot be combined"}},
      {"e4m3:tensor:delayed=16:scale=pow2", {"delayed"}},
      {"e4m3:g128:de=robust:eps=1e-10", {"robust"}},
      {"bf16:g128", {"scale=none", "tensor"}},
      {"bf16:tensor:de=coat", {"16-bit"}},
      {"fp16:tensor:scale=e8m0", {"scale=none, fp32 or pow2"}},
      {"fp16:tensor:round=stochastic", {"round=nearest"}},
      {"e4m3:tensor:scale=none", {"needs a scale"}},
  };
  for (const auto& c : cases) {
    try {
      QuantSpec::parse(c.text);
      ADD_FAILURE() << "accepted '" << c.text << "'";
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& m : c.must_contain) EXPECT_NE(msg.find(m), std::string::npos) << "'" << c.text << "': " << msg;
    }
  }
}

TEST(QuantSpecValidate, HandBuiltSpecs) {
  QuantSpec s;  // default: e4m3 per-tensor fp32
  EXPECT_NO_THROW(s.validate());
  s.granularity = Granularity::Group;
  s.group_size = 0;
  EXPECT_THROW(s.validate(), UsageError);
  s.group_size = 64;
  s.eps = -1;
  EXPECT_THROW(s.validate(), UsageError);
  s.eps = 0;
  s.format = Format::E8M0;
  EXPECT_THROW(s.validate(), UsageError);
}

TEST(QuantSpecGeometry, GroupGridsAndBounds) {
  const QuantSpec g128 = QuantSpec::parse("e4m3:g128");
  GroupGeometry g = group_geometry(g128, Shape{217, 300});
  EXPECT_EQ(g.rows, 217);
  EXPECT_EQ(g.cols, 300);
  EXPECT_EQ(g.grid_rows, 217);
  EXPECT_EQ(g.grid_cols, 3);  // 128 + 128 + 44
  int64_t r0, r1, c0, c1;
  g.group_bounds(5, r0, r1, c0, c1);  // row 1, third group: the short one
  EXPECT_EQ(r0, 1);
  EXPECT_EQ(r1, 2);
  EXPECT_EQ(c0, 256);
  EXPECT_EQ(c1, 300);
  g = group_geometry(QuantSpec::parse("e4m3:b128x128"), Shape{2, 200, 300});
  EXPECT_EQ(g.rows, 400);
  EXPECT_EQ(g.grid_rows, 4);
  EXPECT_EQ(g.grid_cols, 3);
  g.group_bounds(11, r0, r1, c0, c1);
  EXPECT_EQ(r0, 384);
  EXPECT_EQ(r1, 400);
  EXPECT_EQ(c0, 256);
  EXPECT_EQ(c1, 300);
  g = group_geometry(QuantSpec::parse("e4m3:col"), Shape{5, 7});
  EXPECT_EQ(g.num_groups(), 7);
  EXPECT_EQ(g.group_rows, 5);
  g = group_geometry(QuantSpec::parse("e4m3:tensor"), Shape{});
  EXPECT_EQ(g.num_groups(), 1);
  EXPECT_EQ(g.numel(), 1);
  g = group_geometry(QuantSpec::parse("e4m3:row"), Shape{1000});
  EXPECT_EQ(g.num_groups(), 1);  // a 1-D tensor is one row
  EXPECT_EQ(group_geometry(g128, Shape{0, 128}).num_groups(), 0);
  EXPECT_THROW(group_geometry(g128, Shape{4, -1}), UsageError);
}

}  // namespace
}  // namespace fp8sim
