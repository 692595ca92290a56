#include "sim/trace/hdf5_direct.hpp"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace fp8sim {
namespace {

std::atomic<uint64_t> g_datasets{0}, g_chunks{0}, g_fallbacks{0};

bool direct_enabled() {
  const char* e = std::getenv("FP8SIM_HDF5_DIRECT");
  return !(e && std::string(e) == "0");
}

// Closes an HDF5 identifier when it goes out of scope (negative: nothing to close).
struct Hid {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Hid() {
    if (id >= 0) close(id);
  }
};

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool pread_all(int fd, uint8_t* buf, size_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, buf, n, static_cast<off_t>(at));
    if (r <= 0) return false;
    buf += r;
    at += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
  return true;
}

// HDF5's shuffle filter stores byte k of every element together (all the first bytes, then all
// the second bytes, ...); bytes past the last whole element stay where they are.
void unshuffle(const uint8_t* in, size_t n, size_t es, uint8_t* out) {
  const size_t elems = n / es;
  for (size_t k = 0; k < es; ++k) {
    const uint8_t* src = in + k * elems;
    for (size_t i = 0; i < elems; ++i) out[i * es + k] = src[i];
  }
  std::memcpy(out + elems * es, in + elems * es, n - elems * es);
}

struct Chunk {
  std::vector<hsize_t> offset;
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
};

enum class Filter { Shuffle, Deflate, Fletcher32 };

// Decodes one chunk's stored bytes (`raw`, `n` of them) through the filters in reverse, into
// `a` or `b` (scratch of `chunk_bytes` each); returns the decoded bytes, or nullptr.
const uint8_t* decode(uint8_t* raw, size_t n, const std::vector<Filter>& filters, unsigned mask, size_t es,
                      size_t chunk_bytes, std::vector<uint8_t>& a, std::vector<uint8_t>& b) {
  uint8_t* cur = raw;
  for (size_t i = filters.size(); i-- > 0;) {
    if (mask & (1u << i)) continue;  // the filter was not applied to this chunk
    uint8_t* dst = cur == a.data() ? b.data() : a.data();
    switch (filters[i]) {
      case Filter::Fletcher32: {
        if (n < 4) return nullptr;
        n -= 4;
        const uint32_t stored = static_cast<uint32_t>(cur[n]) | static_cast<uint32_t>(cur[n + 1]) << 8 |
                                static_cast<uint32_t>(cur[n + 2]) << 16 | static_cast<uint32_t>(cur[n + 3]) << 24;
        const uint32_t sum = hdf5_fletcher32(cur, n);
        // Files from HDF5 releases before 1.6.3 hold the checksum byte-reversed; HDF5 accepts both.
        const uint32_t reversed = (sum >> 24) | ((sum >> 8) & 0xff00u) | ((sum << 8) & 0xff0000u) | (sum << 24);
        if (stored != sum && stored != reversed) return nullptr;
        break;
      }
      case Filter::Deflate: {
        uLongf out_n = static_cast<uLongf>(chunk_bytes);
        if (::uncompress(dst, &out_n, cur, static_cast<uLong>(n)) != Z_OK) return nullptr;
        n = out_n;
        cur = dst;
        break;
      }
      case Filter::Shuffle:
        if (n > chunk_bytes) return nullptr;
        unshuffle(cur, n, es, dst);
        cur = dst;
        break;
    }
  }
  return n == chunk_bytes ? cur : nullptr;
}

// Copies the part of a decoded chunk at `offset` (chunk dims `cdims`) that lies inside the
// dataset (dims `dims`) into the row-major output.
void place(const uint8_t* chunk, const std::vector<hsize_t>& offset, const std::vector<hsize_t>& cdims,
           const std::vector<hsize_t>& dims, size_t es, uint8_t* out) {
  const size_t rank = dims.size();
  std::vector<hsize_t> extent(rank), idx(rank, 0);
  for (size_t k = 0; k < rank; ++k) extent[k] = std::min(cdims[k], dims[k] - offset[k]);
  const size_t run = static_cast<size_t>(extent[rank - 1]) * es;
  for (;;) {
    size_t src = 0, dst = 0;
    for (size_t k = 0; k < rank; ++k) {
      src = src * cdims[k] + idx[k];
      dst = dst * dims[k] + offset[k] + idx[k];
    }
    std::memcpy(out + dst * es, chunk + src * es, run);
    size_t k = rank - 1;  // the next row: odometer over every dimension but the last
    while (k-- > 0) {
      if (++idx[k] < extent[k]) break;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

}  // namespace

uint32_t hdf5_fletcher32(const uint8_t* data, size_t n) {
  uint32_t sum1 = 0, sum2 = 0;
  size_t words = n / 2;
  while (words > 0) {
    size_t block = std::min<size_t>(words, 360);
    words -= block;
    for (; block > 0; --block, data += 2) {
      sum1 += static_cast<uint32_t>(data[0]) << 8 | data[1];
      sum2 += sum1;
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (n % 2) {
    sum1 += static_cast<uint32_t>(data[0]) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return sum2 << 16 | sum1;
}

DirectReadStats direct_read_stats() { return {g_datasets.load(), g_chunks.load(), g_fallbacks.load()}; }

bool read_chunks_direct(hid_t dset, const std::string& path, uint64_t file_bytes, size_t elem_bytes, void* out) {
  if (!direct_enabled() || elem_bytes == 0) return false;
  const Hid dcpl{H5Dget_create_plist(dset), H5Pclose};
  if (dcpl.id < 0 || H5Pget_layout(dcpl.id) != H5D_CHUNKED) return false;
  const Hid space{H5Dget_space(dset), H5Sclose};
  const int rank = space.id < 0 ? -1 : H5Sget_simple_extent_ndims(space.id);
  if (rank < 1 || rank > 32) return false;
  std::vector<hsize_t> dims(rank), cdims(rank);
  if (H5Sget_simple_extent_dims(space.id, dims.data(), nullptr) != rank) return false;
  if (H5Pget_chunk(dcpl.id, rank, cdims.data()) != rank) return false;
  size_t chunk_elems = 1;
  for (int k = 0; k < rank; ++k) {
    if (cdims[k] == 0 || dims[k] == 0) return false;
    chunk_elems *= cdims[k];
  }
  const size_t chunk_bytes = chunk_elems * elem_bytes;

  std::vector<Filter> filters;
  const int nf = H5Pget_nfilters(dcpl.id);
  if (nf < 0 || nf > 32) return false;
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.id, static_cast<unsigned>(i), &flags, &ncd, cd, 0, nullptr, nullptr);
    if (id == H5Z_FILTER_SHUFFLE) filters.push_back(Filter::Shuffle);
    else if (id == H5Z_FILTER_DEFLATE) filters.push_back(Filter::Deflate);
    else if (id == H5Z_FILTER_FLETCHER32) filters.push_back(Filter::Fletcher32);
    else return false;
  }

  // Chunk addresses are relative to the file's base address, which a user block moves; and only
  // the default driver keeps the file's bytes in one file at those addresses.
  const Hid file{H5Iget_file_id(dset), H5Fclose};
  const Hid fcpl{file.id < 0 ? -1 : H5Fget_create_plist(file.id), H5Pclose};
  const Hid fapl{file.id < 0 ? -1 : H5Fget_access_plist(file.id), H5Pclose};
  hsize_t user_block = 0;
  if (fcpl.id < 0 || fapl.id < 0 || H5Pget_userblock(fcpl.id, &user_block) < 0 || user_block != 0 ||
      H5Pget_driver(fapl.id) != H5FD_SEC2)
    return false;

  // Every chunk of the grid, where it lies and which filters it went through.
  std::vector<Chunk> chunks;
  std::vector<hsize_t> grid(rank), at(rank, 0);
  size_t n_chunks = 1;
  for (int k = 0; k < rank; ++k) {
    grid[k] = (dims[k] + cdims[k] - 1) / cdims[k];
    n_chunks *= grid[k];
  }
  chunks.reserve(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) {
    Chunk ch;
    ch.offset.resize(rank);
    for (int k = 0; k < rank; ++k) ch.offset[k] = at[k] * cdims[k];
    if (H5Dget_chunk_info_by_coord(dset, ch.offset.data(), &ch.mask, &ch.addr, &ch.size) < 0 ||
        ch.addr == HADDR_UNDEF || ch.size == 0 || ch.size > chunk_bytes + chunk_bytes / 8 + 1024 ||
        ch.addr > file_bytes || ch.size > file_bytes - ch.addr)
      return false;
    chunks.push_back(std::move(ch));
    for (int k = rank - 1; k >= 0; --k) {
      if (++at[k] < grid[k]) break;
      at[k] = 0;
    }
  }

  const Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return false;
  std::atomic<bool> bad{false};
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t n = static_cast<int64_t>(chunks.size());
#pragma omp parallel if (n > 1)
  {
    std::vector<uint8_t> raw, a(chunk_bytes), b(chunk_bytes);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      if (bad.load(std::memory_order_relaxed)) continue;
      const Chunk& ch = chunks[static_cast<size_t>(i)];
      raw.resize(static_cast<size_t>(ch.size));
      const uint8_t* data = nullptr;
      if (pread_all(fd.fd, raw.data(), raw.size(), ch.addr))
        data = decode(raw.data(), raw.size(), filters, ch.mask, elem_bytes, chunk_bytes, a, b);
      if (!data) {
        bad.store(true, std::memory_order_relaxed);
        continue;
      }
      place(data, ch.offset, cdims, dims, elem_bytes, dst);
    }
  }
  if (bad.load()) {
    g_fallbacks.fetch_add(1);
    return false;
  }
  g_datasets.fetch_add(1);
  g_chunks.fetch_add(chunks.size());
  return true;
}

}  // namespace fp8sim
