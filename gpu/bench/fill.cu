#include "gpu/bench/fill.hpp"
#include "gpu/common/cuda_check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/formats/philox.hpp"

namespace fp8sim::gpu {

namespace {

// Uniform in (0, 1]: never 0, so log() is finite.
__device__ __forceinline__ float uniform01(uint32_t w) { return (static_cast<float>(w >> 8) + 1.0f) * 0x1p-24f; }

__device__ __forceinline__ float normal_at(uint64_t seed, uint64_t i) {
  const float u1 = uniform01(philox_word(seed, 2 * i));
  const float u2 = uniform01(philox_word(seed, 2 * i + 1));
  float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  return z == 0.0f ? 1e-3f : z;  // never an exact zero
}

__global__ void normal_f32_kernel(float* d, size_t n, uint64_t seed, float sigma) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    d[i] = sigma * normal_at(seed, i);
}

__global__ void normal_bf16_kernel(uint16_t* d, size_t n, uint64_t seed, float sigma) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    d[i] = f32_to_bf16_rne(sigma * normal_at(seed, i));
}

__global__ void lognormal_kernel(float* d, size_t n, uint64_t seed, float center, float decades, bool positive) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float z = normal_at(seed, i);
    const float mag = center * exp10f(z * decades * 0.25f);
    const bool neg = !positive && (philox_word(seed ^ 0x9E3779B97F4A7C15ull, i) & 1u);
    d[i] = neg ? -mag : mag;
  }
}

__global__ void normal_fp8_kernel(uint8_t* d, size_t n, uint64_t seed, float sigma, bool e4m3) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = sigma * normal_at(seed, i);
    d[i] = e4m3 ? encode_fp8_rne<E4M3Traits>(x, true) : encode_fp8_rne<E5M2Traits>(x, true);
  }
}

__global__ void value_kernel(float* d, size_t n, float v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    d[i] = v;
}

__global__ void read_through_kernel(const uint4* d, size_t words, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 u = d[i];
    acc ^= u.x ^ u.y ^ u.z ^ u.w;
  }
  if (acc == 0x9E3779B9u && sink) *sink = acc;  // depends on every load, so none is elided
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void wait_kernel(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) __nanosleep(500);
}

int grid_of(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<int>(b < 4096 ? (b ? b : 1) : 4096);
}

}  // namespace

void fill_normal_f32(float* d, size_t n, uint64_t seed, float sigma, cudaStream_t s) {
  normal_f32_kernel<<<grid_of(n), 256, 0, s>>>(d, n, seed, sigma);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_normal_bf16(uint16_t* d, size_t n, uint64_t seed, float sigma, cudaStream_t s) {
  normal_bf16_kernel<<<grid_of(n), 256, 0, s>>>(d, n, seed, sigma);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_lognormal_f32(float* d, size_t n, uint64_t seed, float center, float decades, bool positive, cudaStream_t s) {
  lognormal_kernel<<<grid_of(n), 256, 0, s>>>(d, n, seed, center, decades, positive);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_normal_fp8(uint8_t* d, size_t n, uint64_t seed, float sigma, bool e4m3, cudaStream_t s) {
  normal_fp8_kernel<<<grid_of(n), 256, 0, s>>>(d, n, seed, sigma, e4m3);
  FP8SIM_CUDA_CHECK_LAUNCH();
}
void fill_value_f32(float* d, size_t n, float value, cudaStream_t s) {
  value_kernel<<<grid_of(n), 256, 0, s>>>(d, n, value);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void read_through(const void* d, size_t bytes, uint32_t* sink, cudaStream_t s) {
  read_through_kernel<<<grid_of(bytes / 16), 256, 0, s>>>(static_cast<const uint4*>(d), bytes / 16, sink);
  FP8SIM_CUDA_CHECK_LAUNCH();
}

void gpu_wait_us(double us, cudaStream_t s) {
  if (!(us > 0)) return;
  wait_kernel<<<1, 1, 0, s>>>(static_cast<uint64_t>(us * 1e3));
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace fp8sim::gpu
