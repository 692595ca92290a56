// cuBLASLt GEMMs (gpu/gemm/cublaslt) against the Eigen fp32 reference of the dequantized operands
// (sim/gemm), within the tolerance derived from K and the formats, for BF16 and FP8 with
// per-tensor (fast and split accumulation), row-wise and 1x128 x 128x128 block scales, on awkward
// shapes (padded to cuBLASLt's 16-element alignment through gpu::Backend) and Llama-2-7B
// shapes. A mode cuBLASLt refuses on the device must say so (status), never return garbage; and
// the tolerance must catch a wrong scale. Every configuration the search may consider (heuristic's
// and enumerated) is run and checked, and the plan's validation must tell wrong results from right.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu/backend/cuda_backend.hpp"
#include "gpu/common/buffer.hpp"
#include "gpu/gemm/cublaslt.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/gemm_ref.hpp"
#include "sim/quant/quantize.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

struct Mode {
  const char* name;
  Format xf, wf;
  int scaling;  // 0 bf16, 1 tensor, 2 row, 3 block (1x128 x 128x128), 4 block (1x128 x 1x128)
  bool fast;
};

const Mode kModes[] = {{"bf16", Format::BF16, Format::BF16, 0, false},
                       {"e4m3 tensor split", Format::E4M3, Format::E4M3, 1, false},
                       {"e4m3 tensor fast", Format::E4M3, Format::E4M3, 1, true},
                       {"e4m3 row split", Format::E4M3, Format::E4M3, 2, false},
                       {"e4m3 block", Format::E4M3, Format::E4M3, 3, false},
                       {"e4m3 1x128 x 1x128", Format::E4M3, Format::E4M3, 4, false},
                       {"e5m2 x e4m3 tensor split", Format::E5M2, Format::E4M3, 1, false}};

struct Result {
  bool supported;
  gemm::GemmCheck check;
  std::string status;
  Json plan;
};

// Quantizes X (M, K) and W (N, K) on the CPU, runs the GPU GEMM on the codes and checks it.
// `w_scale_factor` corrupts the weight scales handed to the GPU (a deliberate error).
Result run_mode(gpu::Backend& gpu, const Mode& md, const std::vector<float>& x, const std::vector<float>& w, int64_t M,
                int64_t N, int64_t K, float w_scale_factor = 1.0f, int search = 0) {
  gpu::GemmRequest r;
  r.search = search;
  r.m = M;
  r.n = N;
  r.k = K;
  r.x_format = md.xf;
  r.w_format = md.wf;
  r.scaling = md.scaling;
  r.fast_accum = md.fast;
  std::vector<float> xd(x.size()), wd(w.size());
  if (md.scaling == 0) {
    r.x_bf16.resize(x.size());
    r.w_bf16.resize(w.size());
    for (size_t i = 0; i < x.size(); ++i) xd[i] = bf16_to_f32(r.x_bf16[i] = f32_to_bf16_rne(x[i]));
    for (size_t i = 0; i < w.size(); ++i) wd[i] = bf16_to_f32(r.w_bf16[i] = f32_to_bf16_rne(w[i]));
  } else {
    const std::string xs(format_name(md.xf)), ws(format_name(md.wf));
    const char* xg = md.scaling == 1 ? ":tensor" : (md.scaling == 2 ? ":row" : ":g128");
    const char* wg = md.scaling == 1 ? ":tensor" : (md.scaling == 2 ? ":row" : md.scaling == 3 ? ":b128x128" : ":g128");
    const std::vector<int64_t> xshape = {M, K}, wshape = {N, K};
    const QuantizedTensor qx = quantize(x.data(), xshape, QuantSpec::parse(xs + xg));
    const QuantizedTensor qw = quantize(w.data(), wshape, QuantSpec::parse(ws + wg));
    r.x_codes = qx.codes;
    r.w_codes = qw.codes;
    r.x_scales = qx.scales;
    r.w_scales = qw.scales;
    for (auto& s : r.w_scales) s *= w_scale_factor;
    xd = dequantize(qx);
    wd = dequantize(qw);
  }
  std::vector<float> yref(static_cast<size_t>(M * N)), sabs(static_cast<size_t>(M * N));
  gemm::gemm_ref_f32(xd.data(), wd.data(), yref.data(), M, N, K);
  gemm::gemm_abs_f32(xd.data(), wd.data(), sabs.data(), M, N, K);
  const gpu::GemmOutcome out = gpu.gemm(r);
  Result res{out.supported, {}, out.status, out.plan};
  if (!out.supported) return res;
  gemm::GemmNumerics num;
  num.x_format = md.xf;
  num.w_format = md.wf;
  num.y_format = Format::FP32;
  num.fp8 = md.scaling != 0;
  num.fast_accum = md.fast;
  num.block_scaled = md.scaling >= 3;
  res.check = gemm::check_gemm(out.y.data(), yref.data(), sabs.data(), M, N, gemm::gemm_tolerance(K, num));
  return res;
}

std::vector<float> data(size_t n, uint64_t seed) {
  std::vector<float> v = test::lognormal_data(n, seed, 2.0, false);
  return v;
}

void check_shapes(const std::vector<std::array<int64_t, 3>>& shapes, int search = 0) {
  auto gpu = gpu::make_cuda_backend();
  for (const auto& [M, N, K] : shapes) {
    const auto x = data(static_cast<size_t>(M * K), 1 + M), w = data(static_cast<size_t>(N * K), 2 + N);
    for (const auto& md : kModes) {
      const Result r = run_mode(*gpu, md, x, w, M, N, K, 1.0f, search);
      std::string ctx =
          std::string(md.name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
      if (search > 0 && r.supported)
        ctx += " algo=" + r.plan.at("algo").dump(-1) + " searched=" + r.plan.at("searched").dump(-1);
      if (!r.supported) {
        // Refusals are allowed only for the modes cuBLAS documents as optional on sm_90, and must
        // carry cuBLASLt's own status text.
        EXPECT_TRUE(md.scaling == 3 || md.scaling == 2) << ctx << " refused: " << r.status;
        EXPECT_FALSE(r.status.empty()) << ctx;
        std::printf("[ info ] %s: unsupported on this device: %s\n", ctx.c_str(), r.status.c_str());
        continue;
      }
      EXPECT_TRUE(r.check.passed()) << ctx << ": " << r.check.to_json().dump(-1);
      if (search > 0) {
        // The search times something, unless cublasLtMatmulAlgoCheck rejects even the heuristic's
        // own (validated, running) configuration of this mode: then it cannot check any, and the
        // plan says so.
        const std::string note = r.plan.contains("search_note") ? r.plan.at("search_note").as_string() : "";
        if (!note.empty()) std::printf("[ info ] %s: search: %s\n", ctx.c_str(), note.c_str());
        if (note.find("heuristic's own first configuration too") == std::string::npos) {
          EXPECT_GT(r.plan.at("searched").as_number(), 0) << ctx << ": the search timed nothing; " << note;
        }
        // Every candidate but the reference is validated before it is timed.
        EXPECT_GT(r.plan.at("validated").as_number(), 0) << ctx << ": nothing was validated";
        EXPECT_TRUE(r.plan.contains("validation")) << ctx;
        const auto& rejected = r.plan.at("rejected").as_array();
        EXPECT_EQ(static_cast<double>(rejected.size()), r.plan.at("rejected_count").as_number()) << ctx;
        for (const auto& rj : rejected)
          std::printf("[ info ] %s: validation rejected %s\n", ctx.c_str(), rj.dump(-1).c_str());
      }
      std::printf("[ info ] %s: max err/tol %.4f, rel fro err %.3g\n", ctx.c_str(), r.check.max_err_over_tol,
                  r.check.rel_fro_err);
    }
  }
}

TEST(GemmGpu, AwkwardShapesArePaddedAndCorrect) {
  FP8SIM_SKIP_WITHOUT_GPU();
  check_shapes({{1, 16, 16}, {5, 217, 100}, {217, 64, 176}, {64, 192, 64}});
}

TEST(GemmGpu, Llama2Shapes) {
  FP8SIM_SKIP_WITHOUT_GPU();
  check_shapes({{256, 11008, 4096}, {256, 4096, 11008}});
}

// The timed selection of `fp8sim bench` (heuristic candidates plus the search over every
// configuration cuBLASLt accepts) must pick a configuration that computes the same GEMM.
TEST(GemmGpu, SearchedAlgorithmsAreCorrect) {
  FP8SIM_SKIP_WITHOUT_GPU();
  check_shapes({{512, 1024, 4096}, {256, 4096, 11008}, {384, 768, 1024}}, 2000);
}

TEST(GemmGpu, ToleranceCatchesAWrongScale) {
  FP8SIM_SKIP_WITHOUT_GPU();
  auto gpu = gpu::make_cuda_backend();
  const int64_t M = 128, N = 256, K = 4096;
  const auto x = data(static_cast<size_t>(M * K), 5), w = data(static_cast<size_t>(N * K), 6);
  // A weight scale off by a factor of two (a forgotten or inverted scale, a wrong layout) must fail.
  // (Smaller scale errors hide inside the FP8 tensor cores' own accumulation error: with ~14
  // retained bits the GPU's result is only good to ~1-3% of |y| at K = 4096; see gemm_ref.cpp.)
  for (const auto& md : {kModes[1], kModes[3]}) {
    const Result ok = run_mode(*gpu, md, x, w, M, N, K);
    ASSERT_TRUE(ok.supported) << md.name << ": " << ok.status;
    EXPECT_TRUE(ok.check.passed()) << md.name;
    const Result bad = run_mode(*gpu, md, x, w, M, N, K, 2.0f);
    EXPECT_FALSE(bad.check.passed()) << md.name
                                     << ": a factor-2 scale error went unnoticed: " << bad.check.to_json().dump(-1);
  }
}

// ---- every configuration the search may consider, run and checked -------------------------------

// One GEMM's operands quantized on the CPU as run_mode does, on the device (shapes multiples of 16:
// no padding), with the CPU reference and its tolerance. `w_scale_edit` changes the weight scales
// handed to the GPU (row-major table of the mode) after the reference is computed: a deliberate error.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  gpu::GemmConfig cfg;
  std::vector<float> yref, sabs;
  gemm::GemmTolerance tol;
  gpu::DeviceBuffer<unsigned char> x, w;
  gpu::DeviceBuffer<float> xs, ws, y;
  gpu::GemmArgs args;
};

void make_problem(Problem& p, const Mode& md, const std::vector<float>& x, const std::vector<float>& w, int64_t M,
                  int64_t N, int64_t K, const std::function<void(std::vector<float>&)>& w_scale_edit = {}) {
  p.m = M;
  p.n = N;
  p.k = K;
  p.cfg = gpu::GemmConfig{};
  p.cfg.x_format = md.xf;
  p.cfg.w_format = md.wf;
  p.cfg.y_format = Format::FP32;
  p.cfg.fast_accum = md.fast;
  const gpu::GemmScaling scalings[] = {gpu::GemmScaling::None, gpu::GemmScaling::Tensor, gpu::GemmScaling::Row,
                                       gpu::GemmScaling::Block, gpu::GemmScaling::Block1D};
  p.cfg.scaling = scalings[md.scaling];
  std::vector<float> xd(x.size()), wd(w.size());
  if (md.scaling == 0) {
    std::vector<uint16_t> xb(x.size()), wb(w.size());
    for (size_t i = 0; i < x.size(); ++i) xd[i] = bf16_to_f32(xb[i] = f32_to_bf16_rne(x[i]));
    for (size_t i = 0; i < w.size(); ++i) wd[i] = bf16_to_f32(wb[i] = f32_to_bf16_rne(w[i]));
    p.x.upload(reinterpret_cast<const unsigned char*>(xb.data()), xb.size() * 2);
    p.w.upload(reinterpret_cast<const unsigned char*>(wb.data()), wb.size() * 2);
  } else {
    const std::string xs(format_name(md.xf)), ws(format_name(md.wf));
    const char* xg = md.scaling == 1 ? ":tensor" : (md.scaling == 2 ? ":row" : ":g128");
    const char* wg = md.scaling == 1 ? ":tensor" : (md.scaling == 2 ? ":row" : md.scaling == 3 ? ":b128x128" : ":g128");
    const std::vector<int64_t> xshape = {M, K}, wshape = {N, K};
    const QuantizedTensor qx = quantize(x.data(), xshape, QuantSpec::parse(xs + xg));
    const QuantizedTensor qw = quantize(w.data(), wshape, QuantSpec::parse(ws + wg));
    xd = dequantize(qx);
    wd = dequantize(qw);
    p.x.upload(qx.codes);
    p.w.upload(qw.codes);
    std::vector<float> xsc = qx.scales, wsc = qw.scales;
    if (w_scale_edit) w_scale_edit(wsc);
    if (md.scaling == 3) {
      const int64_t kb = (K + 127) / 128, nb = (N + 127) / 128;
      xsc = gpu::vec128_scales_for_cublas(xsc.data(), M, kb);
      wsc = gpu::blk128_scales_for_cublas(wsc.data(), nb, kb);
    } else if (md.scaling == 4) {
      const int64_t kb = (K + 127) / 128;
      xsc = gpu::vec128_scales_for_cublas(xsc.data(), M, kb);
      wsc = gpu::vec128_scales_for_cublas(wsc.data(), N, kb);
    }
    p.xs.upload(xsc);
    p.ws.upload(wsc);
  }
  p.yref.assign(static_cast<size_t>(M * N), 0.0f);
  p.sabs.assign(static_cast<size_t>(M * N), 0.0f);
  gemm::gemm_ref_f32(xd.data(), wd.data(), p.yref.data(), M, N, K);
  gemm::gemm_abs_f32(xd.data(), wd.data(), p.sabs.data(), M, N, K);
  gemm::GemmNumerics num;
  num.x_format = md.xf;
  num.w_format = md.wf;
  num.y_format = Format::FP32;
  num.fp8 = md.scaling != 0;
  num.fast_accum = md.fast;
  num.block_scaled = md.scaling >= 3;
  p.tol = gemm::gemm_tolerance(K, num);
  p.y.allocate(static_cast<size_t>(M * N));
  p.args = gpu::GemmArgs{};
  p.args.x = p.x.get();
  p.args.w = p.w.get();
  p.args.y = p.y.get();
  p.args.x_scale = md.scaling ? p.xs.get() : nullptr;
  p.args.w_scale = md.scaling ? p.ws.get() : nullptr;
}

// Runs one plan into p.y (poisoned first) and returns Y.
std::vector<float> run_plan(gpu::CublasLt& lt, const gpu::GemmPlan& plan, Problem& p) {
  p.y.fill_bytes(0xFF);
  lt.run(plan, p.args, nullptr);
  return p.y.download();
}

std::string describe(const gpu::GemmCandidate& c) {
  std::string s = c.info.to_json().dump(-1);
  if (c.heuristic_rank >= 0) s += " heuristic#" + std::to_string(c.heuristic_rank);
  if (!c.excluded.empty()) s += " excluded: " + c.excluded;
  return s;
}

// Every candidate CublasLt::enumerate lists (the heuristic's and every configuration the search
// enumerates, with no limit or time budget) on two of SearchedAlgorithmsAreCorrect's shapes, for
// tensor, row and both block scalings, against the CPU reference. The heuristic's first that runs is the
// validation's reference: it must be right. Every candidate the search may time must be right, and
// the validation must accept it (agreement with the reference); every candidate the search
// excludes that is wrong must be one the validation rejects, so that removing the exclusion could
// not let it be chosen.
TEST(GemmGpu, EveryEnumeratedCandidateMatchesTheCpuReference) {
  FP8SIM_SKIP_WITHOUT_GPU();
  gpu::CublasLt lt;
  const std::vector<std::array<int64_t, 3>> shapes = {{384, 768, 1024}, {512, 1024, 4096}};
  // tensor split, fast; row; block 1x128 x 128x128; block 1x128 x 1x128
  const Mode modes[] = {kModes[1], kModes[2], kModes[3], kModes[4], kModes[5]};
  for (const auto& [M, N, K] : shapes) {
    const auto x = data(static_cast<size_t>(M * K), 1 + M), w = data(static_cast<size_t>(N * K), 2 + N);
    for (const auto& md : modes) {
      const std::string ctx =
          std::string(md.name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
      Problem p;
      make_problem(p, md, x, w, M, N, K);
      const gpu::GemmShape shape{M, N, K};
      std::string search_note;
      const std::vector<gpu::GemmCandidate> cands = lt.enumerate(shape, p.cfg, p.args, 8, &search_note);
      if (cands.empty()) {
        EXPECT_TRUE(md.scaling == 3 || md.scaling == 2) << ctx << ": the heuristic refused";
        std::printf("[ info ] %s: no candidate on this device\n", ctx.c_str());
        continue;
      }
      const gpu::GemmAgreementTolerance agree_tol = gpu::gemm_agreement_tolerance(K, p.cfg);
      std::vector<float> ref;  // the reference's output (the heuristic's first that runs)
      int heuristic = 0, searched = 0, refused = 0, excluded = 0, excluded_wrong = 0;
      std::vector<std::string> wrong, wrongly_accepted, wrongly_rejected;
      for (const auto& c : cands) {
        const gpu::GemmPlan plan = lt.plan_for(shape, p.cfg, p.args, c);
        if (!plan.supported()) {
          ++refused;
          continue;
        }
        (c.heuristic_rank >= 0 ? heuristic : searched) += 1;
        const std::vector<float> y = run_plan(lt, plan, p);
        const gemm::GemmCheck chk = gemm::check_gemm(y.data(), p.yref.data(), p.sabs.data(), M, N, p.tol);
        if (ref.empty()) {
          ASSERT_GE(c.heuristic_rank, 0) << ctx << ": no heuristic candidate ran";
          EXPECT_TRUE(chk.passed()) << ctx << ": the heuristic's first (the validation's reference) " << describe(c)
                                    << " is wrong: " << chk.to_json().dump(-1);
          ref = y;
          continue;
        }
        const gpu::GemmAgreement g = gpu::check_gemm_agreement(y.data(), ref.data(), M, N, agree_tol);
        const std::string line = describe(c) + " cpu=" + chk.to_json().dump(-1) +
                                 " validation: " + (g.agrees() ? "accepts" : "rejects") + " (" + g.describe() + ")";
        if (!c.excluded.empty()) {
          ++excluded;
          // Each excluded configuration, right or wrong here: the record that the exclusion rule
          // is neither wider nor narrower than what this cuBLASLt gets wrong.
          std::printf("[ excl ] %s: %s %s rel_fro_err %.3g\n", ctx.c_str(), chk.passed() ? "right" : "WRONG",
                      c.info.to_json().dump(-1).c_str(), chk.rel_fro_err);
          if (!chk.passed()) {
            ++excluded_wrong;
            if (g.agrees()) wrongly_accepted.push_back(line);
          }
          continue;
        }
        if (!chk.passed()) {
          wrong.push_back(line);
          if (g.agrees()) wrongly_accepted.push_back(line);
        } else if (!g.agrees()) {
          wrongly_rejected.push_back(line);
        }
      }
      std::printf(
          "[ info ] %s: %d heuristic and %d searched candidates ran (%d refused at plan_for); %d excluded from the "
          "search, %d of them wrong here\n",
          ctx.c_str(), heuristic, searched, refused, excluded, excluded_wrong);
      if (!search_note.empty()) std::printf("[ info ] %s: search: %s\n", ctx.c_str(), search_note.c_str());
      if (search_note.find("heuristic's own first configuration too") == std::string::npos) {
        EXPECT_GT(searched + excluded, 0) << ctx << ": the search enumerated nothing; " << search_note;
      }
      auto listing = [](const std::vector<std::string>& v) {
        std::string s;
        for (size_t i = 0; i < v.size() && i < 20; ++i) s += "\n  " + v[i];
        if (v.size() > 20) s += "\n  ... " + std::to_string(v.size() - 20) + " more";
        return s;
      };
      EXPECT_TRUE(wrong.empty()) << ctx << ": " << wrong.size()
                                 << " candidates the search may time are wrong:" << listing(wrong);
      EXPECT_TRUE(wrongly_accepted.empty()) << ctx << ": the validation accepts " << wrongly_accepted.size()
                                            << " wrong candidates:" << listing(wrongly_accepted);
      EXPECT_TRUE(wrongly_rejected.empty())
          << ctx << ": the validation rejects " << wrongly_rejected.size() << " candidates the CPU check passes ("
          << agree_tol.derivation << "):" << listing(wrongly_rejected);
    }
  }
}

// The validation's criterion on real outputs: a wrong weight scale (one 128x128 block of W, and all
// of them), a corrupted tile of the output and an unwritten element are rejected; the reference
// agrees with itself and with the CPU reference.
TEST(GemmGpu, ValidationRejectsWrongResults) {
  FP8SIM_SKIP_WITHOUT_GPU();
  gpu::CublasLt lt;
  const int64_t M = 384, N = 768, K = 1024;
  const auto x = data(static_cast<size_t>(M * K), 1 + M), w = data(static_cast<size_t>(N * K), 2 + N);
  for (const auto& md : {kModes[1], kModes[3], kModes[4]}) {
    Problem p;
    make_problem(p, md, x, w, M, N, K);
    // The heuristic's first, as the validation's reference is.
    const gpu::GemmPlan plan = lt.plan({M, N, K}, p.cfg, p.args, nullptr, 1, 0);
    if (!plan.supported()) {
      EXPECT_TRUE(md.scaling == 3 || md.scaling == 2) << md.name << " refused: " << plan.status();
      std::printf("[ info ] %s: unsupported on this device: %s\n", md.name, plan.status().c_str());
      continue;
    }
    const std::vector<float> ok = run_plan(lt, plan, p);
    const gemm::GemmCheck chk = gemm::check_gemm(ok.data(), p.yref.data(), p.sabs.data(), M, N, p.tol);
    ASSERT_TRUE(chk.passed()) << md.name << ": " << chk.to_json().dump(-1);
    const gpu::GemmAgreementTolerance tol = gpu::gemm_agreement_tolerance(K, p.cfg);
    EXPECT_TRUE(gpu::check_gemm_agreement(ok.data(), ok.data(), M, N, tol).agrees()) << md.name;
    EXPECT_TRUE(gpu::check_gemm_agreement(ok.data(), p.yref.data(), M, N, tol).agrees())
        << md.name << ": the GPU result and the CPU reference disagree: "
        << gpu::check_gemm_agreement(ok.data(), p.yref.data(), M, N, tol).describe();

    // Wrong scales: the first entry of W's scale table doubled (one 128x128 block for block
    // scaling, one row for row scaling, everything for tensor scaling), then all of them.
    for (const bool all : {false, true}) {
      Problem bad;
      make_problem(bad, md, x, w, M, N, K, [all](std::vector<float>& s) {
        if (all) {
          for (auto& v : s) v *= 2.0f;
        } else {
          s.front() *= 2.0f;
        }
      });
      const std::vector<float> y = run_plan(lt, plan, bad);
      const gpu::GemmAgreement g = gpu::check_gemm_agreement(y.data(), ok.data(), M, N, tol);
      EXPECT_FALSE(g.agrees()) << md.name << (all ? ": all weight scales" : ": one weight scale")
                               << " doubled, yet accepted: " << g.describe();
    }
    // A corrupted 64x32 tile of Y (a 32x64 tile of cuBLAS's D) and one unwritten element.
    std::vector<float> y = ok;
    for (int64_t i = 64; i < 128; ++i)
      for (int64_t j = 32; j < 64; ++j) y[static_cast<size_t>(i * N + j)] *= 1.25f;
    const gpu::GemmAgreement tile = gpu::check_gemm_agreement(y.data(), ok.data(), M, N, tol);
    EXPECT_FALSE(tile.agrees()) << md.name << ": a tile 25% off, yet accepted: " << tile.describe();
    EXPECT_GT(tile.over_tolerance, 0) << md.name << ": the elementwise bound misses a tile 25% off";
    y = ok;
    y[static_cast<size_t>(7 * N + 5)] = NAN;
    EXPECT_EQ(gpu::check_gemm_agreement(y.data(), ok.data(), M, N, tol).nonfinite_mismatch, 1) << md.name;
  }
}

// The criterion alone (no GPU): rounding-sized differences agree; a scaled tile, a wrong block of K
// and a NaN do not; bf16 output rounding is allowed for.
TEST(GemmAgreement, ToleranceSeparatesRoundingFromErrors) {
  const int64_t M = 96, N = 160, K = 512;
  const auto x = data(static_cast<size_t>(M * K), 11), w = data(static_cast<size_t>(N * K), 12);
  std::vector<float> ref(static_cast<size_t>(M * N)), half(static_cast<size_t>(M * N));
  gemm::gemm_ref_f32(x.data(), w.data(), ref.data(), M, N, K);
  // The contribution of K's first 128-block, to model one block's scale applied twice.
  std::vector<float> x0(x.size(), 0.0f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t kk = 0; kk < 128; ++kk) x0[static_cast<size_t>(i * K + kk)] = x[static_cast<size_t>(i * K + kk)];
  gemm::gemm_ref_f32(x0.data(), w.data(), half.data(), M, N, K);
  gpu::GemmConfig cfg;
  cfg.scaling = gpu::GemmScaling::Block;
  cfg.y_format = Format::FP32;
  const gpu::GemmAgreementTolerance tol = gpu::gemm_agreement_tolerance(K, cfg);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd(0.0, 1.0);
  double rms = 0;
  for (float v : ref) rms += static_cast<double>(v) * v;
  rms = std::sqrt(rms / static_cast<double>(ref.size()));
  std::vector<float> t = ref;
  for (auto& v : t) v += static_cast<float>(2e-4 * rms * nd(rng));  // ~10x the FP8 GPUs' own difference
  EXPECT_TRUE(gpu::check_gemm_agreement(t.data(), ref.data(), M, N, tol).agrees())
      << gpu::check_gemm_agreement(t.data(), ref.data(), M, N, tol).describe() << " / " << tol.derivation;
  t = ref;
  for (size_t i = 0; i < t.size(); ++i) t[i] += half[i];  // block 0 of K counted twice
  EXPECT_FALSE(gpu::check_gemm_agreement(t.data(), ref.data(), M, N, tol).agrees());
  t = ref;
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 32; ++j) t[static_cast<size_t>(i * N + j)] *= 1.25f;
  EXPECT_FALSE(gpu::check_gemm_agreement(t.data(), ref.data(), M, N, tol).agrees());
  t = ref;
  t[3] = NAN;
  EXPECT_FALSE(gpu::check_gemm_agreement(t.data(), ref.data(), M, N, tol).agrees());
  // bf16 output: two results rounded to bf16 differently still agree.
  cfg.y_format = Format::BF16;
  const gpu::GemmAgreementTolerance tb = gpu::gemm_agreement_tolerance(K, cfg);
  std::vector<float> r16 = ref, t16 = ref;
  for (size_t i = 0; i < ref.size(); ++i) {
    r16[i] = bf16_to_f32(f32_to_bf16_rne(ref[i]));
    t16[i] = bf16_to_f32(f32_to_bf16_rne(ref[i] * (1.0f + 0x1p-9f)));
  }
  EXPECT_TRUE(gpu::check_gemm_agreement(t16.data(), r16.data(), M, N, tb).agrees())
      << gpu::check_gemm_agreement(t16.data(), r16.data(), M, N, tb).describe();
}

}  // namespace
}  // namespace fp8sim
