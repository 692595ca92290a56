// Decoding the stored chunks of an HDF5 dataset on several threads, without HDF5.
//
// HDF5 1.10 runs a dataset's filter pipeline (Fletcher-32 check, inflate, unshuffle) on the thread
// that calls H5Dread, one chunk after another: a trace written with deflate reads at about
// 0.3 GB/s per process however many cores the machine has. The reader (trace.cpp, the HDF5 code)
// asks HDF5 only where each chunk lies and which filters it went through; decode_chunks reads and
// decodes them on the OpenMP threads: pread, the Fletcher-32 check, zlib's inflate and the
// unshuffle, in the reverse of the order the pipeline lists them, skipping the filters a chunk's
// mask says were not applied. The bytes are the file's own, so the values are those of H5Dread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8sim {

enum class ChunkFilter { Shuffle, Deflate, Fletcher32 };

// A chunked dataset as stored: its extent and chunk extent (row-major, the same rank), the filter
// pipeline in the order it was applied, and the bytes of one element.
struct ChunkLayout {
  std::vector<uint64_t> dims, chunk;
  std::vector<ChunkFilter> filters;
  size_t elem_bytes = 0;
};

// One stored chunk: its first element's coordinates, the filters it skipped (bit i: filter i),
// and where its bytes lie in the file.
struct StoredChunk {
  std::vector<uint64_t> offset;
  uint32_t skipped = 0;
  uint64_t addr = 0, size = 0;
};

// Decodes every chunk of the file `path` into `out` (row-major, elem_bytes per element), the parts
// of edge chunks outside the extent left out. Returns false, having counted a fallback, when a
// chunk cannot be read, fails its checksum or does not decode to its size; the caller then reads
// with H5Dread, which reports the damage in HDF5's words.
bool decode_chunks(const std::string& path, const ChunkLayout& layout, const std::vector<StoredChunk>& chunks,
                   void* out);

// What the chunk decoding did in this process (tests and --timing).
struct DirectReadStats {
  uint64_t datasets = 0;   // datasets read by decoding their chunks
  uint64_t chunks = 0;     // chunks decoded
  uint64_t fallbacks = 0;  // datasets handed back to H5Dread after a chunk failed to decode
};
DirectReadStats direct_read_stats();

// HDF5's Fletcher-32 of `n` bytes: 16-bit big-endian words (an odd last byte is the high byte of a
// word), both sums folded to 16 bits as end-around carries every 360 words and at the end. `simd`:
// AVX2 where the CPU has it (the same value; false runs the portable loop, for tests).
uint32_t hdf5_fletcher32(const uint8_t* data, size_t n, bool simd = true);

// Undoes HDF5's shuffle filter, which stores byte k of every element together (all the first
// bytes, then all the second bytes, ...), of `n` bytes of `es`-byte elements; bytes past the last
// whole element stay where they are. `simd`: AVX2 for 2- and 4-byte elements where the CPU has it
// (the same bytes; false runs the portable loop, for tests).
void hdf5_unshuffle(const uint8_t* in, size_t n, size_t es, uint8_t* out, bool simd = true);

}  // namespace fp8sim
