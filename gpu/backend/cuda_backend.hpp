#pragma once
// The CUDA implementation of gpu::Backend (sim/backend/backend.hpp): compare's operations through
// gpu/formats, gpu/quant, gpu/optim and gpu/gemm, bench through gpu/bench, speed's kernel timing
// through gpu/speed. The GPU module hands one out (gpu/module/api.cpp); the GPU tests make their own.
#include <memory>

#include "sim/backend/backend.hpp"

namespace fp8sim::gpu {

// Cheap: no CUDA call until an operation or device() runs. device() says whether a GPU is usable;
// an operation without one throws Error naming why.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace fp8sim::gpu
