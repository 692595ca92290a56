#include "gpu/gemm/tc_model_gpu.hpp"

#include "gpu/gemm/tc_model_gpu_launch.hpp"
#include "sim/common/check.hpp"

namespace fp8sim::gpu {

void tc_gemm_cuda(const uint8_t* x, const uint8_t* w, const float* xs, const float* ws, float* y, int64_t m, int64_t n,
                  int64_t k, const gemm::TcGemmConfig& cfg, cudaStream_t stream) {
  gemm::tc_gemm_check(cfg);
  FP8SIM_REQUIRE(m > 0 && n > 0 && k > 0, "tensor-core GEMM: shape must be positive, got {} x {} x {}", m, n, k);
  TcGemmLaunch p;
  auto code = [](Format f) { return f == Format::E4M3 ? 0 : (f == Format::E5M2 ? 1 : 2); };
  p.tx = code(cfg.x_format);
  p.tw = code(cfg.w_format);
  p.scaling = cfg.scaling;
  p.interval = cfg.scaling >= 3 ? 128 : ((cfg.fast_accum || p.tx == 2) ? k : cfg.promote_interval);
  p.y_bf16 = cfg.y_format == Format::BF16;
  tc_gemm_launch(x, w, xs, ws, y, m, n, k, p, stream);
}

}  // namespace fp8sim::gpu
