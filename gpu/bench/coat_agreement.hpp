#pragma once
// Agreement of fp8sim's fused FP8 AdamW + DE kernel with COAT's own kernel on the same inputs:
// scripts/bench_peers.py --coat-dump writes COAT's states after two steps from COAT's initial
// state; this runs fp8sim's kernel on the same inputs (step 1 from the initial state, step 2 from
// COAT's step-1 state) and counts equal codes, scales, k, c and parameters. Groups whose new
// moment holds an exact zero or a single magnitude are "degenerate" (COAT's kernel mishandles
// them, docs/numerics.md, "Dynamic Range Expansion") and are reported apart.
#include <string>

#include "sim/bench/bench.hpp"

namespace fp8sim::gpu {

bench::CoatAgreement coat_agreement(const std::string& states_dir);

}  // namespace fp8sim::gpu
