#pragma once
// `fp8sim bench`: the plan (which kernels at which sizes), the peers' results merged in, the
// kernel targets (docs/benchmarks.md) evaluated, and the Markdown rendering. The timing itself runs on the GPU
// (gpu/bench/bench_gpu.hpp: Json run_bench(const BenchOptions&)); this part is plain C++ so the
// plan can be written and a result rendered on any machine.
//
// bench.json (the --json document):
//   command, date, machine{...}, ceiling{bytes, median_ms, gbps},
//   kernels: [{kernel, key, op, shape, bytes | flops, median_ms, min_ms, max_ms, reps,
//              gbps | tflops, ceiling_gbps (a same-run copy of as many bytes), ceiling_kind,
//              fraction_of_ceiling, large_copy_gbps, fraction_of_large_copy, peer, peer_median_ms,
//              speedup_vs_peer, peers: [{peer, median_ms, status}], targets{...}, status}],
//   coat_agreement{...} (when COAT's kernel ran), targets_summary{met, missed, unmeasured}
#include <cstdint>
#include <string>
#include <vector>

#include "sim/common/json.hpp"

namespace fp8sim::bench {

// The `ceiling_kind` of a kernel held to a same-run copy of its own bytes (gpu/bench writes it,
// the targets and the Markdown read it; documents without it were held to the large copy).
inline constexpr const char* kSameBytesCeiling = "same-bytes copy";

struct BenchItem {
  std::string key;               // unique within a plan; bench_peers.py files its timings under it
  std::string op;                // copy | cast | quantize | dequantize | amax | adamw | gemm
  std::string label;             // the human name (the `kernel` column)
  std::string spec;              // quantize/dequantize: QuantSpec text; cast: e4m3|e5m2; adamw: state recipe
  std::string dtype = "bf16";    // element type of the input (f32 | bf16)
  std::string variant;           // quantize per-tensor: "jit" | "group-scaling" | "delayed"; amax: "jit" | "stage2"
  std::vector<int64_t> shape;    // tensor shape (quantize, cast, amax)
  int64_t n = 0;                 // adamw: parameters; copy: bytes
  int64_t m = 0, gn = 0, k = 0;  // gemm: Y (m, gn) = X (m, k) W (gn, k)^T
  std::string x_format, w_format, scaling, accum;  // gemm
  bool peers = true;                               // whether bench_peers.py should time a peer under `key`
  bool compile = true;                       // whether the peer includes torch.compile (seconds of compile per item)
  std::vector<std::string> extra_peer_keys;  // other keys whose peers also compare with this kernel
  Json to_json() const;
};

// The launch lead's default: 0.5 ms, more than any launch here needs on the host (after a single
// 65 us flush, torch.compile's wrappers left the H200 idle for up to ~0.2 ms inside the timed span).
constexpr double kLaunchLeadUs = 500.0;

struct BenchOptions {
  std::vector<std::string> ops;  // subset of known_ops(); empty = all
  bool smoke = false;            // tiny sizes, few reps: a < 60 s check that everything runs
  int warmup = 5;
  int reps = 20;
  int gemm_search = 0;           // GEMM configurations timed beyond the heuristic's (CublasLt::plan)
  double gemm_cooldown_s = 2.0;  // idle seconds before each GEMM's timing (ours and the peer's; smoke 0)
  // GPU work enqueued before each timed launch's start event (ours and the peer's: the L2 flush,
  // repeated to last this long): the host enqueues the launch meanwhile, so host-side launch work
  // (argument set-up, Python, torch.compile's guards and launchers) never falls inside the timed
  // interval.
  double launch_lead_us = kLaunchLeadUs;
  bool flush_write = false;     // L2 flush by a 256 MiB write instead of a read (expert option)
  std::string peers_path;       // JSON written by scripts/bench_peers.py (optional) ...
  Json peers;                   // ... as parsed and checked by the caller (null without peers_path)
  std::string coat_states_dir;  // COAT's states from bench_peers.py --coat-dump (optional): code agreement
  std::string command_line;     // recorded in the report
};

const std::vector<std::string>& known_ops();
// Throws UsageError naming an unknown op and listing the valid ones.
void validate_ops(const std::vector<std::string>& ops);

std::vector<BenchItem> make_plan(const BenchOptions& opts);
// {"warmup", "reps", "smoke", "no_compile", "kernels": [item...]}: the input of bench_peers.py.
Json plan_json(const BenchOptions& opts);

// For every kernel entry, attaches the peers filed under its key (all of them, in `peers`) and
// names the fastest successful one `peer` with `peer_median_ms` and `speedup_vs_peer`
// (peer time / our time: > 1 means fp8sim is faster). Returns how many kernels got a peer.
int merge_peers(Json& bench_doc, const Json& peers_doc);
// Fills each kernel's `targets` (the thresholds docs/benchmarks.md lists) and the document's `targets_summary`.
void evaluate_targets(Json& bench_doc);

std::string render_markdown(const Json& bench_doc);
// The human table printed on stdout (one line per kernel): header and rows.
const std::vector<std::string>& table_header();
std::vector<std::vector<std::string>> table_rows(const Json& bench_doc);

}  // namespace fp8sim::bench
