#pragma once
// The GPU half of `fp8sim bench`: runs the plan of sim/bench/bench.hpp on device 0 and returns
// the bench document (peers merged and targets evaluated when opts.peers_path is set).
// Throws fp8sim::Error when no device is usable. Each kernel entry is independent: one that
// fails (unsupported configuration, out of memory) is recorded with its status and the rest run.
#include "sim/bench/bench.hpp"
#include "sim/common/json.hpp"

namespace fp8sim::gpu {

bench::BenchDoc run_bench(const bench::BenchOptions& opts);

// Machine facts recorded in every GPU report: device name, SMs, memory, L2, compute capability,
// driver and runtime versions, cuBLASLt version.
Json machine_json();

}  // namespace fp8sim::gpu
