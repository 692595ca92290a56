#pragma once
// Device-side generation of benchmark and test inputs (never zeros: METHOD.md). Values come from
// Philox keyed on (seed, index), so a buffer's contents do not depend on the launch shape.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fp8sim::gpu {

// Normal(0, sigma) values (Box-Muller on two Philox words); exact zeros never occur.
void fill_normal_f32(float* d, size_t n, uint64_t seed, float sigma, cudaStream_t s);
// The same, rounded to bf16 (RNE), stored as raw bits.
void fill_normal_bf16(uint16_t* d, size_t n, uint64_t seed, float sigma, cudaStream_t s);
// Log-normal magnitudes spanning about `decades` decades around `center`, random signs: optimizer
// moments look like this (non-negative when `positive`).
void fill_lognormal_f32(float* d, size_t n, uint64_t seed, float center, float decades, bool positive, cudaStream_t s);
// FP8 codes of Normal(0, sigma) values (RNE, SATFINITE), never the NaN codes.
void fill_normal_fp8(uint8_t* d, size_t n, uint64_t seed, float sigma, bool e4m3, cudaStream_t s);
// Every element = value.
void fill_value_f32(float* d, size_t n, float value, cudaStream_t s);
// Reads every byte of d (bytes a multiple of 16, d 16-byte aligned) and writes nothing but a
// never-taken store to *sink: an L2 flush that leaves no dirty lines behind.
void read_through(const void* d, size_t bytes, uint32_t* sink, cudaStream_t s);
// Occupies the stream for `us` microseconds (one thread polling the GPU's global timer; it touches
// no memory): whatever the host enqueues meanwhile starts only afterwards.
void gpu_wait_us(double us, cudaStream_t s);

}  // namespace fp8sim::gpu
