#pragma once
// A calibration: kernel times measured on one GPU, keyed like KernelOp::key(), so that a machine
// without a GPU can predict a step. Format (JSON, schema "fp8sim-speed-calibration/1"):
//
//   { "schema": "fp8sim-speed-calibration/1",
//     "device": {"name": "NVIDIA H200", "sm_count": 132, ...},   // where it was measured
//     "created": "2025-11-30T12:00:00Z", "command": "fp8sim calibrate ...",
//     "fp8sim": {"commit": "0123abc...", "kernel_versions": {"gemm": 1, ...}},  // the build that wrote it
//     "copy_gbps": 4270.0,                                        // same-run D2D copy ceiling
//     "measurements": [ {"key": "gemm:bf16*bf16>bf16,mk.nk:4096x4096x4096",
//                        "kind": "gemm", "variant": "bf16*bf16>bf16,mk.nk", "dims": [4096,4096,4096],
//                        "median_ms": 0.17, "min_ms": 0.169, "max_ms": 0.18, "reps": 20,
//                        "flops": 1.37e11, "bytes": 1.0e8, "impl": "cuBLASLt ...", "note": "",
//                        "kernel_version": 1}, ...],             // kernel_versions.hpp; absent: 0
//     "torch": { ...scripts/torch_layer_time.py's document: PyTorch layer times... },
//     "summary": { per kind+variant: best achieved TFLOP/s or GB/s }   // informational only }
//
// Prediction for a KernelOp (documented in arch-speed.md):
//  1. its key was measured: the median time ("measured");
//  2. otherwise a fit from the nearest measurement of the same kind and variant ("fitted"):
//     GEMM and attention scale with flops at the nearest measured shape's TFLOP/s (nearest in
//     log m, n, k; for attention in log seq, batch, heads, head_dim); memory-bound kernels use
//     t = t0 + bytes / GB/s with the nearest (in log bytes) measurement's GB/s net of t0, t0 the
//     smallest median in the file (launch + event overhead); the optimizer scales with params.
//     With no measurement of the same variant, the same kind's other variants are used.
//  3. no measurement of the kind at all: an Error naming the kernel and what to run.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/speed/plan.hpp"

namespace fp8sim::speed {

inline constexpr const char* kCalibrationSchema = "fp8sim-speed-calibration/1";

// How a measuring run times each kernel: untimed warm-up launches, then timed repetitions (three
// times as many for kernels under 50 us), each after an L2-evicting memset.
struct MeasureSettings {
  int warmup = 3;
  int reps = 10;
};

struct Measurement {
  std::string key;
  Kind kind = Kind::Gemm;
  std::string variant;
  std::vector<int64_t> dims;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int64_t reps = 0;
  double flops = 0, bytes = 0;
  std::string impl;  // which implementation ran ("cuBLASLt", "speed kernel", "torch sdpa", ...)
  std::string note;
  // The version of the kernel measured (kernel_versions.hpp); 0: not recorded (a file written before
  // versions were) or not an fp8sim kernel (PyTorch's).
  int version = 0;
  Json to_json() const;
  static Measurement from_json(const Json& j, const std::string& where);  // Error naming `where`
};

struct Prediction {
  double ms = 0;
  bool measured = false;
  std::string source;                 // "measured" or "fitted from <key>"
  const Measurement* from = nullptr;  // the measurement it came from (owned by the calibration)
};

// A kernel family whose times in a calibration were measured at another version than this build's
// kernels (kernel_versions.hpp).
struct StaleFamily {
  std::string family;
  int build_version = 0;
  std::vector<int> calibration_versions;                      // distinct, ascending; 0: not recorded
  int kernels = 0;                                            // distinct kernels predicted from such measurements
  std::string message(const std::string& calibration) const;  // one line, what to do included
};

class Calibration {
 public:
  Json device = Json::object();
  std::string created;
  std::string command;
  std::string commit;  // the git commit of the build that wrote it ("" when not recorded)
  double copy_gbps = 0;
  Json torch;          // PyTorch reference document, or null
  std::string origin;  // file it came from, or "measured in this run"
  // Partial re-measurements since the file was created (`fp8sim calibrate --update`), oldest
  // first: {created, commit, command, families, kernels}; an empty array when there were none.
  Json updates = Json::array();

  static Calibration from_json(const Json& doc, const std::string& origin);
  static Calibration load(const std::filesystem::path& p);
  Json to_json() const;

  void add(Measurement m);  // replaces a measurement with the same key
  // Adds every measurement (newer wins) and keeps `other`'s device/torch when this has none.
  void merge(const Calibration& other);
  const Measurement* find(const std::string& key) const;
  const std::map<std::string, Measurement>& measurements() const { return by_key_; }
  bool empty() const { return by_key_.empty(); }

  Prediction predict(const KernelOp& op) const;
  // Whether anything of this kind and variant was measured (predict() of such a kernel throws
  // otherwise: it never fits across attention or optimizer variants).
  bool has_variant(Kind kind, const std::string& variant) const;
  // The families of `ops`' predictions (each kernel once) whose measurements carry another version
  // than this build's, in kernel_families() order. PyTorch's kernels are never stale.
  std::vector<StaleFamily> stale_families(const std::vector<KernelOp>& ops) const;
  // The shortest measured kernel, at most 10 us: the fixed cost of one launch on the GPU.
  double launch_floor_ms() const;

 private:
  std::map<std::string, Measurement> by_key_;
};

}  // namespace fp8sim::speed
