#include "gpu/gemm/tc_probe.hpp"

#include "gpu/common/cuda_check.hpp"
#include "gpu/gemm/tc_probe_launch.hpp"
#include "sim/common/check.hpp"

namespace fp8sim::gpu {

std::string_view tc_instruction_name(TcInstruction i) { return i == TcInstruction::Wgmma ? "wgmma" : "mma"; }

namespace {
int type_code(Format f) {
  switch (f) {
    case Format::E4M3:
      return 0;
    case Format::E5M2:
      return 1;
    case Format::BF16:
      return 2;
    default:
      throw Error("tc_probe: operand format must be e4m3, e5m2 or bf16");
  }
}
}  // namespace

void tc_probe_run(TcInstruction instr, Format a_format, Format b_format, const void* a, const void* bt, const float* c,
                  float* d, int64_t cases, int nk, cudaStream_t stream) {
  const int ta = type_code(a_format), tb = type_code(b_format);
  FP8SIM_REQUIRE((ta == 2) == (tb == 2), "tc_probe: BF16 pairs only with BF16");
  FP8SIM_REQUIRE(nk >= 1 && nk <= 64, "tc_probe: nk must be 1..64, got {}", nk);
  FP8SIM_REQUIRE(cases >= 0 && cases < (int64_t{1} << 31), "tc_probe: {} cases", cases);
  int dev = 0, major = 0, minor = 0;
  FP8SIM_CUDA_CHECK(cudaGetDevice(&dev));
  FP8SIM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  FP8SIM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  FP8SIM_REQUIRE(major == 9 && minor == 0, "tc_probe: the probe kernels are sm_90a code; this device is sm_{}{}", major,
                 minor);
  if (cases == 0) return;
  tc_probe_launch(instr == TcInstruction::Wgmma, ta, tb, a, bt, c, d, cases, nk, stream);
}

}  // namespace fp8sim::gpu
