#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0; little-endian, C order).
// Element types: float32 ('<f4'), float16 ('<f2', raw bits), uint16 ('<u2', e.g. bfloat16 bits),
// uint8 ('|u1'). numpy has no bfloat16: ml_dtypes' bfloat16 arrays are saved as '<V2' (void)
// and are accepted as raw 16-bit data too; the caller says how to read 16-bit data (--dtype).
// Errors are one line naming the file and the problem: wrong magic, unsupported dtype, Fortran
// order, truncated data, bad header. Writing is atomic (temporary beside the target + rename).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/common/output.hpp"

namespace fp8sim {

enum class NpyDtype : uint8_t { F32, F16, U16, U8, V2 };

const char* npy_dtype_descr(NpyDtype d);  // "<f4", "<f2", "<u2", "|u1", "|V2"
int npy_dtype_size(NpyDtype d);

struct NpyArray {
  NpyDtype dtype = NpyDtype::F32;
  std::vector<int64_t> shape;  // empty for a 0-D array
  std::vector<uint8_t> data;   // numel * size, little-endian, row-major
  std::string unsupported;     // header-only reads: the dtype it has when none of the above (else empty)
  int64_t numel() const;
  const float* f32() const { return reinterpret_cast<const float*>(data.data()); }
  const uint16_t* u16() const { return reinterpret_cast<const uint16_t*>(data.data()); }
};

// Reads the whole file ("-": standard input, read as a stream). Throws fp8sim::Error with a
// one-line message on any problem. With with_data = false (a file only), checks everything the
// same way but leaves `data` empty: dtype and shape alone; a dtype it cannot read is then named in
// `unsupported` instead of being an error.
NpyArray read_npy(const std::filesystem::path& path, bool with_data = true);

// Writes `bytes` (numel(shape) * size(dtype) bytes) as a version 1.0 .npy (2.0 when the header
// needs it), atomically.
void write_npy(const std::filesystem::path& path, NpyDtype dtype, const std::vector<int64_t>& shape, const void* data,
               size_t bytes);
// The same bytes into an output being written (a RunFiles output; the caller commits).
void write_npy_to(AtomicFile& out, NpyDtype dtype, const std::vector<int64_t>& shape, const void* data, size_t bytes);

}  // namespace fp8sim
