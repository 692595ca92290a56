#pragma once
// Packed storage of sub-byte codes. QuantizedTensor::codes holds one code per byte; storage (and
// the GPU quantizers' device buffers) holds `bits` bits per code as a little-endian bit stream:
// code i occupies bits [bits * i, bits * i + bits) of the buffer, bit 0 being the least
// significant bit of byte 0. For 4-bit codes that puts element 2i in the low nibble of byte i and
// element 2i + 1 in the high nibble; 6-bit codes take three bytes per four elements; 8-bit codes are the bytes
// themselves. A buffer of n codes has ceil(n * bits / 8) bytes and the unused high bits of its last byte are 0.
#include <cstdint>
#include <cstring>
#include <vector>

#include "sim/common/hd.hpp"

namespace fp8sim {

FP8SIM_HD int64_t packed_bytes(int64_t n, int bits) { return (n * bits + 7) / 8; }

// Code i of a packed buffer of `bits`-bit codes (4, 6 or 8).
FP8SIM_HD uint32_t packed_code(const uint8_t* p, int64_t i, int bits) {
  if (bits == 8) return p[i];
  const int64_t bit = i * bits;
  const int64_t byte = bit >> 3;
  const int shift = static_cast<int>(bit & 7);
  uint32_t w = p[byte] >> shift;
  if (shift + bits > 8) w |= static_cast<uint32_t>(p[byte + 1]) << (8 - shift);
  return w & ((1u << bits) - 1u);
}

// One code per byte (low `bits` bits used) -> the packed stream.
inline std::vector<uint8_t> pack_codes(const uint8_t* codes, int64_t n, int bits) {
  std::vector<uint8_t> out(static_cast<size_t>(packed_bytes(n, bits)), 0);
  if (bits == 8) {
    if (n > 0) std::memcpy(out.data(), codes, static_cast<size_t>(n));
    return out;
  }
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const uint32_t c = codes[i] & mask;
    const int shift = static_cast<int>(bit & 7);
    out[static_cast<size_t>(bit >> 3)] |= static_cast<uint8_t>(c << shift);
    if (shift + bits > 8) out[static_cast<size_t>((bit >> 3) + 1)] |= static_cast<uint8_t>(c >> (8 - shift));
  }
  return out;
}

// The packed stream -> one code per byte.
inline std::vector<uint8_t> unpack_codes(const uint8_t* packed, int64_t n, int bits) {
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(packed_code(packed, i, bits));
  return out;
}

}  // namespace fp8sim
