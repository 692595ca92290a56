#include "sim/trace/chunk_decode.hpp"

#include <fcntl.h>
#include <immintrin.h>
#include <omp.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "sim/formats/avx2_fp8.hpp"

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

// Decodes one chunk's stored bytes (`raw`, `n` of them) through the filters in reverse, into
// `a` or `b` (scratch of `chunk_bytes` each); returns the decoded bytes, or nullptr. With `direct`
// (chunk_bytes of the output that the chunk fills exactly), the last filter that moves the bytes
// writes there, and the result is `direct` when one did.
const uint8_t* decode(uint8_t* raw, size_t n, const std::vector<ChunkFilter>& filters, uint32_t mask, size_t es,
                      size_t chunk_bytes, std::vector<uint8_t>& a, std::vector<uint8_t>& b, uint8_t* direct) {
  size_t last = filters.size();  // the last filter to undo that moves bytes (Fletcher-32 only checks)
  for (size_t i = 0; i < filters.size() && last == filters.size(); ++i)
    if (!(mask & (1u << i)) && filters[i] != ChunkFilter::Fletcher32) last = i;
  uint8_t* cur = raw;
  for (size_t i = filters.size(); i-- > 0;) {
    if (mask & (1u << i)) continue;  // the filter was not applied to this chunk
    uint8_t* dst = direct && i == last ? direct : cur == a.data() ? b.data() : a.data();
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
        hdf5_unshuffle(cur, n, es, dst);
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

// Where a chunk's bytes lie in the row-major output when it fills one contiguous range whole (every
// dimension but the first complete, and the first not cut by the dataset's edge), else nullptr.
uint8_t* filled_in_place(const std::vector<uint64_t>& offset, const std::vector<uint64_t>& cdims,
                         const std::vector<uint64_t>& dims, size_t es, uint8_t* out) {
  if (offset[0] + cdims[0] > dims[0]) return nullptr;
  size_t row = es;
  for (size_t k = 1; k < dims.size(); ++k) {
    if (offset[k] != 0 || cdims[k] != dims[k]) return nullptr;
    row *= dims[k];
  }
  return out + offset[0] * row;
}

// Fletcher-32 in blocks of kRows rows of kLanes 16-bit words: lane l of a block sums the words at
// one position of each row, A[l] = their sum and B[l] = the running sum of A[l]. kRows keeps B
// below 2^32 (at most 65535 x kRows (kRows + 1) / 2).
constexpr size_t kLanes = 16, kRows = 256, kBlock = kLanes * kRows;
struct LaneSums {
  uint32_t A[kLanes], B[kLanes];
  const uint8_t* pos;  // the word position within a row that each lane sums
};

constexpr uint8_t kInOrder[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
void block_sums(const uint8_t* data, LaneSums& s) {
  std::fill_n(s.A, kLanes, 0u);
  std::fill_n(s.B, kLanes, 0u);
  for (size_t r = 0; r < kRows; ++r, data += 2 * kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      s.A[j] += uint32_t{data[2 * j]} << 8 | data[2 * j + 1];
      s.B[j] += s.A[j];
    }
  s.pos = kInOrder;
}

// The same with AVX2: the big-endian words byte-swapped in place, widened to 32 bits by
// interleaving with zero (lanes of the low half: words 0-3 and 8-11; of the high half: 4-7, 12-15).
constexpr uint8_t kInterleaved[kLanes] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
__attribute__((target("avx2"))) void block_sums_avx2(const uint8_t* data, LaneSums& s) {
  const __m256i swap = _mm256_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 1, 0, 3, 2, 5, 4, 7, 6, 9,
                                        8, 11, 10, 13, 12, 15, 14);
  const __m256i zero = _mm256_setzero_si256();
  __m256i a_lo = zero, a_hi = zero, b_lo = zero, b_hi = zero;
  for (size_t r = 0; r < kRows; ++r, data += 2 * kLanes) {
    const __m256i w = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(data)), swap);
    a_lo = _mm256_add_epi32(a_lo, _mm256_unpacklo_epi16(w, zero));
    a_hi = _mm256_add_epi32(a_hi, _mm256_unpackhi_epi16(w, zero));
    b_lo = _mm256_add_epi32(b_lo, a_lo);
    b_hi = _mm256_add_epi32(b_hi, a_hi);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.A), a_lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.A + 8), a_hi);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.B), b_lo);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.B + 8), b_hi);
  s.pos = kInterleaved;
}

}  // namespace

// HDF5's definition adds the words one at a time and folds both sums every 360 words. Each fold
// keeps a sum's value modulo 65535 and never turns a nonzero sum into zero, so the result is each
// exact sum S reduced to [1, 65535] (0 only for S = 0, which happens only for all-zero words):
//   sum1 = sum of w[i],  sum2 = sum of (N - i) w[i]  over the N words.
// A block of kBlock words adds (kBlock x sum1 before it) + sum over lanes of (kLanes B - pos A) to
// sum2, since a word at position p of row r (of kRows) counts kLanes (kRows - r) - p times.
uint32_t hdf5_fletcher32(const uint8_t* data, size_t n, bool simd) {
  constexpr uint64_t kMod = 65535;
  const bool wide = simd && avx2::available();
  uint64_t s1 = 0, s2 = 0;
  bool nonzero = false;
  size_t words = n / 2;
  LaneSums ls;
  for (; words >= kBlock; words -= kBlock, data += 2 * kBlock) {
    if (wide) block_sums_avx2(data, ls);
    else block_sums(data, ls);
    uint64_t a = 0, b = 0;
    for (size_t l = 0; l < kLanes; ++l) {
      a += ls.A[l];
      b += kLanes * uint64_t{ls.B[l]} - ls.pos[l] * uint64_t{ls.A[l]};
    }
    nonzero |= a != 0;
    s2 = (s2 + kBlock * s1 + b) % kMod;
    s1 = (s1 + a) % kMod;
  }
  for (; words > 0; --words, data += 2) {
    const uint32_t w = uint32_t{data[0]} << 8 | data[1];
    nonzero |= w != 0;
    s1 += w;
    s2 += s1;
  }
  if (n % 2) {
    nonzero |= data[0] != 0;
    s1 += uint32_t{data[0]} << 8;
    s2 += s1;
  }
  if (!nonzero) return 0;
  const auto reduce = [](uint64_t v) { return static_cast<uint32_t>(v % kMod == 0 ? kMod : v % kMod); };
  return reduce(s2) << 16 | reduce(s1);
}

namespace {

// 32 elements of 4 bytes from the four byte planes: interleave bytes, then byte pairs, then put
// the 128-bit halves in order (the unpacks work within each half).
__attribute__((target("avx2"))) void unshuffle4_avx2(const uint8_t* in, size_t elems, uint8_t* out) {
  const uint8_t *p0 = in, *p1 = in + elems, *p2 = in + 2 * elems, *p3 = in + 3 * elems;
  size_t i = 0;
  for (; i + 32 <= elems; i += 32) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + i));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + i));
    const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p2 + i));
    const __m256i b3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p3 + i));
    const __m256i t01l = _mm256_unpacklo_epi8(b0, b1), t01h = _mm256_unpackhi_epi8(b0, b1);
    const __m256i t23l = _mm256_unpacklo_epi8(b2, b3), t23h = _mm256_unpackhi_epi8(b2, b3);
    const __m256i u0 = _mm256_unpacklo_epi16(t01l, t23l), u1 = _mm256_unpackhi_epi16(t01l, t23l);
    const __m256i u2 = _mm256_unpacklo_epi16(t01h, t23h), u3 = _mm256_unpackhi_epi16(t01h, t23h);
    auto* o = reinterpret_cast<__m256i*>(out + 4 * i);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
  for (; i < elems; ++i) {
    out[4 * i] = p0[i];
    out[4 * i + 1] = p1[i];
    out[4 * i + 2] = p2[i];
    out[4 * i + 3] = p3[i];
  }
}

__attribute__((target("avx2"))) void unshuffle2_avx2(const uint8_t* in, size_t elems, uint8_t* out) {
  const uint8_t *p0 = in, *p1 = in + elems;
  size_t i = 0;
  for (; i + 32 <= elems; i += 32) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + i));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + i));
    const __m256i lo = _mm256_unpacklo_epi8(b0, b1), hi = _mm256_unpackhi_epi8(b0, b1);
    auto* o = reinterpret_cast<__m256i*>(out + 2 * i);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
  for (; i < elems; ++i) {
    out[2 * i] = p0[i];
    out[2 * i + 1] = p1[i];
  }
}

}  // namespace

void hdf5_unshuffle(const uint8_t* in, size_t n, size_t es, uint8_t* out, bool simd) {
  const size_t elems = n / es;
  if (simd && avx2::available() && es == 4) {
    unshuffle4_avx2(in, elems, out);
  } else if (simd && avx2::available() && es == 2) {
    unshuffle2_avx2(in, elems, out);
  } else {
    for (size_t k = 0; k < es; ++k) {
      const uint8_t* src = in + k * elems;
      for (size_t i = 0; i < elems; ++i) out[i * es + k] = src[i];
    }
  }
  if (n > elems * es) std::memcpy(out + elems * es, in + elems * es, n - elems * es);  // (n = 0: no pointers)
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
      uint8_t* in_place = filled_in_place(ch.offset, layout.chunk, layout.dims, layout.elem_bytes, dst);
      const uint8_t* data = nullptr;
      if (pread_all(fd.fd, raw.data(), raw.size(), ch.addr))
        data =
            decode(raw.data(), raw.size(), layout.filters, ch.skipped, layout.elem_bytes, chunk_bytes, a, b, in_place);
      if (!data) {
        bad.store(true, std::memory_order_relaxed);
        continue;
      }
      if (data != in_place) place(data, ch.offset, layout.chunk, layout.dims, layout.elem_bytes, dst);
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
