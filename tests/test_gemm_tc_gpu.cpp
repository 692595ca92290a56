// The tensor-core arithmetic model (sim/gemm/tc_model.hpp) against the H200's own instructions
// (gpu/gemm/tc_probe: wgmma and mma.sync, FP8 in every pairing and BF16, one and four chained
// steps) on every case family of sim/gemm/tc_cases.hpp: every output bit must match. Then the
// cuBLASLt GEMMs fp8sim runs (per-tensor fast and split accumulation, row-wise, 1x128 x 128x128
// and 1x128 x 1x128 block scales) against the model's candidate accumulation schedules (promotion
// interval, how a promoted block is added, the order of the epilogue's scale multiplications):
// the test prints how many outputs each candidate reproduces and requires one that reproduces
// every output of every shape whose algorithm does not split K.
// FP8SIM_TC_DUMP=DIR writes the raw GPU outputs of the first cases of each probe, and of each
// GEMM, under DIR (for fitting a model offline).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpu/backend/cuda_backend.hpp"
#include "gpu/common/buffer.hpp"
#include "gpu/gemm/tc_probe.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_cases.hpp"
#include "sim/gemm/tc_model.hpp"
#include "tests/support/gpu_test.hpp"

namespace fp8sim {
namespace {

using gemm::TcArith;
using gemm::TcCases;
using gemm::TcFamily;
using gemm::TcTerm;

int type_code(Format f) { return f == Format::E4M3 ? 0 : (f == Format::E5M2 ? 1 : 2); }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const char* dump_dir() { return std::getenv("FP8SIM_TC_DUMP"); }

void dump(const std::string& name, const void* p, size_t bytes) {
  if (!dump_dir()) return;
  std::ofstream f(std::string(dump_dir()) + "/" + name, std::ios::binary);
  f.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes));
}

std::vector<TcTerm> split_all(const std::vector<uint8_t>& m, Format f) {
  const int t = type_code(f);
  const size_t n = f == Format::BF16 ? m.size() / 2 : m.size();
  std::vector<TcTerm> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = gemm::tc_split(f == Format::BF16 ? static_cast<uint32_t>(m[2 * i] | (m[2 * i + 1] << 8)) : m[i], t);
  return out;
}

// The model's outputs for every case (cases x 64 x 8).
std::vector<float> model_outputs(const TcCases& t) {
  const TcArith ar = gemm::tc_arith_sm90(type_code(t.a_format));
  const auto xa = split_all(t.a, t.a_format), xb = split_all(t.bt, t.b_format);
  const int mba = gemm::tc_mantissa_bits(type_code(t.a_format)), mbb = gemm::tc_mantissa_bits(type_code(t.b_format));
  const int64_t K = t.k();
  std::vector<float> d(static_cast<size_t>(t.cases * 512));
#pragma omp parallel for schedule(static)
  for (int64_t cs = 0; cs < t.cases; ++cs)
    for (int r = 0; r < 64; ++r)
      for (int col = 0; col < 8; ++col) {
        float c = t.c[cs * 512 + r * 8 + col];
        const TcTerm* pa = &xa[(cs * 64 + r) * K];
        const TcTerm* pb = &xb[(cs * 8 + col) * K];
        for (int64_t k0 = 0; k0 < K; k0 += ar.group)
          c = gemm::tc_fdpa_terms(ar, pa + k0, 1, mba, pb + k0, 1, mbb, ar.group, c);
        d[cs * 512 + r * 8 + col] = c;
      }
  return d;
}

struct Pair {
  Format a, b;
};
constexpr Pair kPairs[] = {{Format::E4M3, Format::E4M3},
                           {Format::E5M2, Format::E4M3},
                           {Format::E4M3, Format::E5M2},
                           {Format::E5M2, Format::E5M2},
                           {Format::BF16, Format::BF16}};

TEST(TensorCoreModel, EveryInstructionFamilyAndPairingBitExact) {
  FP8SIM_SKIP_WITHOUT_GPU();
  int64_t total = 0, total_bad = 0;
  for (const auto instr : {gpu::TcInstruction::Wgmma, gpu::TcInstruction::Mma})
    for (const Pair& pr : kPairs)
      for (const TcFamily fam : gemm::kTcFamilies)
        for (const int nk : {1, 4}) {
          const int64_t cases = nk == 1 ? 192 : 48;
          const TcCases t = gemm::make_tc_cases(fam, pr.a, pr.b, nk, cases, 7);
          gpu::DeviceBuffer<uint8_t> da, db;
          gpu::DeviceBuffer<float> dc, dd(t.c.size());
          da.upload(t.a);
          db.upload(t.bt);
          dc.upload(t.c);
          gpu::tc_probe_run(instr, pr.a, pr.b, da.get(), db.get(), dc.get(), dd.get(), t.cases, nk, nullptr);
          std::vector<float> g(t.c.size());
          dd.download(g.data(), g.size());
          const std::vector<float> m = model_outputs(t);
          const std::string name = std::string(gpu::tc_instruction_name(instr)) + "_" +
                                   std::string(format_name(pr.a)) + "_" + std::string(format_name(pr.b)) + "_" +
                                   std::string(gemm::tc_family_name(fam)) + "_k" + std::to_string(t.k());
          dump(name + ".f32", g.data(), sizeof(float) * static_cast<size_t>(std::min<int64_t>(cases, 32) * 512));
          int64_t bad = 0;
          for (size_t i = 0; i < g.size(); ++i) {
            if (bits(g[i]) == bits(m[i])) continue;
            if (++bad <= 3) {
              const int64_t cs = static_cast<int64_t>(i) / 512, r = (static_cast<int64_t>(i) % 512) / 8, col = i % 8;
              std::printf("  %s case %lld row %lld col %lld: gpu %08x (%.9g) model %08x (%.9g) c %08x\n",
                          name.c_str(), static_cast<long long>(cs), static_cast<long long>(r),
                          static_cast<long long>(col), bits(g[i]), g[i], bits(m[i]), m[i], bits(t.c[i]));
            }
          }
          std::printf("[ probe ] %-40s %8zu outputs, %6lld differ\n", name.c_str(), g.size(),
                      static_cast<long long>(bad));
          total += static_cast<int64_t>(g.size());
          total_bad += bad;
          EXPECT_EQ(bad, 0) << name;
        }
  std::printf("[ probe ] total %lld outputs, %lld differ\n", static_cast<long long>(total),
              static_cast<long long>(total_bad));
}

// ---- cuBLASLt ---------------------------------------------------------------------------------

// A candidate schedule of a cuBLASLt FP8 GEMM: chained k32 steps from zero for `interval`
// elements of K (0: the whole K), each block added to an fp32 accumulator (fadd, or fma with the
// block's scale for block scaling), then the epilogue's scales.
struct Schedule {
  int interval;  // elements of K per tensor-core block, 0 = all of K (no promotion)
  int epilogue;  // 0: acc * (sx * sw); 1: (acc * sx) * sw; 2: (acc * sw) * sx; 3: acc * (sw * sx)
  bool fma;      // block scaling: acc = fma(blk, s, acc) (one rounding) instead of acc + blk * s
  std::string name() const {
    return "I=" + std::to_string(interval) + " ep=" + std::to_string(epilogue) + (fma ? " fma" : "");
  }
};

float fma_rn(float a, float b, float c) { return static_cast<float>(std::fma(a, b, c)); }

struct GemmCase {
  std::string name;
  int scaling;  // 1 tensor, 2 row, 3 block, 4 block 1x128 x 1x128
  bool fast;
  Format xf, wf;
  int64_t m, n, k;
};

// Y (m, n) under schedule s. Scales as GemmRequest holds them (row-major tables).
std::vector<float> schedule_outputs(const GemmCase& gc, const Schedule& s, const std::vector<TcTerm>& x,
                                    const std::vector<TcTerm>& w, const std::vector<float>& xs,
                                    const std::vector<float>& ws) {
  const TcArith ar = gemm::tc_arith_sm90(0);
  const int mbx = gemm::tc_mantissa_bits(type_code(gc.xf)), mbw = gemm::tc_mantissa_bits(type_code(gc.wf));
  const int64_t M = gc.m, N = gc.n, K = gc.k, kb = (K + 127) / 128;
  const int64_t I = gc.scaling >= 3 ? 128 : (s.interval == 0 ? K : s.interval);
  std::vector<float> y(static_cast<size_t>(M * N));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t b0 = 0; b0 < K; b0 += I) {
        float blk = 0.0f;
        const int64_t b1 = std::min(K, b0 + I);
        for (int64_t k0 = b0; k0 < b1; k0 += 32)
          blk = gemm::tc_fdpa_terms(ar, &x[i * K + k0], 1, mbx, &w[j * K + k0], 1, mbw,
                                    static_cast<int>(std::min<int64_t>(32, b1 - k0)), blk);
        if (gc.scaling >= 3) {
          const int64_t bb = b0 / 128;
          const float sx = xs[i * kb + bb];
          const float sw = gc.scaling == 3 ? ws[(j / 128) * kb + bb] : ws[j * kb + bb];
          const float sc = s.epilogue == 3 ? sw * sx : sx * sw;
          acc = s.fma ? fma_rn(blk, sc, acc) : acc + blk * sc;
        } else {
          acc = (I == K) ? blk : acc + blk;
        }
      }
      if (gc.scaling == 1 || gc.scaling == 2) {
        const float sx = gc.scaling == 1 ? xs[0] : xs[i], sw = gc.scaling == 1 ? ws[0] : ws[j];
        switch (s.epilogue) {
          case 0: acc = acc * (sx * sw); break;
          case 1: acc = (acc * sx) * sw; break;
          case 2: acc = (acc * sw) * sx; break;
          default: acc = acc * (sw * sx); break;
        }
      }
      y[static_cast<size_t>(i * N + j)] = acc;
    }
  return y;
}

TEST(TensorCoreModel, CublasLtSchedules) {
  FP8SIM_SKIP_WITHOUT_GPU();
  auto be = gpu::make_cuda_backend();
  std::vector<GemmCase> cases;
  for (const int64_t k : {16, 32, 48, 96, 128, 160, 384, 1024, 4096, 16384}) {
    cases.push_back({"e4m3 tensor fast", 1, true, Format::E4M3, Format::E4M3, 128, 128, k});
    cases.push_back({"e4m3 tensor split", 1, false, Format::E4M3, Format::E4M3, 128, 128, k});
    cases.push_back({"e5m2xe4m3 tensor split", 1, false, Format::E5M2, Format::E4M3, 128, 128, k});
    cases.push_back({"e5m2xe4m3 tensor fast", 1, true, Format::E5M2, Format::E4M3, 128, 128, k});
    cases.push_back({"e4m3 row split", 2, false, Format::E4M3, Format::E4M3, 128, 128, k});
    if (k % 128 == 0) {
      cases.push_back({"e4m3 block 1x128x128x128", 3, false, Format::E4M3, Format::E4M3, 128, 128, k});
      cases.push_back({"e4m3 block 1x128x1x128", 4, false, Format::E4M3, Format::E4M3, 128, 128, k});
    }
  }
  std::vector<Schedule> schedules;
  for (const int iv : {0, 32, 64, 128, 256, 512})
    for (const int ep : {0, 1, 2, 3}) schedules.push_back({iv, ep, false});
  for (const int ep : {0, 3}) schedules.push_back({128, ep, true});

  std::map<std::string, std::map<std::string, std::pair<int64_t, int64_t>>> tally;  // config -> schedule -> (match, total)
  uint64_t seed = 100;
  for (const GemmCase& gc : cases) {
    for (const TcFamily fam : {TcFamily::Random, TcFamily::Narrow}) {
      ++seed;
      gpu::GemmRequest r;
      r.m = gc.m;
      r.n = gc.n;
      r.k = gc.k;
      r.x_format = gc.xf;
      r.w_format = gc.wf;
      r.scaling = gc.scaling;
      r.fast_accum = gc.fast;
      // Operands: 64-row panels of the probe families (their B rows are independent draws too).
      const int64_t panels_x = (gc.m + 63) / 64, nkk = (gc.k + 31) / 32;
      const TcCases tx = gemm::make_tc_cases(fam, gc.xf, gc.xf, static_cast<int>(nkk), panels_x, seed);
      const TcCases tw = gemm::make_tc_cases(fam, gc.wf, gc.wf, static_cast<int>(nkk), (gc.n + 63) / 64, seed + 77);
      r.x_codes.resize(static_cast<size_t>(gc.m * gc.k));
      r.w_codes.resize(static_cast<size_t>(gc.n * gc.k));
      for (int64_t i = 0; i < gc.m; ++i)
        for (int64_t k = 0; k < gc.k; ++k) r.x_codes[i * gc.k + k] = tx.a[static_cast<size_t>(i * tx.k() + k)];
      for (int64_t j = 0; j < gc.n; ++j)
        for (int64_t k = 0; k < gc.k; ++k) r.w_codes[j * gc.k + k] = tw.a[static_cast<size_t>(j * tw.k() + k)];
      // Scales: not powers of two (so that the order of the multiplications shows).
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<float> u(0.5f, 2.0f);
      const int64_t kb = (gc.k + 127) / 128;
      const size_t nx = gc.scaling == 1 ? 1 : (gc.scaling == 2 ? gc.m : gc.m * kb);
      const size_t nw = gc.scaling == 1 ? 1 : (gc.scaling == 2 ? gc.n : (gc.scaling == 3 ? ((gc.n + 127) / 128) * kb : gc.n * kb));
      r.x_scales.resize(nx);
      r.w_scales.resize(nw);
      for (auto& v : r.x_scales) v = u(rng);
      for (auto& v : r.w_scales) v = u(rng);
      const gpu::GemmOutcome out = be->gemm(r);
      const std::string cfg = gc.name + " K=" + std::to_string(gc.k);
      if (!out.supported) {
        std::printf("[ gemm  ] %s: unsupported: %s\n", cfg.c_str(), out.status.c_str());
        continue;
      }
      const std::string algo = out.plan.contains("algo") ? out.plan.at("algo").dump(-1) : "?";
      dump("gemm_" + std::to_string(seed) + ".f32", out.y.data(), out.y.size() * 4);
      std::vector<TcTerm> x(r.x_codes.size()), w(r.w_codes.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = gemm::tc_split(r.x_codes[i], type_code(gc.xf));
      for (size_t i = 0; i < w.size(); ++i) w[i] = gemm::tc_split(r.w_codes[i], type_code(gc.wf));
      std::string best;
      int64_t best_match = -1;
      for (const Schedule& s : schedules) {
        if (gc.scaling >= 3 && s.interval != 128) continue;
        if (gc.scaling < 3 && s.fma) continue;
        const auto y = schedule_outputs(gc, s, x, w, r.x_scales, r.w_scales);
        int64_t match = 0;
        for (size_t i = 0; i < y.size(); ++i) match += bits(y[i]) == bits(out.y[i]);
        auto& t = tally[gc.name][s.name()];
        t.first += match;
        t.second += static_cast<int64_t>(y.size());
        if (match > best_match) {
          best_match = match;
          best = s.name();
        }
      }
      std::printf("[ gemm  ] %-34s %-7s seed %llu: best %s matches %lld / %zu; algo %s\n", cfg.c_str(),
                  std::string(gemm::tc_family_name(fam)).c_str(), static_cast<unsigned long long>(seed), best.c_str(),
                  static_cast<long long>(best_match), out.y.size(), algo.c_str());
    }
  }
  for (const auto& [cfg, per] : tally) {
    std::string line;
    int64_t best = -1, total = 0;
    for (const auto& [s, mt] : per) {
      best = std::max(best, mt.first);
      total = mt.second;
    }
    for (const auto& [s, mt] : per)
      if (mt.first == best) line += " [" + s + "]";
    std::printf("[ gemm  ] %-30s best %lld / %lld:%s\n", cfg.c_str(), static_cast<long long>(best),
                static_cast<long long>(total), line.c_str());
    EXPECT_EQ(best, total) << cfg;
  }
}

}  // namespace
}  // namespace fp8sim
