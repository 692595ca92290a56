// The probe kernels of tc_probe.hpp. Nothing here is tuned for speed: one case per block, operands
// staged through shared memory by plain stores, so that each output is exactly what nk chained
// tensor-core instructions compute from the case's A, B and C.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/cuda_check.hpp"
#include "gpu/gemm/tc_probe_launch.hpp"

namespace fp8sim::gpu {

namespace {

// Operand type codes of the kernels' template parameter: 0 = e4m3, 1 = e5m2, 2 = bf16.
constexpr int kE4M3 = 0, kE5M2 = 1, kBF16 = 2;

// Elements of K per instruction: 32 for FP8, 16 for BF16 (32 bytes of K either way).
template <int T>
constexpr int instr_k() {
  return T == kBF16 ? 16 : 32;
}

// Shared-memory layout of one K step, no swizzle ("core matrices" of 8 rows x 16 bytes, each stored
// as 128 contiguous bytes): row r, byte b (0..31) of the step at (r / 8) * 256 + (b / 16) * 128 +
// (r % 8) * 16 + b % 16. The descriptor's leading-dimension offset (between the two core matrices
// along K) is 128 bytes, its stride offset (between groups of 8 rows) 256 bytes.
__device__ __forceinline__ int core_offset(int r, int byte) {
  return (r >> 3) * 256 + (byte >> 4) * 128 + (r & 7) * 16 + (byte & 15);
}

__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = static_cast<uint64_t>(__cvta_generic_to_shared(p));
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{256 >> 4} << 32);
}

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8SIM_HAS_WGMMA 1
#else
#define FP8SIM_HAS_WGMMA 0
#endif

template <int TA, int TB>
__device__ __forceinline__ void wgmma_step(float (&d)[4], uint64_t da, uint64_t db) {
#if FP8SIM_HAS_WGMMA
#define FP8SIM_WGMMA(SHAPE_TYPES, EXTRA)                                                        \
  asm volatile(                                                                                 \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                               \
      "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {%0, %1, %2, %3}, %4, %5, p" EXTRA ";\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
      : "l"(da), "l"(db), "r"(1))
  if constexpr (TA == kBF16) {
    FP8SIM_WGMMA("m64n8k16.f32.bf16.bf16", ", 1, 1, 0, 0");
  } else if constexpr (TA == kE4M3 && TB == kE4M3) {
    FP8SIM_WGMMA("m64n8k32.f32.e4m3.e4m3", ", 1, 1");
  } else if constexpr (TA == kE4M3 && TB == kE5M2) {
    FP8SIM_WGMMA("m64n8k32.f32.e4m3.e5m2", ", 1, 1");
  } else if constexpr (TA == kE5M2 && TB == kE4M3) {
    FP8SIM_WGMMA("m64n8k32.f32.e5m2.e4m3", ", 1, 1");
  } else {
    FP8SIM_WGMMA("m64n8k32.f32.e5m2.e5m2", ", 1, 1");
  }
#undef FP8SIM_WGMMA
#endif
}

// One block of 128 threads (a warpgroup) per case. Accumulator fragment of m64n8 (per thread 4
// floats): warp w, lane l: d[i] is row 16 w + l / 4 + 8 (i / 2), column 2 (l % 4) + i % 2.
template <int TA, int TB>
__global__ void __launch_bounds__(128)
    wgmma_probe_kernel(const uint8_t* a, const uint8_t* bt, const float* c, float* d, int nk) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int kStepBytes = 32;  // bytes of K per instruction
  const int kbytes = kStepBytes * nk;
  uint8_t* sa = smem;              // nk steps of 64 x 32 bytes (2048 each)
  uint8_t* sb = smem + 2048 * nk;  // nk steps of 8 x 32 bytes (256 each)
  const int64_t cs = blockIdx.x;
  const uint8_t* ca = a + cs * 64 * kbytes;
  const uint8_t* cb = bt + cs * 8 * kbytes;
  for (int i = threadIdx.x; i < 64 * kbytes; i += 128) {
    const int r = i / kbytes, byte = i % kbytes, s = byte / kStepBytes;
    sa[s * 2048 + core_offset(r, byte % kStepBytes)] = ca[i];
  }
  for (int i = threadIdx.x; i < 8 * kbytes; i += 128) {
    const int r = i / kbytes, byte = i % kbytes, s = byte / kStepBytes;
    sb[s * 256 + core_offset(r, byte % kStepBytes)] = cb[i];
  }
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  float acc[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = c[cs * 512 + (16 * w + l / 4 + 8 * (i / 2)) * 8 + 2 * (l % 4) + i % 2];
#if FP8SIM_HAS_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int s = 0; s < nk; ++s) wgmma_step<TA, TB>(acc, smem_desc(sa + s * 2048), smem_desc(sb + s * 256));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
#pragma unroll
  for (int i = 0; i < 4; ++i) d[cs * 512 + (16 * w + l / 4 + 8 * (i / 2)) * 8 + 2 * (l % 4) + i % 2] = acc[i];
}

template <int TA, int TB>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
#define FP8SIM_MMA(SHAPE_TYPES)                                                                                     \
  asm volatile("mma.sync.aligned." SHAPE_TYPES " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
  if constexpr (TA == kBF16) {
    FP8SIM_MMA("m16n8k16.row.col.f32.bf16.bf16.f32");
  } else if constexpr (TA == kE4M3 && TB == kE4M3) {
    FP8SIM_MMA("m16n8k32.row.col.f32.e4m3.e4m3.f32");
  } else if constexpr (TA == kE4M3 && TB == kE5M2) {
    FP8SIM_MMA("m16n8k32.row.col.f32.e4m3.e5m2.f32");
  } else if constexpr (TA == kE5M2 && TB == kE4M3) {
    FP8SIM_MMA("m16n8k32.row.col.f32.e5m2.e4m3.f32");
  } else {
    FP8SIM_MMA("m16n8k32.row.col.f32.e5m2.e5m2.f32");
  }
#undef FP8SIM_MMA
#endif
}

__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// One block of 128 threads per case, warp w computing rows 16 w .. 16 w + 15 with mma.sync. Per
// instruction (32 bytes of K), lane l with g = l / 4, t = l % 4 holds A bytes 4t..4t+3 and 16+4t..
// of rows g and g + 8 (registers a0 = row g low, a1 = row g+8 low, a2 = row g high, a3 = row g+8
// high) and B bytes 4t..4t+3 and 16+4t.. of column g; its accumulators are those of wgmma's
// fragment above.
template <int TA, int TB>
__global__ void __launch_bounds__(128)
    mma_probe_kernel(const uint8_t* a, const uint8_t* bt, const float* c, float* d, int nk) {
  const int kbytes = 32 * nk;
  const int64_t cs = blockIdx.x;
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4;
  const uint8_t* ra = a + cs * 64 * kbytes + (16 * w + g) * kbytes;
  const uint8_t* rb = bt + cs * 8 * kbytes + g * kbytes;
  float acc[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = c[cs * 512 + (16 * w + g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  for (int s = 0; s < nk; ++s) {
    const int o = 32 * s + 4 * t;
    const uint32_t fa[4] = {load_u32(ra + o), load_u32(ra + 8 * kbytes + o), load_u32(ra + o + 16),
                            load_u32(ra + 8 * kbytes + o + 16)};
    const uint32_t fb[2] = {load_u32(rb + o), load_u32(rb + o + 16)};
    mma_step<TA, TB>(acc, fa, fb);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) d[cs * 512 + (16 * w + g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
}

template <int TA, int TB>
void launch(bool wgmma, const void* a, const void* bt, const float* c, float* d, int64_t cases, int nk,
            cudaStream_t stream) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(bt);
  if (wgmma) {
    const size_t smem = size_t{2304} * nk;
    if (smem > 48 * 1024)
      FP8SIM_CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe_kernel<TA, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem)));
    wgmma_probe_kernel<TA, TB><<<static_cast<unsigned>(cases), 128, smem, stream>>>(pa, pb, c, d, nk);
  } else {
    mma_probe_kernel<TA, TB><<<static_cast<unsigned>(cases), 128, 0, stream>>>(pa, pb, c, d, nk);
  }
  FP8SIM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void tc_probe_launch(bool wgmma, int a_type, int b_type, const void* a, const void* bt, const float* c, float* d,
                     int64_t cases, int nk, cudaStream_t stream) {
  if (a_type == kBF16) return launch<kBF16, kBF16>(wgmma, a, bt, c, d, cases, nk, stream);
  if (a_type == kE4M3 && b_type == kE4M3) return launch<kE4M3, kE4M3>(wgmma, a, bt, c, d, cases, nk, stream);
  if (a_type == kE4M3 && b_type == kE5M2) return launch<kE4M3, kE5M2>(wgmma, a, bt, c, d, cases, nk, stream);
  if (a_type == kE5M2 && b_type == kE4M3) return launch<kE5M2, kE4M3>(wgmma, a, bt, c, d, cases, nk, stream);
  return launch<kE5M2, kE5M2>(wgmma, a, bt, c, d, cases, nk, stream);
}

}  // namespace fp8sim::gpu
