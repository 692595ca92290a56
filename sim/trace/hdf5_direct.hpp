// Reading a chunked HDF5 dataset by decoding its chunks on several threads.
//
// HDF5 1.10 runs a dataset's filter pipeline (Fletcher-32 check, inflate, unshuffle) on the thread
// that calls H5Dread, one chunk after another: a trace written with deflate reads at about
// 0.3 GB/s per process however many cores the machine has. read_chunks_direct asks HDF5 only where
// each chunk lies (H5Dget_chunk_info_by_coord), then reads and decodes the chunks itself on the
// OpenMP threads: pread, the Fletcher-32 check, zlib's inflate and the unshuffle, in the reverse of
// the order the pipeline lists them, skipping the filters a chunk's filter mask says were not
// applied. The bytes are the file's own, so the values are those of H5Dread.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fp8sim {

// Decodes the whole dataset `dset` of file `path` (`file_bytes` long) into `out`, row-major,
// `elem_bytes` per element, when its elements are stored as they are to be read (the caller checks
// the type) and its layout is one this reader handles: chunked, filters among shuffle, deflate and
// Fletcher-32, every chunk allocated, a file without a user block read by the default (sec2)
// driver. Returns false when the dataset is outside that, or when any chunk fails its checksum or
// does not inflate to its size; the caller then reads with H5Dread, which reports a damaged chunk
// in HDF5's words. FP8SIM_HDF5_DIRECT=0 turns it off.
bool read_chunks_direct(hid_t dset, const std::string& path, uint64_t file_bytes, size_t elem_bytes, void* out);

// What the direct reader did in this process (tests and --timing).
struct DirectReadStats {
  uint64_t datasets = 0;   // datasets read by decoding their chunks
  uint64_t chunks = 0;     // chunks decoded
  uint64_t fallbacks = 0;  // datasets handed back to H5Dread after a chunk failed to decode
};
DirectReadStats direct_read_stats();

// HDF5's Fletcher-32 of `n` bytes: 16-bit big-endian words (an odd last byte is the high byte of a
// word), both sums folded to 16 bits as end-around carries every 360 words and at the end.
uint32_t hdf5_fletcher32(const uint8_t* data, size_t n);

}  // namespace fp8sim
