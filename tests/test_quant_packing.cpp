// Packed storage of 4-, 6- and 8-bit codes (sim/quant/packing.hpp): the bit layout on hand-worked
// bytes, the round trip, and that a packed buffer has quantized_size's code bytes.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sim/quant/packing.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim {
namespace {

TEST(CodePacking, FourBitCodesTakeTheLowNibbleFirst) {
  const std::vector<uint8_t> codes = {0x1, 0xF, 0x7, 0x8, 0x3};
  EXPECT_EQ(pack_codes(codes.data(), 5, 4), (std::vector<uint8_t>{0xF1, 0x87, 0x03}));
}

TEST(CodePacking, SixBitCodesFormALittleEndianBitStream) {
  // codes a b c d = 0x01 0x3F 0x2A 0x15: bits 0-5 a, 6-11 b, 12-17 c, 18-23 d
  const std::vector<uint8_t> codes = {0x01, 0x3F, 0x2A, 0x15};
  const uint32_t stream = 0x01u | (0x3Fu << 6) | (0x2Au << 12) | (0x15u << 18);
  EXPECT_EQ(pack_codes(codes.data(), 4, 6),
            (std::vector<uint8_t>{static_cast<uint8_t>(stream), static_cast<uint8_t>(stream >> 8),
                                  static_cast<uint8_t>(stream >> 16)}));
  // a fifth code starts a new group of three bytes; its high bits spill into a fourth byte
  const std::vector<uint8_t> five = {0x01, 0x3F, 0x2A, 0x15, 0x3C};
  const std::vector<uint8_t> p = pack_codes(five.data(), 5, 6);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[3], 0x3C);
}

TEST(CodePacking, RoundTripEveryWidthAndLength) {
  std::mt19937 rng(5);
  for (int bits : {4, 6, 8})
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 16, 33, 1000}) {
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1u));
      const std::vector<uint8_t> p = pack_codes(codes.data(), n, bits);
      EXPECT_EQ(static_cast<int64_t>(p.size()), packed_bytes(n, bits));
      EXPECT_EQ(unpack_codes(p.data(), n, bits), codes) << bits << " bits, " << n << " codes";
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(packed_code(p.data(), i, bits), codes[static_cast<size_t>(i)]);
    }
}

TEST(CodePacking, PackedBytesAreTheStorageAccounting) {
  for (const char* s : {"nvfp4", "mxfp6-e2m3", "mxfp4", "e4m3:g128"}) {
    const QuantSpec spec = QuantSpec::parse(s);
    const std::vector<int64_t> shape = {7, 96};
    EXPECT_EQ(quantized_size(spec, shape).code_bytes, packed_bytes(7 * 96, spec.bits_per_code())) << s;
  }
}

}  // namespace
}  // namespace fp8sim
