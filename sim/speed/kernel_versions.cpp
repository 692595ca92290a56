#include "sim/speed/kernel_versions.hpp"

#include <fmt/format.h>

#include "sim/common/check.hpp"

namespace fp8sim::speed {

const std::vector<KernelFamily>& kernel_families() {
  static const std::vector<KernelFamily> families{
      {"gemm", kGemmKernelVersion, "gpu/gemm/cublaslt.cpp (cuBLASLt, the heuristic's first algorithm)"},
      {"rmsnorm", kRmsNormKernelVersion, "gpu/speed/kernels.cu"},
      {"silu_mul", kSiluMulKernelVersion, "gpu/speed/kernels.cu"},
      {"add", kAddKernelVersion, "gpu/speed/kernels.cu"},
      {"rope", kRopeKernelVersion, "gpu/speed/kernels.cu"},
      {"cast_transpose", kCastTransposeKernelVersion, "gpu/speed/kernels.cu"},
      {"transpose", kTransposeKernelVersion, "gpu/speed/kernels.cu"},
      {"quantize_g16", kQuantizeG16KernelVersion, "gpu/speed/kernels.cu"},
      {"group_max", kGroupMaxKernelVersion, "gpu/speed/kernels.cu"},
      {"reduce_max", kReduceMaxKernelVersion, "gpu/speed/kernels.cu"},
      {"amax", kAmaxKernelVersion, "gpu/speed/kernels.cu"},
      {"cross_entropy", kCrossEntropyKernelVersion, "gpu/speed/kernels.cu"},
      {"embedding", kEmbeddingKernelVersion, "gpu/speed/kernels.cu"},
      {"block_quantize", kBlockQuantizeKernelVersion, "gpu/speed/kernels.cu"},
      {"dequantize", kDequantizeKernelVersion, "gpu/speed/kernels.cu"},
      {"adamw_fp8_de", kAdamwFp8DeKernelVersion, "gpu/optim/adamw.cu (adamw_fp8_grouped_cuda)"},
      {"adamw_fp8lm", kAdamwLowpKernelVersion,
       "gpu/optim/adamw.cu (adamw_lowp_cuda's elementwise-state step, the fp8lm moments)"},
      {"adamw_bf16m", kAdamwBf16mKernelVersion, "gpu/optim/adamw.cu (adamw_bf16_moments_cuda)"},
  };
  return families;
}

namespace {

const KernelFamily& named(std::string_view name) {
  for (const KernelFamily& f : kernel_families())
    if (name == f.name) return f;
  FP8SIM_CHECK(false, "no kernel family '{}'", name);
  return kernel_families().front();
}

}  // namespace

const KernelFamily* kernel_family(Kind kind, std::string_view variant) {
  switch (kind) {
    case Kind::Gemm:
      return &named("gemm");
    case Kind::Attention:
      return nullptr;
    case Kind::RmsNormFwd:
    case Kind::RmsNormBwd:
      return &named("rmsnorm");
    case Kind::SiluMulFwd:
    case Kind::SiluMulBwd:
      return &named("silu_mul");
    case Kind::Add:
      return &named("add");
    case Kind::RopeFwd:
    case Kind::RopeBwd:
      return &named("rope");
    case Kind::CastTranspose:
      return &named("cast_transpose");
    case Kind::Transpose:
      return &named("transpose");
    case Kind::QuantizeG16:
      return &named("quantize_g16");
    case Kind::GroupMax:
      return &named("group_max");
    case Kind::ReduceMax:
      return &named("reduce_max");
    case Kind::Amax:
      return &named("amax");
    case Kind::CrossEntropy:
      return &named("cross_entropy");
    case Kind::EmbeddingFwd:
    case Kind::EmbeddingBwd:
      return &named("embedding");
    case Kind::BlockQuantize:
      return &named("block_quantize");
    case Kind::Dequantize:
      return &named("dequantize");
    case Kind::Optimizer:
      if (variant == "adamw_fp32") return nullptr;
      for (const char* f : {"adamw_fp8_de", "adamw_fp8lm", "adamw_bf16m"})
        if (variant == f) return &named(f);
      break;
  }
  throw Error(fmt::format("no kernel family for '{}' kernels of variant '{}'", kind_name(kind), variant));
}

}  // namespace fp8sim::speed
