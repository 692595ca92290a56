// Kernels of analyze --device cuda. The error sums add each chunk's elements in element order
// with the CPU's own step (sim/metrics/error_step.hpp); the saturation count rescales every
// element exactly as the encoder did, with sim/quant's FP8SIM_HD scale and expansion functions.
#include <cuda_runtime.h>

#include "gpu/analyze/tensor_metrics_launch.hpp"
#include "gpu/common/cuda_check.hpp"
#include "gpu/common/launch.cuh"
#include "gpu/quant/dmath_gpu.cuh"
#include "gpu/quant/quantize_kernels.cuh"
#include "sim/quant/expand.hpp"

namespace fp8sim::gpu::detail {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

__device__ __forceinline__ double warp_max_f64(double v) {
  for (int off = 16; off > 0; off >>= 1) {
    const double o = __shfl_xor_sync(kFullMask, v, off);
    v = v < o ? o : v;
  }
  return v;
}

// One warp per chunk: each lane takes one of 32 consecutive elements and computes what it
// contributes (error_terms_split: its counts and maxima, and the four terms of the sums); the
// sums alone depend on the order, so every lane adds the 32 lanes' terms in element order (each
// shuffle hands every lane the same term), holding the sums the CPU's sequential loop computes.
// Counts and maxima are merged over the lanes at the chunk's end; lane 0 stores the chunk.
template <InDt D, bool kSelf>
__global__ void __launch_bounds__(kThreads)
    error_sums_kernel(const void* __restrict__ x, const float* __restrict__ y, int64_t n, ErrorSums* sums,
                      unsigned long long* counters) {
  const int lane = threadIdx.x & 31;
  const int64_t chunks = (n + kErrorChunk - 1) / kErrorChunk;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  unsigned long long nan = 0, inf = 0;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); c < chunks; c += stride) {
    const int64_t b = c * kErrorChunk, e = b + kErrorChunk < n ? b + kErrorChunk : n;
    ErrorSums own;  // this lane's counts and maxima
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i0 = b; i0 < e; i0 += 32) {
      const int64_t i = i0 + lane;
      double t[4] = {0, 0, 0, 0};
      if (i < e) {
        const float xv = load_elem<D>(x, i);
        const float yv = kSelf ? xv : y[i];
        const uint32_t a = f32_bits(xv) & 0x7FFFFFFFu;
        nan += a > 0x7F800000u ? 1 : 0;
        inf += a == 0x7F800000u ? 1 : 0;
        error_terms_split(own, xv, yv, t);
      }
      const int m = e - i0 < 32 ? static_cast<int>(e - i0) : 32;
      auto add = [&](int j) {  // lane j's terms, in element order
        s0 += __shfl_sync(kFullMask, t[0], j);
        s1 += __shfl_sync(kFullMask, t[1], j);
        s2 += __shfl_sync(kFullMask, t[2], j);
        s3 += __shfl_sync(kFullMask, t[3], j);
      };
      if (m == 32) {  // a whole group: a fixed trip count the compiler unrolls
#pragma unroll 8
        for (int j = 0; j < 32; ++j) add(j);
      } else {
        for (int j = 0; j < m; ++j) add(j);
      }
    }
    ErrorSums s;
    s.count = static_cast<int64_t>(warp_sum_u64(static_cast<unsigned long long>(own.count)));
    s.nonzero = static_cast<int64_t>(warp_sum_u64(static_cast<unsigned long long>(own.nonzero)));
    s.nonfinite = static_cast<int64_t>(warp_sum_u64(static_cast<unsigned long long>(own.nonfinite)));
    s.nonfinite_out = static_cast<int64_t>(warp_sum_u64(static_cast<unsigned long long>(own.nonfinite_out)));
    s.underflow = static_cast<int64_t>(warp_sum_u64(static_cast<unsigned long long>(own.underflow)));
    s.max_abs_err = warp_max_f64(own.max_abs_err);
    s.max_rel_err = warp_max_f64(own.max_rel_err);
    s.sum_sq_ref = s0;
    s.sum_sq_approx = s1;
    s.sum_sq_err = s2;
    s.sum_dot = s3;
    if (lane == 0) sums[c] = s;
  }
  nan = warp_sum_u64(nan);
  inf = warp_sum_u64(inf);
  if (lane == 0 && (nan | inf)) {
    atomicAdd(&counters[0], nan);
    atomicAdd(&counters[1], inf);
  }
}

// One warp per row segment of a group (row r, group column gj); the segment's max goes to its
// group with atomicMax (fp32 magnitudes order like their bits).
template <InDt D>
__global__ void __launch_bounds__(kThreads)
    group_amax_kernel(const void* __restrict__ x, MetricsGeometry g, uint32_t* amax_bits) {
  const int lane = threadIdx.x & 31;
  const int64_t segs = g.rows * g.grid_cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t sg = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); sg < segs; sg += stride) {
    const int64_t r = sg / g.grid_cols, gj = sg - r * g.grid_cols;
    const int64_t c0 = gj * g.group_cols, c1 = c0 + g.group_cols < g.cols ? c0 + g.group_cols : g.cols;
    uint32_t m = 0;
    for (int64_t c = c0 + lane; c < c1; c += 32) {
      const uint32_t a = f32_bits(load_elem<D>(x, r * g.cols + c)) & 0x7FFFFFFFu;
      m = a < 0x7F800000u && a > m ? a : m;
    }
    m = warp_max_u32(m);
    if (lane == 0 && m != 0) atomicMax(&amax_bits[(r / g.group_rows) * g.grid_cols + gj], m);
  }
}

template <InDt D>
__global__ void __launch_bounds__(kThreads)
    saturated_kernel(const void* __restrict__ x, MetricsGeometry g, SaturationArgs a, unsigned long long* count) {
  const int64_t n = g.rows * g.cols;
  unsigned long long cnt = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float xi = load_elem<D>(x, i);
    if (!is_finite_bits(f32_bits(xi))) continue;
    float v = xi;  // pass-through storage: the magnitude itself
    if (a.by != ScaledBy::None) {
      const int64_t r = i / g.cols, col = i - r * g.cols;
      const int64_t grp = (r / g.group_rows) * g.grid_cols + col / g.group_cols;
      if (a.by == ScaledBy::Expand) {
        v = expand_value(xi, ExpandParams{a.k[grp], a.c[grp], a.s[grp]});
      } else if (a.by == ScaledBy::Multiply) {
        v = mul_rn(xi, a.mult[a.mult_count == 1 ? 0 : grp]);
      } else {
        const float amax = a.tensor_amax ? *a.tensor_amax : f32_from_bits(a.amax_bits[grp]);
        float sq, stored;
        plain_scales(amax_with_eps(amax, a.consts), a.consts, sq, stored);
        v = apply_scale(xi, sq, a.consts);
      }
    }
    cnt += dmath::abs_bits(v) > a.bound ? 1 : 0;
  }
  cnt = warp_sum_u64(cnt);
  if ((threadIdx.x & 31) == 0 && cnt) atomicAdd(count, cnt);
}

template <class F>
void by_dtype(int dtype, F&& f) {
  if (dtype == 0) f.template operator()<InDt::F32>();
  else if (dtype == 1) f.template operator()<InDt::BF16>();
  else f.template operator()<InDt::FP16>();
}

}  // namespace

void launch_error_sums(const void* x, int dtype, const float* y, int64_t n, ErrorSums* sums,
                       unsigned long long* counters, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t chunks = (n + kErrorChunk - 1) / kErrorChunk;
  const int grid = grid_cap((chunks + kWarps - 1) / kWarps, 8);
  by_dtype(dtype, [&]<InDt D>() {
    if (y) error_sums_kernel<D, false><<<grid, kThreads, 0, stream>>>(x, y, n, sums, counters);
    else error_sums_kernel<D, true><<<grid, kThreads, 0, stream>>>(x, y, n, sums, counters);
  });
  FP8SIM_CUDA_CHECK(cudaGetLastError());
}

void launch_group_amax(const void* x, int dtype, const MetricsGeometry& g, uint32_t* amax_bits, cudaStream_t stream) {
  const int64_t groups = ((g.rows + g.group_rows - 1) / g.group_rows) * g.grid_cols;
  FP8SIM_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, static_cast<size_t>(groups) * sizeof(uint32_t), stream));
  const int64_t segs = g.rows * g.grid_cols;
  if (segs == 0) return;
  const int grid = grid_cap((segs + kWarps - 1) / kWarps, 8);
  by_dtype(dtype, [&]<InDt D>() { group_amax_kernel<D><<<grid, kThreads, 0, stream>>>(x, g, amax_bits); });
  FP8SIM_CUDA_CHECK(cudaGetLastError());
}

void launch_saturated_count(const void* x, int dtype, const MetricsGeometry& g, const SaturationArgs& a,
                            unsigned long long* count, cudaStream_t stream) {
  const int64_t n = g.rows * g.cols;
  if (n == 0) return;
  const int grid = grid_cap((n + kThreads - 1) / kThreads, 8);
  by_dtype(dtype, [&]<InDt D>() { saturated_kernel<D><<<grid, kThreads, 0, stream>>>(x, g, a, count); });
  FP8SIM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8sim::gpu::detail
