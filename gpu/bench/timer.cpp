#include "gpu/bench/timer.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/bench/fill.hpp"
#include "gpu/common/device.hpp"
#include "sim/common/check.hpp"

namespace fp8sim::gpu {

Json Timing::to_json() const {
  Json j = Json::object();
  j["median_ms"] = median_ms;
  j["min_ms"] = min_ms;
  j["max_ms"] = max_ms;
  j["reps"] = reps;
  return j;
}

BenchTimer::BenchTimer(cudaStream_t stream, bool flush_write, double lead_us)
    : stream_(stream), flush_write_(flush_write), lead_us_(lead_us) {
  const size_t l2 = device_info().l2_bytes;
  flush_buf_.allocate((std::max<size_t>(2 * l2, size_t{256} << 20) + 15) / 16 * 16);
  flush_buf_.fill_bytes(0x5A, stream_);  // written once; every flush only reads it
  flush_sink_.allocate(1);
  FP8SIM_CUDA_CHECK(cudaEventCreate(&start_));
  FP8SIM_CUDA_CHECK(cudaEventCreate(&stop_));
  if (lead_us_ > 0 && !flush_write_) {  // how many read flushes make the lead
    flush();
    FP8SIM_CUDA_CHECK(cudaEventRecord(start_, stream_));
    flush();
    FP8SIM_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    FP8SIM_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    FP8SIM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    const double us = ms > 0 ? 1e3 * ms : 1.0;
    lead_flushes_ = std::max(1, static_cast<int>(std::ceil(lead_us_ / us)));
  }
}

BenchTimer::~BenchTimer() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
}

void BenchTimer::flush() {
  if (flush_write_) {  // the value changes so nothing can be elided
    static int value = 0;
    value = (value + 1) & 0xFF;
    flush_buf_.fill_bytes(value, stream_);
    return;
  }
  // A read of at least twice the L2 replaces every line with clean ones.
  read_through(flush_buf_.get(), flush_buf_.size(), flush_sink_.get(), stream_);
}

Timing BenchTimer::time(const std::function<void(cudaStream_t)>& launch, int warmup, int reps, bool flush_l2) {
  FP8SIM_CHECK(reps > 0, "reps must be positive");
  for (int i = 0; i < warmup; ++i) launch(stream_);
  FP8SIM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  Timing t;
  t.reps = reps;
  t.samples_ms.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    // The launch below is enqueued while the GPU is still busy with the flushes (as many as make
    // the lead: 1 with the write flush or no lead) or, where they cannot make it, the wait.
    if (flush_l2)
      for (int f = 0; f < lead_flushes_; ++f) flush();
    if (!flush_l2 || flush_write_) gpu_wait_us(lead_us_, stream_);
    FP8SIM_CUDA_CHECK(cudaEventRecord(start_, stream_));
    launch(stream_);
    FP8SIM_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    FP8SIM_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    FP8SIM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    t.samples_ms.push_back(ms);
  }
  FP8SIM_CUDA_CHECK(cudaGetLastError());
  std::vector<float> s = t.samples_ms;
  std::sort(s.begin(), s.end());
  t.min_ms = s.front();
  t.max_ms = s.back();
  t.median_ms = s.size() % 2 ? s[s.size() / 2] : 0.5 * (static_cast<double>(s[s.size() / 2 - 1]) + s[s.size() / 2]);
  return t;
}

Timing time_device_copy(BenchTimer& timer, size_t bytes, int warmup, int reps) {
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  src.fill_bytes(0x5A, timer.stream());  // never time on zeros (METHOD.md)
  return timer.time(
      [&](cudaStream_t s) {
        FP8SIM_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      warmup, reps);
}

}  // namespace fp8sim::gpu
