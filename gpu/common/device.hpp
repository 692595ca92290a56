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

// Selects and queries the process's device once (device 0, or under an MPI / Slurm launcher the
// node-local rank modulo the device count); never throws (no GPU: available = false).
const DeviceInfo& device_info();

}  // namespace fp8sim::gpu
