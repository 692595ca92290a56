#pragma once
// `fp8sim bench`: the plan (which kernels at which sizes), the peers' results merged in, the
// kernel targets (docs/benchmarks.md) evaluated, and the Markdown rendering. The timing itself runs on the GPU
// (gpu/bench/bench_gpu.hpp: BenchDoc run_bench(const BenchOptions&)); this part is plain C++ so the
// plan can be written and a result rendered on any machine.
//
// bench.json (the --json document, BenchDoc::to_json):
//   command, date, machine{...}, warmup, reps, l2_flush, gemm_search, gemm_cooldown_s,
//   launch_lead_us, launch_lead_flushes, smoke,
//   kernels: [{kernel, key, op, shape, bytes | flops, median_ms, min_ms, max_ms, reps,
//              gbps | tflops, ceiling_gbps (a same-run copy of as many bytes), ceiling_kind,
//              fraction_of_ceiling, large_copy_gbps, fraction_of_large_copy, peer, peer_median_ms,
//              speedup_vs_peer, peers: [{peer, median_ms, status}], targets{...}, status}],
//   ceiling{what, bytes, median_ms, gbps}, peers_file, peers_torch, peers_gemm_cooldown_s,
//   peers_launch_lead_us, coat_agreement{...} (when COAT's kernel ran),
//   targets_summary{met, missed, unmeasured}, rerendered (bench --from)
// A document read back (`bench --from`) needs only its kernels, each with `kernel` and `op`: older
// runs lack some members. A number that is null (the writer's NaN) reads back as NaN.
#include <cmath>
#include <cstdint>
#include <optional>
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

// One peer's timing of a kernel, as scripts/bench_peers.py files it.
struct PeerTiming {
  std::string peer;    // e.g. "torch.compile"
  std::string status;  // "ok", or why it did not run
  std::optional<double> median_ms, min_ms, max_ms;
  static PeerTiming from_json(const Json& j);  // a missing peer or status reads as "?"
  Json to_json() const;
};

// The document scripts/bench_peers.py writes (--peers).
struct Peers {
  struct Entry {
    std::string key;  // the plan item it timed
    PeerTiming timing;
  };
  std::vector<Entry> entries;
  std::optional<std::string> torch;  // torch's version
  // The timing settings the peers ran with (from the plan); absent or not a number: not recorded.
  std::optional<double> gemm_cooldown_s, launch_lead_us;
  // Throws Error when there is no `entries` list.
  static Peers from_json(const Json& j);
};

// A kernel target (docs/benchmarks.md): the measured value against its threshold.
struct Target {
  std::string what;
  double target = 0;
  double value = NAN;       // NaN (null): unmeasured, the peer did not run
  std::optional<bool> met;  // null: unmeasured
  // vs_torch_compile: the fraction of the copy ceiling the target needs (above 1: out of reach).
  std::optional<double> needs_fraction_of_ceiling;
  std::optional<bool> reachable;
  static Target from_json(const Json& j);
  Json to_json() const;
};

// A kernel's targets, each where it applies (quantize; adamw with COAT states; FP8 gemm).
struct KernelTargets {
  std::optional<Target> copy_bandwidth, vs_torch_compile, vs_torch_fused, vs_coat_kernel, vs_scaled_mm;
  static KernelTargets from_json(const Json& j);
  Json to_json() const;
};

// One kernel of a bench document: the plan item, its timing and rates, its peers and targets.
struct BenchKernel {
  std::string kernel;  // the plan item's label
  std::optional<std::string> key;
  std::string op;
  std::optional<std::string> spec, dtype, variant;
  std::optional<std::vector<int64_t>> shape;
  std::optional<int64_t> m, n, k;                                 // gemm
  std::optional<std::string> x_format, w_format, scaling, accum;  // gemm
  std::optional<std::vector<std::string>> extra_peer_keys;
  std::optional<std::string> status;  // "ok", "unsupported: ...", "error: ...", "skipped: ..."
  // How the kernel was timed; an amax kernel's note follows its timing in the document.
  std::optional<std::string> note;
  std::optional<std::string> kernel_path;  // adamw
  std::optional<Json> gemm;                // gemm: cuBLASLt's plan (GemmPlan::to_json), kept verbatim
  std::optional<double> median_ms, min_ms, max_ms;
  std::optional<int64_t> reps;
  std::optional<double> bytes, gbps, ceiling_gbps;
  std::optional<std::string> ceiling_kind;  // kSameBytesCeiling, or the fallback; absent in older runs
  std::optional<double> fraction_of_ceiling, large_copy_gbps, fraction_of_large_copy;
  std::optional<int64_t> params;                               // adamw
  std::optional<double> gparams_per_s, state_bytes_per_param;  // adamw
  std::optional<double> flops, tflops;                         // gemm
  std::optional<std::vector<PeerTiming>> peers;                // merge_peers
  std::optional<std::string> peer;                             // the fastest successful peer ...
  std::optional<double> peer_median_ms, speedup_vs_peer;       // ... its time and peer time / ours
  std::optional<KernelTargets> targets;                        // evaluate_targets
  static BenchKernel from_json(const Json& j);
  Json to_json() const;
};

// The same-run device copy every memory-bound kernel is held to.
struct Ceiling {
  std::string what;
  double bytes = NAN, median_ms = NAN;  // NaN (null): the copy recorded none
  double gbps = 0;
  static Ceiling from_json(const Json& j);
  Json to_json() const;
};

// fp8sim's fused AdamW kernel against COAT's on COAT's dumped states (gpu/bench/coat_agreement.hpp).
struct CoatAgreement {
  // n, groups, source, step1, step2 (or status, when the check could not run): rendered verbatim,
  // never read back.
  Json detail = Json::object();
  std::optional<Target> target;  // the share of equal codes against the 99.9% target
  static CoatAgreement from_json(const Json& j);
  Json to_json() const;
};

struct TargetsSummary {
  int64_t met = 0, missed = 0, unmeasured = 0;
  static TargetsSummary from_json(const Json& j);
  Json to_json() const;
};

// The bench document (bench.json); the members are in the document's order.
struct BenchDoc {
  std::optional<std::string> command, date;
  std::optional<Json> machine;  // Backend::machine(): free-form {key: value}, rendered verbatim
  std::optional<int64_t> warmup, reps;
  std::optional<std::string> l2_flush;
  std::optional<int64_t> gemm_search;
  std::optional<double> gemm_cooldown_s, launch_lead_us;
  std::optional<int64_t> launch_lead_flushes;  // absent: a run that waited idle instead of flushing
  std::optional<bool> smoke;
  std::vector<BenchKernel> kernels;
  std::optional<Ceiling> ceiling;
  std::optional<std::string> peers_file, peers_torch;
  // The peers' timing settings: a number, or "not recorded" (rendered verbatim).
  std::optional<Json> peers_gemm_cooldown_s, peers_launch_lead_us;
  std::optional<CoatAgreement> coat_agreement;
  std::optional<TargetsSummary> targets_summary;
  std::optional<std::string> rerendered;  // bench --from: the command that re-evaluated the targets
  // Reads a document written by fp8sim bench --json (throws Error on a member of the wrong type;
  // members it does not know are left out).
  static BenchDoc from_json(const Json& j);
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
  Peers peers;                  // ... as read by the caller (empty without peers_path)
  std::string coat_states_dir;  // COAT's states from bench_peers.py --coat-dump (optional): code agreement
  std::string command_line;     // recorded in the report
};

const std::vector<std::string>& known_ops();
// Throws UsageError naming an unknown op and listing the valid ones.
void validate_ops(const std::vector<std::string>& ops);

std::vector<BenchItem> make_plan(const BenchOptions& opts);
// {"warmup", "reps", "smoke", "no_compile", "kernels": [item...]}: the input of bench_peers.py.
Json plan_json(const BenchOptions& opts);

// For every kernel, attaches the peers filed under its key (all of them, in `peers`) and names
// the fastest successful one `peer` with `peer_median_ms` and `speedup_vs_peer` (peer time / our
// time: > 1 means fp8sim is faster). Returns how many kernels got a peer.
int merge_peers(BenchDoc& doc, const Peers& peers);
// The peers file's provenance and timing settings into the document (path, torch version, idle
// before each GEMM, launch lead), every kernel's earlier peers cleared, then merge_peers: what a
// timed run with --peers records.
int attach_peers(BenchDoc& doc, const Peers& peers, const std::string& path);
// Fills each kernel's `targets` (the thresholds docs/benchmarks.md lists) and the document's `targets_summary`.
void evaluate_targets(BenchDoc& doc);

std::string render_markdown(const BenchDoc& doc);
// The human table printed on stdout (one line per kernel): header and rows.
const std::vector<std::string>& table_header();
std::vector<std::vector<std::string>> table_rows(const BenchDoc& doc);

}  // namespace fp8sim::bench
