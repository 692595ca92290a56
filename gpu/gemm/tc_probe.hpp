#pragma once
// Single tensor-core instructions on batches of independent 64x8 problems, for measuring the
// hardware's inner-product arithmetic (sim/gemm/tc_model.hpp models it; tests/test_gemm_tc_gpu.cpp
// compares the two). Each case is D (64, 8) = A (64, K) * B (K, 8) + C (64, 8) with K = nk times
// the instruction's K, computed by nk instructions issued back to back into one accumulator, as a
// GEMM main loop does:
//   wgmma: wgmma.mma_async m64n8k32 (FP8) or m64n8k16 (BF16), A and B from shared memory, one
//          warpgroup per case;
//   mma:   mma.sync m16n8k32 (FP8) or m16n8k16 (BF16), one warp per 16 rows of the case.
// Device layouts per case, all row-major: A (64, K) elements, Bt (8, K) elements (B transposed:
// both operands K-major, the only layout FP8 has on sm_90), C and D (64, 8) fp32. Element size is
// 1 byte (FP8 codes) or 2 (BF16 bits).
#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "sim/formats/format.hpp"

namespace fp8sim::gpu {

enum class TcInstruction : uint8_t { Wgmma, Mma };
std::string_view tc_instruction_name(TcInstruction i);

// a_format, b_format: E4M3 or E5M2 each, or both BF16. Throws fp8sim::Error for other formats, for
// nk < 1 and when the device is not sm_90 (the kernels are sm_90a code).
void tc_probe_run(TcInstruction instr, Format a_format, Format b_format, const void* a, const void* bt, const float* c,
                  float* d, int64_t cases, int nk, cudaStream_t stream);

}  // namespace fp8sim::gpu
