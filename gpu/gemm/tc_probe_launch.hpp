#pragma once
// The nvcc-side entry of tc_probe (no fmt): operand type codes 0 = e4m3, 1 = e5m2, 2 = bf16 (both).
// tc_probe.cpp validates the arguments and calls it.
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8sim::gpu {
void tc_probe_launch(bool wgmma, int a_type, int b_type, const void* a, const void* bt, const float* c, float* d,
                     int64_t cases, int nk, cudaStream_t stream);
}
