#pragma once
// The CUDA implementation of compare::GpuOps (the GPU half of `fp8sim compare`).
#include <memory>

#include "sim/compare/compare.hpp"

namespace fp8sim::gpu {

// Throws fp8sim::Error naming the reason when no CUDA device is usable.
std::unique_ptr<compare::GpuOps> make_gpu_ops();

}  // namespace fp8sim::gpu
