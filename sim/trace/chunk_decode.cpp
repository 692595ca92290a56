#include "sim/trace/chunk_decode.hpp"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace fp8sim {
namespace {

std::atomic<uint64_t> g_datasets{0}, g_chunks{0}, g_fallbacks{0};

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

// Decodes one chunk's stored bytes (`raw`, `n` of them) through the filters in reverse, into
// `a` or `b` (scratch of `chunk_bytes` each); returns the decoded bytes, or nullptr.
const uint8_t* decode(uint8_t* raw, size_t n, const std::vector<ChunkFilter>& filters, uint32_t mask, size_t es,
                      size_t chunk_bytes, std::vector<uint8_t>& a, std::vector<uint8_t>& b) {
  uint8_t* cur = raw;
  for (size_t i = filters.size(); i-- > 0;) {
    if (mask & (1u << i)) continue;  // the filter was not applied to this chunk
    uint8_t* dst = cur == a.data() ? b.data() : a.data();
    switch (filters[i]) {
      case ChunkFilter::Fletcher32: {
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
      case ChunkFilter::Deflate: {
        uLongf out_n = static_cast<uLongf>(chunk_bytes);
        if (::uncompress(dst, &out_n, cur, static_cast<uLong>(n)) != Z_OK) return nullptr;
        n = out_n;
        cur = dst;
        break;
      }
      case ChunkFilter::Shuffle:
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
void place(const uint8_t* chunk, const std::vector<uint64_t>& offset, const std::vector<uint64_t>& cdims,
           const std::vector<uint64_t>& dims, size_t es, uint8_t* out) {
  const size_t rank = dims.size();
  std::vector<uint64_t> extent(rank), idx(rank, 0);
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

bool decode_chunks(const std::string& path, const ChunkLayout& layout, const std::vector<StoredChunk>& chunks,
                   void* out) {
  size_t chunk_bytes = layout.elem_bytes;
  for (uint64_t c : layout.chunk) chunk_bytes *= c;
  const Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  std::atomic<bool> bad{fd.fd < 0};
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t n = static_cast<int64_t>(chunks.size());
#pragma omp parallel if (n > 1 && fd.fd >= 0)
  {
    std::vector<uint8_t> raw, a(chunk_bytes), b(chunk_bytes);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      if (bad.load(std::memory_order_relaxed)) continue;
      const StoredChunk& ch = chunks[static_cast<size_t>(i)];
      raw.resize(static_cast<size_t>(ch.size));
      const uint8_t* data = nullptr;
      if (pread_all(fd.fd, raw.data(), raw.size(), ch.addr))
        data = decode(raw.data(), raw.size(), layout.filters, ch.skipped, layout.elem_bytes, chunk_bytes, a, b);
      if (!data) {
        bad.store(true, std::memory_order_relaxed);
        continue;
      }
      place(data, ch.offset, layout.chunk, layout.dims, layout.elem_bytes, dst);
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
