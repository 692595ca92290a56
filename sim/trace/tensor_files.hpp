#pragma once
// Tensors as they come, read as a one-step trace: a checkpoint in the safetensors format (a
// model's weights) or a folder of .npy files named by tensor. TraceReader opens them like an
// HDF5 trace, so `fp8sim info`, `analyze` and `report` take them where they take a trace.
//
// Names map to roles and ops by the rules the trace recorder (fp8sim.capture) uses for
// parameters: a name ending in ".grad", ".exp_avg" or ".exp_avg_sq" is that role of the parameter
// before the suffix, any other is a weight; the module is the name without its last component; the
// module kind is "embedding" (embed / wte / wpe in the module name), "norm" (norm or ln_ in its
// last component), "linear" (a 2-D weight of any other module) or "other"; the layer is the index
// after "layers.", "h.", "layer." or "blocks.". float32, bfloat16 and float16 tensors are read;
// others (integer buffers, bool masks, empty tensors) are listed as ignored.
//
// safetensors (https://huggingface.co/docs/safetensors): 8 bytes little-endian header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data, offsets relative to its start. .npy: float32, float16, and bfloat16 as ml_dtypes
// saves it ('<V2'); raw uint16 is ignored (it could be anything).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sim/trace/trace.hpp"

namespace fp8sim::trace {

// True for a directory, or a file whose name ends in .safetensors: what open_tensor_files reads.
bool is_tensor_files(const std::filesystem::path& path);

class TensorFiles {
 public:
  virtual ~TensorFiles() = default;
  TraceHeader header;
  std::vector<StepInfo> steps;      // one, step 0
  std::vector<TensorInfo> tensors;  // by role, then name
  std::vector<std::string> ignored;
  uint64_t bytes = 0;  // the file's size, or the folder's .npy files' together
  // The data of tensors[i], exactly as stored. Throws Error naming the tensor on a read failure.
  virtual TensorData read(size_t i) const = 0;
};

// Opens and checks (every offset, size and dtype, before anything is read). Throws Error with one
// line naming the file and the problem.
std::unique_ptr<TensorFiles> open_tensor_files(const std::filesystem::path& path);

// A tensor in memory, named by the rules above: `data` points to numel floats (F32) or 16-bit
// patterns (BF16, F16), row-major, and is not owned.
struct MemoryTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Tensors in memory as a one-step trace (the Python package's dicts of arrays): names map to
// roles, modules, ops and layers as for the files above, every tensor belongs to step `step`, and
// `label` stands for the path in messages. The data are read in place, so they must outlive the
// result. A tensor with a zero dimension or no dimension is listed as ignored. Throws Error with one
// line for two tensors of the same role and parameter, or no tensor at all.
std::unique_ptr<TensorFiles> tensors_in_memory(std::vector<MemoryTensor> tensors, const std::string& label,
                                               int64_t step = 0);

}  // namespace fp8sim::trace
