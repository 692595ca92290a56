#pragma once
// fp8sim tensor traces: the HDF5 files that scripts/capture_trace.py writes (schema in
// traces/FORMAT.md). This header is the only door to them; HDF5 itself stays inside trace.cpp.
//
// Reading: TraceReader opens a file, validates the schema from metadata alone (one-line
// fp8sim::Error naming what is missing or wrong), and lists every tensor with its role, op,
// module, layer, dtype and shape. Tensor data are read one dataset at a time, in the dtype they
// were stored in: bf16 and fp16 stay as their 16-bit patterns, so a quantizer widens them
// exactly (one rounding from the stored value to FP8, never two).
//
// Writing: TraceWriter writes the same schema (used by tests and by tools that emit traces); it
// writes to a temporary beside the target and renames on commit(), so a failure never leaves a
// partial trace.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/common/buffer.hpp"
#include "sim/common/json.hpp"

namespace fp8sim::trace {

inline constexpr const char* kFormatName = "fp8sim-trace";
inline constexpr int kFormatVersion = 1;  // readers accept files of this major version

// ---- dtypes ---------------------------------------------------------------------------------------
enum class DType : uint8_t { F32, BF16, F16 };
std::string_view dtype_name(DType d);  // "float32", "bfloat16", "float16" (the attribute values)
std::optional<DType> parse_dtype(std::string_view s);
inline size_t dtype_bytes(DType d) { return d == DType::F32 ? 4 : 2; }

// ---- roles ----------------------------------------------------------------------------------------
enum class Role : uint8_t { Weight, Grad, ExpAvg, ExpAvgSq, Activation, ActivationGrad };
inline constexpr Role kAllRoles[] = {Role::Weight,   Role::Grad,       Role::ExpAvg,
                                     Role::ExpAvgSq, Role::Activation, Role::ActivationGrad};
std::string_view role_name(Role r);  // "weight", "grad", "exp_avg", "exp_avg_sq", "activation", "activation_grad"
std::optional<Role> parse_role(std::string_view s);
// weight, grad, exp_avg, exp_avg_sq belong to a parameter; activation(_grad) to a module's data.
inline bool is_param_role(Role r) { return r != Role::Activation && r != Role::ActivationGrad; }

// ---- metadata -------------------------------------------------------------------------------------
struct TensorInfo {
  std::string path;  // HDF5 path, e.g. /steps/step_000295/weight/layers.0.self_attn.q_proj.weight
  std::string name;  // dataset name inside its role group: parameter name, or "<module>.<what>"
  int64_t step = 0;
  Role role = Role::Weight;
  // Parameters: the owning module's kind ("linear", "norm", "embedding", "other").
  // Activations: the op the tensor feeds ("linear_input", "attn_output", "norm_input",
  // "silu_input", "mul_input", "residual_add"); activation grads: "linear_output_grad".
  std::string op;
  std::string module;                // module path, e.g. layers.0.mlp.down_proj
  std::string param;                 // parameter name (param roles); empty otherwise
  std::vector<std::string> modules;  // linear modules that consume this tensor (GEMM pairing)
  std::vector<std::string> aliases;  // other names of a tied parameter (lm_head.weight)
  int layer = -1;                    // transformer block index; -1 outside the blocks
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // as stored (row-major); every dimension > 0
  uint64_t stored_bytes = 0;   // on disk, after compression

  int64_t numel() const;
  uint64_t bytes() const { return static_cast<uint64_t>(numel()) * dtype_bytes(dtype); }
  // The 2-D view quantizers use: cols = last dimension, rows = product of the others (1-D: 1 x n).
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  std::string shape_str() const;  // "(64, 176)"
};

struct StepInfo {
  int64_t step = 0;
  std::string group;                  // /steps/step_000295
  std::string contents;               // "full", "window", "state" or "" (free text)
  std::optional<double> lr;           // learning rate used by this step's optimizer update
  std::optional<double> loss;         // training loss of this step
  std::optional<int64_t> adamw_step;  // AdamW step count before this step's update (t - 1)
  std::vector<size_t> tensors;        // indices into TraceReader::tensors()
};

struct OptimizerInfo {
  std::string name;  // e.g. "torch.optim.AdamW"
  std::optional<double> lr, beta1, beta2, eps, weight_decay;
  Json options;  // optimizer_options attribute (object), null if absent
};

struct TraceHeader {
  int version = kFormatVersion;
  std::string producer, created, command;
  std::string model_kind;  // "llama", "generic", ...
  Json model_config;       // object (models/*.json schema for llama traces); null if absent
  OptimizerInfo optimizer;
  Json training;                                           // object; null if absent
  std::optional<std::pair<int64_t, int64_t>> grad_window;  // [first, last] steps, inclusive
};

// ---- data -----------------------------------------------------------------------------------------
// A tensor as stored. F32 data live in `f32`; BF16/F16 data live in `bits` as 16-bit patterns.
// Buffers (buffer.hpp): a reader sizes them without a zero-fill and writes every element.
struct TensorData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  Buffer<float> f32;
  Buffer<uint16_t> bits;

  size_t size() const { return dtype == DType::F32 ? f32.size() : bits.size(); }
  float value(size_t i) const;   // element i widened to fp32 (exact for every dtype)
  void widen(float* out) const;  // all elements, exact
  Buffer<float> widened() const;
};

struct NonFinite {
  uint64_t nan = 0, inf = 0;
  uint64_t total() const { return nan + inf; }
};
NonFinite count_nonfinite(const TensorData& t);

// Which tensors to visit. Unset fields match everything; `op` and `name_contains` match when empty.
// The `{}` initialisers let callers write Filter{.step = 5, .role = Role::Grad} without
// -Wmissing-field-initializers noise.
struct Filter {
  std::optional<int64_t> step{};
  std::optional<Role> role{};
  std::optional<int> layer{};
  std::string op{};
  std::string name_contains{};
  bool matches(const TensorInfo& t) const;
};

// ---- reader ---------------------------------------------------------------------------------------
class TensorFiles;  // tensor_files.hpp

// The dimension TraceReader::read_rows cuts: the first whose extent is not 1 (0 when none is).
size_t slab_dim(const std::vector<int64_t>& shape);

class TraceReader {
 public:
  // Opens and validates an HDF5 trace, or a safetensors file / a folder of .npy files as a one-step
  // trace (tensor_files.hpp). Throws fp8sim::Error with one line naming the file and what is wrong:
  // missing file, not HDF5, truncated or corrupt HDF5, missing trace attributes, unsupported
  // format version, a dataset with a missing role/dtype, an unsupported dtype or a zero-size shape.
  explicit TraceReader(const std::filesystem::path& path);
  // A trace of tensors already opened (tensor_files.hpp: files, or tensors in memory), with its
  // header and steps as `files` holds them; `label` is what path() returns.
  TraceReader(std::unique_ptr<TensorFiles> files, const std::filesystem::path& label);
  ~TraceReader();
  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;

  const std::filesystem::path& path() const;
  uint64_t file_bytes() const;
  const TraceHeader& header() const;
  const std::vector<StepInfo>& steps() const;      // ascending step
  const std::vector<TensorInfo>& tensors() const;  // by step, then role, then name
  // Objects in the file that are not part of the schema (unknown groups inside steps, links);
  // they are skipped, and listed here so `fp8sim info` can say so.
  const std::vector<std::string>& ignored() const;

  std::vector<const TensorInfo*> select(const Filter& f) const;
  const StepInfo* find_step(int64_t step) const;
  const TensorInfo* find(int64_t step, Role role, std::string_view name) const;

  // Reads one dataset (and only that). Throws fp8sim::Error naming the dataset on I/O,
  // checksum or decompression failures.
  TensorData read(const TensorInfo& t) const;
  // Rows [row0, row0 + rows) along slab_dim(t.shape), the outermost dimension whose extent is not
  // 1 (a batch-first (1, T, H) activation is cut along T): a hyperslab, so an HDF5 trace reads only
  // those; checkpoints and .npy folders read the tensor and keep the rows. The data's shape is
  // t.shape with that extent = rows. Throws Error for rows outside the tensor.
  TensorData read_rows(const TensorInfo& t, int64_t row0, int64_t rows) const;
  // Reads and widens to fp32 (exact).
  Buffer<float> read_f32(const TensorInfo& t) const;
  // Visits matching tensors in order, one dataset in memory at a time.
  void for_each(const Filter& f, const std::function<void(const TensorInfo&, const TensorData&)>& fn) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- writer ---------------------------------------------------------------------------------------
// True once a TraceWriter gave up a file whose writes failed (a full disk, a file-size limit):
// HDF5 1.10 crashes when it closes such a file, which its teardown at process exit would do, so a
// program ends with std::_Exit (after flushing its own streams) rather than exit() then.
bool hdf5_teardown_unsafe();

struct WriterOptions {
  int deflate_level = 6;  // 0 disables deflate
  bool shuffle = true;
  bool fletcher32 = true;             // per-chunk checksums: corruption is detected, not misread
  uint64_t chunk_bytes = 256 * 1024;  // upper bound of one chunk
};

class TraceWriter {
 public:
  // Creates `path`'s temporary and writes the root attributes from `header` (format and
  // version are always kFormatName / kFormatVersion).
  TraceWriter(const std::filesystem::path& path, const TraceHeader& header, const WriterOptions& opts = {});
  ~TraceWriter();  // removes the temporary unless commit() ran
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Creates (or updates) a step group's attributes. write() creates missing groups itself.
  void set_step(const StepInfo& s);
  // Writes one tensor. `meta` supplies step, role, name, op, module, ... dtype and shape; `data`
  // points to numel() floats (F32) or uint16 bit patterns (BF16, F16).
  void write(const TensorInfo& meta, const void* data);
  void write(const TensorInfo& meta, const TensorData& data);
  // Adds a string / number attribute to the root (producers' extras; readers ignore unknown ones).
  void set_root_attr(const std::string& key, const std::string& value);
  void set_root_attr(const std::string& key, double value);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8sim::trace
