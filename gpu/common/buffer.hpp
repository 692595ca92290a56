#pragma once
// RAII device memory (plain cudaMalloc: no managed memory anywhere in fp8sim) and the few
// host<->device copies the drivers need. Usable from .cu and .cpp files (no fmt here).
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "gpu/common/cuda_check.hpp"

namespace fp8sim::gpu {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { allocate(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  // Allocates n elements (at least one byte, so a zero-size tensor still has a valid pointer).
  void allocate(size_t n) {
    release();
    void* p = nullptr;
    FP8SIM_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T) > 0 ? n * sizeof(T) : 1));
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  void release() {
    if (p_) cudaFree(p_);  // never throws from a destructor; a sticky error surfaces elsewhere
    p_ = nullptr;
    n_ = 0;
  }

  // At least n elements (reallocated, contents lost, only when smaller): scratch that grows and
  // never shrinks. Returns get().
  T* reserve(size_t n) {
    if (n_ < n) allocate(n);
    return p_;
  }

  T* get() { return p_; }
  const T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const T* host, size_t n, cudaStream_t s = nullptr) {
    if (n_ < n) allocate(n);
    if (n) FP8SIM_CUDA_CHECK(cudaMemcpyAsync(p_, host, n * sizeof(T), cudaMemcpyHostToDevice, s));
    FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  void upload(const std::vector<T>& host, cudaStream_t s = nullptr) { upload(host.data(), host.size(), s); }
  void download(T* host, size_t n, cudaStream_t s = nullptr) const {
    if (n) FP8SIM_CUDA_CHECK(cudaMemcpyAsync(host, p_, n * sizeof(T), cudaMemcpyDeviceToHost, s));
    FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::vector<T> download(cudaStream_t s = nullptr) const {
    std::vector<T> h(n_);
    download(h.data(), n_, s);
    return h;
  }
  // Fills every byte with `byte` (tests poison outputs before a run to catch unwritten elements).
  void fill_bytes(int byte, cudaStream_t s = nullptr) {
    if (n_) FP8SIM_CUDA_CHECK(cudaMemsetAsync(p_, byte, n_ * sizeof(T), s));
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host, cudaStream_t s = nullptr) {
  DeviceBuffer<T> d(host.size());
  d.upload(host, s);
  return d;
}

// Runs launch(d) with d = N zeroed device counters and returns them in h (the GPU test hooks:
// launch enqueues its kernels on the legacy default stream).
template <int N, class Launch>
void device_counters(unsigned long long (&h)[N], Launch launch) {
  DeviceBuffer<unsigned long long> d(N);
  d.fill_bytes(0);
  launch(d.get());
  FP8SIM_CUDA_CHECK_LAUNCH();
  d.download(h, N);
}

// An owned CUDA stream (streams are passed explicitly everywhere; nothing uses the legacy
// default stream implicitly except where a caller passes nullptr on purpose).
class Stream {
 public:
  Stream() { FP8SIM_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { FP8SIM_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace fp8sim::gpu
