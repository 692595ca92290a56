#pragma once
// The AdamW step of one parameter split over data-parallel ranks, each rank stepping its own
// shard with low-precision moments (docs/optimizer.md, "Sharded states"), and the rule that makes
// the ranks' gathered result the one-GPU step's, bit for bit:
//   * FSDP2 (fully_shard) shards every parameter along dim 0: rank r holds rows
//     [r c, (r+1) c) with c = ceil(rows / N) (torch.chunk; the last ranks short or empty), so a
//     shard is a contiguous range of the flattened parameter starting at a multiple of its row
//     length. Moments quantized in 1xG groups of the flattened parameter (sim/optim/lowp_adamw.hpp)
//     never straddle two shards when every shard starts at a multiple of G (any weight whose row
//     length is a multiple of G; a vector whose chunk is). A shard that starts inside a group is
//     refused: the group's statistics would need both ranks' elements (COAT's optimizer, run on
//     FSDP1's flat shards, restarts its groups at each rank's slice instead, so its result depends
//     on the number of ranks).
//   * A per-tensor scale (or NVFP4's per-tensor scale above its group scales) needs the amax of
//     the whole new moment: the ranks all-reduce it (max, which is exact) between the update and
//     the encoding. Per-tensor dynamic range expansion, which also needs the whole moment's
//     minimum, is refused.
//   * Stochastic rounding draws element i's bits from its index in the whole parameter: each shard
//     quantizes with its global offset.
// Delayed scaling (an amax history per tensor) is not sharded here.
#include <cstdint>
#include <span>
#include <vector>

#include "sim/optim/lowp_adamw.hpp"

namespace fp8sim::optim {

// A rank's shard: elements [begin, end) of the flattened parameter (empty when begin == end).
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// FSDP2's shards of a parameter of `shape` over `ranks` ranks (dim-0 chunks, as above). A 0-d
// parameter counts as one row. Throws UsageError for ranks < 1 or a negative dimension.
std::vector<ShardRange> fsdp2_shards(std::span<const int64_t> shape, int64_t ranks);

// Why these shards cannot give the unsharded step's bits under recipe `r` ("" when they can): a
// shard starting inside a 1xG group, or a moment with delayed scaling.
std::string shard_step_problem(const StateRecipe& r, const std::vector<ShardRange>& shards);

// The state of each shard: make_param_state over that range of the moments m0, v0 (n elements),
// each shard quantized with its global offset (what the ranks hold after sharding an initial state).
std::vector<ParamOptimState> make_shard_states(const StateRecipe& r, const float* m0, const float* v0, int64_t n,
                                               const std::vector<ShardRange>& shards, uint64_t param_index,
                                               uint64_t step, int threads = 0);

// One AdamW step of parameter `param_index` as the ranks run it: every shard dequantizes and
// updates its range of p (as lowp_adamw_step does), per-tensor moments take the max over the
// shards of their new amax, and every shard requantizes with its global offset. p and g are the
// whole parameter's n = shards.back().end elements. Throws UsageError naming the problem when
// shard_step_problem() is not empty.
void sharded_lowp_adamw_step(float* p, const float* g, std::vector<ParamOptimState>& states,
                             const std::vector<ShardRange>& shards, const AdamwStepConsts& c, uint64_t param_index,
                             uint64_t step, int threads = 0);

}  // namespace fp8sim::optim
