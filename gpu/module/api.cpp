// The entry point of libfp8sim_gpu.so, the module the fp8sim binary opens when a command needs
// a GPU (sim/app/gpu_api.hpp): it hands out the one CUDA backend.
#include "gpu/backend/cuda_backend.hpp"
#include "sim/app/gpu_api.hpp"

namespace fp8sim::gpu_api {
namespace {

// Lives until the process ends (the binary never closes the module).
gpu::Backend* backend() {
  static const std::unique_ptr<gpu::Backend> b = gpu::make_cuda_backend();
  return b.get();
}

const Api kApi = {kAbiVersion, backend};

}  // namespace
}  // namespace fp8sim::gpu_api

extern "C" __attribute__((visibility("default"))) const fp8sim::gpu_api::Api* fp8sim_gpu_api() {
  return &fp8sim::gpu_api::kApi;
}
