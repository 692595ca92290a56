// The tensor-core arithmetic model (sim/gemm/tc_model.hpp) against the H200's own instructions
// (gpu/gemm/tc_probe: wgmma with FP8 in every pairing and BF16, mma.sync with BF16, one and four
// chained steps) on every case family of sim/gemm/tc_cases.hpp: every output bit must match
// (mma.sync with FP8, which the model does not cover, is reported only). Then cuBLASLt's GEMMs
// (per-tensor and row-wise scales with fast and promoted accumulation, 1x128 x 128x128 and
// 1x128 x 1x128 block scales, E4M3 x E4M3 and E5M2 x E4M3, BF16), on the heuristic's first
// algorithm that does not split K, against sim/gemm/tc_gemm.hpp: every output bit must match.
// FP8SIM_TC_DUMP=DIR writes the raw GPU outputs of the first 32 cases of each probe under DIR
// (for fitting a model offline).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "gpu/backend/cuda_backend.hpp"
#include "gpu/common/buffer.hpp"
#include "gpu/gemm/tc_probe.hpp"
#include "sim/compare/compare.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_cases.hpp"
#include "sim/gemm/tc_gemm.hpp"
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

// mma.sync FP8 (tc_mma_sync_fp8_sm90): per output, per instruction, C = the previous result.
std::vector<float> mma_sync_fp8_outputs(const TcCases& t) {
  const int ta = type_code(t.a_format), tb = type_code(t.b_format);
  const int64_t K = t.k();
  std::vector<float> d(static_cast<size_t>(t.cases * 512));
#pragma omp parallel for schedule(static)
  for (int64_t cs = 0; cs < t.cases; ++cs)
    for (int r = 0; r < 64; ++r)
      for (int col = 0; col < 8; ++col) {
        float c = t.c[cs * 512 + r * 8 + col];
        for (int64_t k0 = 0; k0 < K; k0 += 32)
          c = gemm::tc_mma_sync_fp8_sm90(&t.a[(cs * 64 + r) * K + k0], ta, &t.bt[(cs * 8 + col) * K + k0], tb, c);
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
          const bool mma_fp8 = instr == gpu::TcInstruction::Mma && pr.a != Format::BF16;
          const std::vector<float> m = mma_fp8 ? mma_sync_fp8_outputs(t) : model_outputs(t);
          const std::string name = std::string(gpu::tc_instruction_name(instr)) + "_" + std::string(format_name(pr.a)) +
                                   "_" + std::string(format_name(pr.b)) + "_" + std::string(gemm::tc_family_name(fam)) +
                                   "_k" + std::to_string(t.k());
          dump(name + ".f32", g.data(), sizeof(float) * static_cast<size_t>(std::min<int64_t>(cases, 32) * 512));
          int64_t bad = 0;
          for (size_t i = 0; i < g.size(); ++i) {
            if (bits(g[i]) == bits(m[i])) continue;
            if (++bad <= 3) {
              const int64_t cs = static_cast<int64_t>(i) / 512, r = (static_cast<int64_t>(i) % 512) / 8, col = i % 8;
              std::printf("  %s case %lld row %lld col %lld: gpu %08x (%.9g) model %08x (%.9g) c %08x\n", name.c_str(),
                          static_cast<long long>(cs), static_cast<long long>(r), static_cast<long long>(col),
                          bits(g[i]), g[i], bits(m[i]), m[i], bits(t.c[i]));
            }
          }
          std::printf("[ probe ] %-40s %8zu outputs, %6lld differ\n", name.c_str(), g.size(),
                      static_cast<long long>(bad));
          // mma.sync with FP8 operands is not wgmma's arithmetic on sm_90 but FP16 steps
          // (tc_mma_sync_fp8_sm90); its model misses a few cancellations (docs/numerics.md), and
          // cuBLASLt never issues it there: its counts are printed, not required.
          if (!mma_fp8) {
            EXPECT_EQ(bad, 0) << name;
            total += static_cast<int64_t>(g.size());
            total_bad += bad;
          }
        }
  std::printf("[ probe ] total %lld modelled outputs, %lld differ\n", static_cast<long long>(total),
              static_cast<long long>(total_bad));
}

// ---- cuBLASLt ---------------------------------------------------------------------------------

TEST(TensorCoreModel, CublasLtGemmsBitExact) {
  FP8SIM_SKIP_WITHOUT_GPU();
  auto be = gpu::make_cuda_backend();
  int64_t total = 0, total_bad = 0, model_total = 0, model_bad = 0;
  for (const gemm::TcGemmCase& gc : gemm::tc_gemm_suite()) {
    const gemm::TcGemmConfig& c = gc.config;
    const gemm::TcGemmOperands o = gemm::make_tc_gemm_operands(gc);
    const gpu::GemmRequest r = compare::gemm_suite_request(gc, o);
    const gpu::GemmOutcome out = be->gemm(r);
    const std::string name = gc.name();
    if (!out.supported) {
      std::printf("[ gemm  ] %s: unsupported: %s\n", name.c_str(), out.status.c_str());
      ADD_FAILURE() << name << ": " << out.status;
      continue;
    }
    const Json& algo = out.plan.at("algo");
    std::vector<float> y(static_cast<size_t>(gc.m * gc.n));
    gemm::tc_gemm(o.x.data(), o.w.data(), o.x_scales.data(), o.w_scales.data(), y.data(), gc.m, gc.n, gc.k, c);
    // The same model on the GPU's CUDA cores gives the CPU's bits.
    const std::vector<float> yg = be->tensor_core_model(r);
    int64_t gpu_model_bad = 0;
    for (size_t i = 0; i < y.size(); ++i) gpu_model_bad += bits(y[i]) != bits(yg[i]);
    EXPECT_EQ(gpu_model_bad, 0) << name << ": the model on the GPU differs from the CPU's";
    model_total += static_cast<int64_t>(y.size());
    model_bad += gpu_model_bad;
    int64_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      if (bits(y[i]) == bits(out.y[i])) continue;
      if (++bad <= 3)
        std::printf("  %s (%zu, %zu): gpu %08x (%.9g) model %08x (%.9g)\n", name.c_str(), i / gc.n, i % gc.n,
                    bits(out.y[i]), out.y[i], bits(y[i]), y[i]);
    }
    std::printf("[ gemm  ] %-48s %7zu outputs, %5lld differ; algo %s\n", name.c_str(), y.size(),
                static_cast<long long>(bad), algo.dump(-1).c_str());
    if (algo.at("splitk").as_number() > 1) {
      std::printf("[ gemm  ] %s: the heuristic offers only split-K algorithms here; not compared\n", name.c_str());
      continue;
    }
    total += static_cast<int64_t>(y.size());
    total_bad += bad;
    EXPECT_EQ(bad, 0) << name;
  }
  std::printf("[ gemm  ] total %lld outputs compared, %lld differ\n", static_cast<long long>(total),
              static_cast<long long>(total_bad));
  std::printf("[ gemm  ] the model on the GPU: %lld outputs, %lld differ from the CPU's\n",
              static_cast<long long>(model_total), static_cast<long long>(model_bad));
}

}  // namespace
}  // namespace fp8sim
