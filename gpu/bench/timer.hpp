#pragma once
// Kernel timing as METHOD.md asks: warm-up launches first, then repeated launches timed one by one
// with CUDA events, each preceded (outside the timed region) by an L2 flush, reported as median /
// min / max. Also the same-run ceiling: device-to-device copy bandwidth (bytes read + written).
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "gpu/common/buffer.hpp"
#include "sim/common/json.hpp"

namespace fp8sim::gpu {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
  std::vector<float> samples_ms;
  Json to_json() const;  // {median_ms, min_ms, max_ms, reps}
};

class BenchTimer {
 public:
  // Allocates an L2-flush buffer of max(2 x L2, 256 MiB) on the device. lead_us: how long the GPU
  // stays busy before each timed launch's start event, so that the host has enqueued the launch
  // before the GPU reaches it (host-side launch work is never timed): the read flush is repeated
  // until it lasts lead_us (the GPU stays as busy as it is in training; an idle GPU-side wait
  // made the staged and DE quantizers 1-2% slower on the H200), or, for unflushed timings and the
  // write flush, one thread waits that long (gpu_wait_us).
  explicit BenchTimer(cudaStream_t stream, bool flush_write = false, double lead_us = 0.0);
  ~BenchTimer();
  BenchTimer(const BenchTimer&) = delete;
  BenchTimer& operator=(const BenchTimer&) = delete;

  // `launch` enqueues the work on the timer's stream. warmup untimed runs, then reps timed runs.
  // flush_l2 = false times back-to-back runs with a warm cache (for inputs that are meant to be
  // cache-resident, e.g. the second stage of a two-stage reduction).
  Timing time(const std::function<void(cudaStream_t)>& launch, int warmup, int reps, bool flush_l2 = true);
  // Evicts the L2 by reading the flush buffer (asynchronous on the stream). A read, not a write:
  // a written buffer leaves up to a whole L2 of dirty lines whose write-back then lands inside the
  // next timed launch (up to 60 MB of extra DRAM traffic on an H200). flush_write selects the
  // write anyway, to compare with numbers taken that way.
  void flush();
  cudaStream_t stream() const { return stream_; }
  // Read flushes before each flushed timed launch (1 without a lead).
  int lead_flushes() const { return lead_flushes_; }

 private:
  cudaStream_t stream_;
  DeviceBuffer<unsigned char> flush_buf_;
  DeviceBuffer<uint32_t> flush_sink_;
  bool flush_write_ = false;  // flush by writing (the old method, for comparison)
  double lead_us_ = 0.0;      // GPU-side lead before each timed launch
  int lead_flushes_ = 1;      // read flushes per timed launch (together at least lead_us_)
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Device-to-device cudaMemcpyAsync of `bytes` (timed as above). Returns the timing; bandwidth is
// 2 * bytes / median (read + write).
Timing time_device_copy(BenchTimer& timer, size_t bytes, int warmup, int reps);

}  // namespace fp8sim::gpu
