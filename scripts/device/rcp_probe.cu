// Reads the H100/H200 hardware reciprocal (MUFU.RCP, PTX rcp.approx.f32) for every fp32
// significand and checks the model of PTX div.full.f32 that sim/formats/divfull.hpp implements:
//   div.full(a, b): if |b| > 2^126 { a *= 1/4; b *= 1/4 }   if |b| < 2^-126 { a *= 2^24; b *= 2^24 }
//                   return RN(a * rcp(b))
// with rcp(1.m * 2^e) = T[m] * 2^-e (T: the table this program writes).
//
// Writes to OUT_DIR:
//   rcp_table.bin   2^23 int8: T[m] minus RN(1 / 1.m), in units of the last place of T[m]
//   rcp_probe.txt   the checks: rcp at other exponents, div.full against the model on random and
//                   targeted operands, with counts of mismatches (0 expected) and the first few.
// Build: nvcc -O2 -arch=sm_90a -o rcp_probe scripts/device/rcp_probe.cu
// Run:   ./rcp_probe OUT_DIR
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

__device__ __forceinline__ float hw_rcp(float b) {
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(b));
  return r;
}
__device__ __forceinline__ float hw_divfull(float a, float b) {
  float q;
  asm("div.full.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(b));
  return q;
}

__global__ void table_kernel(uint32_t* out) {
  const uint32_t m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= (1u << 23)) return;
  out[m] = __float_as_uint(hw_rcp(__uint_as_float(0x3F800000u | m)));
}

// rcp at exponent e (biased 1..253) must be the table's value scaled by 2^-(e-127).
__global__ void exponent_kernel(const uint32_t* T, uint32_t e, unsigned long long* bad, uint32_t* first) {
  const uint32_t m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= (1u << 23)) return;
  const float y = __uint_as_float((e << 23) | m);
  const uint32_t got = __float_as_uint(hw_rcp(y));
  const uint32_t want = T[m] - ((e - 127u) << 23);  // exponent arithmetic on a normal result
  if (got != want) {
    if (atomicAdd(bad, 1ull) == 0) *first = m;
  }
}

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// The model, on the device, from the table.
__device__ float model_rcp(const uint32_t* T, float b) {
  const uint32_t u = __float_as_uint(b);
  const uint32_t a = u & 0x7FFFFFFFu, s = u & 0x80000000u;
  if (a > 0x7F800000u) return b;                        // NaN
  if (a == 0x7F800000u) return __uint_as_float(s);      // 1/Inf = 0
  if (a == 0) return __uint_as_float(s | 0x7F800000u);  // 1/0 = Inf
  const uint32_t e = a >> 23;                           // normal here (the caller scales)
  return __uint_as_float(s | (T[a & 0x7FFFFFu] - ((e - 127u) << 23)));
}
__device__ float model_divfull(const uint32_t* T, float a, float b) {
  const float ab = fabsf(b);
  if (ab > 0x1p126f) {
    a = __fmul_rn(a, 0.25f);
    b = __fmul_rn(b, 0.25f);
  }
  if (ab < 0x1p-126f) {
    a = __fmul_rn(a, 0x1p24f);
    b = __fmul_rn(b, 0x1p24f);
  }
  return __fmul_rn(a, model_rcp(T, b));
}

// kind 0: random bit patterns; 1: a in bf16 x b random; 2: x = a small integer times a random b's
// neighbourhood (quotients near representable ties); 3: b near 448 and |a| <= 2^20;
// 4: b subnormal / huge; 5: a subnormal.
__global__ void divcheck_kernel(const uint32_t* T, int kind, uint64_t seed, uint64_t n, unsigned long long* bad,
                                uint32_t* firsts) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const uint32_t r1 = mix(seed * 0x9E3779B97F4A7C15ULL + 2 * i), r2 = mix(seed * 0x9E3779B97F4A7C15ULL + 2 * i + 1);
  float a, b;
  switch (kind) {
    case 0:
      a = __uint_as_float(r1);
      b = __uint_as_float(r2);
      break;
    case 1:
      a = __uint_as_float(r1 & 0xFFFF0000u);
      b = __uint_as_float((r2 & 0x807FFFFFu) | ((100u + (r2 >> 24) % 50u) << 23));
      break;
    case 2: {
      b = __uint_as_float((r2 & 0x007FFFFFu) | (120u << 23));
      const float k = static_cast<float>(1 + (r1 % 1024)) * 0.0625f;  // quotient k is an fp8 midpoint often
      a = __fmul_rn(k, b);
      a = __uint_as_float(__float_as_uint(a) + (static_cast<int>(r1 >> 28) - 8));
      break;
    }
    case 3:
      b = __uint_as_float(__float_as_uint(448.0f) + (static_cast<int>(r2 % 2001) - 1000));
      a = __uint_as_float((r1 & 0x807FFFFFu) | ((107u + (r1 >> 23) % 40u) << 23));
      break;
    case 4:
      b = (r2 & 1) ? __uint_as_float(r2 & 0x807FFFFFu)
                   : __uint_as_float((r2 & 0x807FFFFFu) | (0xFDu << 23) | ((r2 >> 1) & (1u << 23)));
      a = __uint_as_float(r1);
      break;
    default:
      a = __uint_as_float(r1 & 0x807FFFFFu);
      b = __uint_as_float(r2);
      break;
  }
  const float got = hw_divfull(a, b), want = model_divfull(T, a, b);
  const uint32_t g = __float_as_uint(got), w = __float_as_uint(want);
  const bool both_nan = (g & 0x7FFFFFFFu) > 0x7F800000u && (w & 0x7FFFFFFFu) > 0x7F800000u;
  if (g != w && !both_nan) {
    const unsigned long long k = atomicAdd(bad, 1ull);
    if (k < 8) {
      firsts[4 * k] = __float_as_uint(a);
      firsts[4 * k + 1] = __float_as_uint(b);
      firsts[4 * k + 2] = g;
      firsts[4 * k + 3] = w;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rcp_probe OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const uint32_t N = 1u << 23;
  uint32_t* dT;
  CK(cudaMalloc(&dT, N * 4));
  table_kernel<<<N / 256, 256>>>(dT);
  CK(cudaGetLastError());
  std::vector<uint32_t> T(N);
  CK(cudaMemcpy(T.data(), dT, N * 4, cudaMemcpyDeviceToHost));
  std::vector<int8_t> delta(N);
  long hist[5] = {0, 0, 0, 0, 0};
  long out_of_range = 0;
  for (uint32_t m = 0; m < N; ++m) {
    float y;
    const uint32_t yb = 0x3F800000u | m;
    std::memcpy(&y, &yb, 4);
    const float rn = 1.0f / y;
    uint32_t rb;
    std::memcpy(&rb, &rn, 4);
    const int64_t d = static_cast<int64_t>(T[m]) - static_cast<int64_t>(rb);
    if (d < -2 || d > 2) ++out_of_range;
    else ++hist[d + 2];
    delta[m] = static_cast<int8_t>(d < -127 ? -127 : (d > 127 ? 127 : d));
  }
  FILE* f = std::fopen((dir + "/rcp_table.bin").c_str(), "wb");
  std::fwrite(delta.data(), 1, N, f);
  std::fclose(f);
  FILE* rep = std::fopen((dir + "/rcp_probe.txt").c_str(), "w");
  std::fprintf(rep, "rcp(1.m) - RN(1/1.m) in ulps: -2:%ld -1:%ld 0:%ld +1:%ld +2:%ld, beyond: %ld\n", hist[0], hist[1],
               hist[2], hist[3], hist[4], out_of_range);
  unsigned long long* dbad;
  uint32_t* dfirst;
  CK(cudaMalloc(&dbad, 8));
  CK(cudaMalloc(&dfirst, 4 * 32));
  long exp_bad = 0;
  for (uint32_t e = 1; e <= 253; ++e) {
    CK(cudaMemset(dbad, 0, 8));
    exponent_kernel<<<N / 256, 256>>>(dT, e, dbad, dfirst);
    unsigned long long b;
    uint32_t fm;
    CK(cudaMemcpy(&b, dbad, 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&fm, dfirst, 4, cudaMemcpyDeviceToHost));
    if (b) {
      std::fprintf(rep, "rcp at biased exponent %u: %llu mantissas differ from the scaled table (first m=0x%06x)\n", e,
                   b, fm);
      ++exp_bad;
    }
  }
  std::fprintf(rep, "rcp scaled-table check over biased exponents 1..253: %ld exponents with a difference\n", exp_bad);
  const uint64_t n = 1ull << 28;
  const char* names[] = {"random bits", "bf16 a, normal b",    "near fp8 midpoints",
                         "b near 448",  "b subnormal or huge", "a subnormal"};
  for (int kind = 0; kind < 6; ++kind) {
    CK(cudaMemset(dbad, 0, 8));
    divcheck_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(dT, kind, 1234 + kind, n, dbad, dfirst);
    CK(cudaGetLastError());
    unsigned long long b;
    uint32_t fs[32];
    CK(cudaMemcpy(&b, dbad, 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(fs, dfirst, sizeof fs, cudaMemcpyDeviceToHost));
    std::fprintf(rep, "div.full vs model, %s: %llu of %llu differ\n", names[kind], b,
                 static_cast<unsigned long long>(n));
    for (unsigned long long k = 0; k < b && k < 8; ++k)
      std::fprintf(rep, "  a=0x%08x b=0x%08x hw=0x%08x model=0x%08x\n", fs[4 * k], fs[4 * k + 1], fs[4 * k + 2],
                   fs[4 * k + 3]);
  }
  std::fclose(rep);
  std::printf("rcp_probe: wrote %s/rcp_table.bin and rcp_probe.txt\n", dir.c_str());
  return 0;
}
