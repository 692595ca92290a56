// The tensor-core GEMM model (sim/gemm/tc_gemm.hpp) on the GPU's CUDA cores: one thread per output
// runs the same FP8SIM_HD steps (sim/gemm/tc_model.hpp) and the same schedule as the CPU, so the two
// give the same bits. For large shapes; nothing here is tuned.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/gemm/tc_model_gpu_launch.hpp"
#include "sim/gemm/tc_model.hpp"

namespace fp8sim::gpu {

namespace {

template <class Code>
__global__ void tc_gemm_kernel(const Code* x, const Code* w, const float* xs, const float* ws, float* y, int64_t m,
                               int64_t n, int64_t k, TcGemmLaunch p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * n) return;
  const int64_t i = idx / n, j = idx % n;
  const gemm::TcArith ar = gemm::tc_arith_sm90(p.tx);
  const int64_t step = p.tx == 2 ? 16 : 32, kb = (k + 127) / 128;
  float acc = 0.0f;
  for (int64_t b0 = 0; b0 < k; b0 += p.interval) {
    const int64_t b1 = b0 + p.interval < k ? b0 + p.interval : k;
    float blk = 0.0f;
    for (int64_t k0 = b0; k0 < b1; k0 += step) {
      const int cnt = static_cast<int>(b1 - k0 < step ? b1 - k0 : step);
      blk = gemm::tc_fdpa(ar, x + i * k + k0, 1, p.tx, w + j * k + k0, 1, p.tw, cnt, blk);
    }
    acc = gemm::tc_promote(p.scaling, acc, blk, xs, ws, i, j, b0, kb);
  }
  y[idx] = gemm::tc_epilogue(p.scaling, acc, xs, ws, i, j, p.y_bf16);
}

}  // namespace

void tc_gemm_launch(const void* x, const void* w, const float* xs, const float* ws, float* y, int64_t m, int64_t n,
                    int64_t k, const TcGemmLaunch& p, cudaStream_t stream) {
  const int64_t outputs = m * n;
  const unsigned blocks = static_cast<unsigned>((outputs + 127) / 128);
  if (p.tx == 2) {
    tc_gemm_kernel<uint16_t><<<blocks, 128, 0, stream>>>(static_cast<const uint16_t*>(x),
                                                         static_cast<const uint16_t*>(w), xs, ws, y, m, n, k, p);
  } else {
    tc_gemm_kernel<uint8_t><<<blocks, 128, 0, stream>>>(static_cast<const uint8_t*>(x), static_cast<const uint8_t*>(w),
                                                        xs, ws, y, m, n, k, p);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu
