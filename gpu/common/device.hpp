#pragma once
// Device discovery and RAII device buffers. No managed memory anywhere in fp8sim.
#include <cstddef>
#include <string>

namespace fp8sim::gpu {

struct DeviceInfo {
  bool available = false;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
  size_t l2_bytes = 0;
  std::string why_not;  // when !available: the reason, in one line
};

// Queries device 0 once; never throws (a machine without a GPU gets available = false).
const DeviceInfo& device_info();

}  // namespace fp8sim::gpu
