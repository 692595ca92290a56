#include "sim/formats/divfull.hpp"

#include <zlib.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "sim/common/check.hpp"

// sim/formats/rcp_sm90.bin.gz, embedded at build time (CMakeLists.txt writes this array).
extern const unsigned char kRcpSm90Gz[];
extern const size_t kRcpSm90GzSize;

namespace fp8sim {

namespace {

constexpr size_t kRcpEntries = size_t{1} << 23;
constexpr uLong kRcpCrc32 = 0x203b808eu;  // CRC-32 of the 2^23 decompressed bytes

// T[m] - RN(1/1.m) in units of the last place, one int8 per 23-bit significand m.
const std::vector<int8_t>& rcp_deltas() {
  static std::vector<int8_t> table;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<int8_t> t(kRcpEntries);
    z_stream zs{};
    FP8SIM_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "rcp table: inflateInit2 failed");
    zs.next_in = const_cast<Bytef*>(kRcpSm90Gz);
    zs.avail_in = static_cast<uInt>(kRcpSm90GzSize);
    zs.next_out = reinterpret_cast<Bytef*>(t.data());
    zs.avail_out = static_cast<uInt>(t.size());
    const int rc = inflate(&zs, Z_FINISH);
    const uLong out = zs.total_out;
    inflateEnd(&zs);
    FP8SIM_CHECK(rc == Z_STREAM_END && out == kRcpEntries, "rcp table: corrupt embedded data");
    FP8SIM_CHECK(crc32(0L, reinterpret_cast<const Bytef*>(t.data()), static_cast<uInt>(t.size())) == kRcpCrc32,
                 "rcp table: checksum mismatch");
    table = std::move(t);
  });
  return table;
}

}  // namespace

float rcp_sm90_host(float b) {
  const uint32_t u = f32_bits(b);
  const uint32_t a = u & 0x7FFFFFFFu, sign = u & 0x80000000u;
  if (a > 0x7F800000u) return b;                          // NaN
  if (a == 0x7F800000u) return f32_from_bits(sign);       // 1/Inf = 0
  if (a == 0u) return f32_from_bits(sign | 0x7F800000u);  // 1/0 = Inf
  FP8SIM_CHECK(a >= 0x00800000u && a <= 0x7E800000u, "rcp_sm90_host: |b| = {} outside [2^-126, 2^126]",
               f32_from_bits(a));
  const uint32_t m = a & 0x7FFFFFu;
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;
  const uint32_t rn = f32_bits(div_rn(1.0f, f32_from_bits(0x3F800000u | m)));
  const uint32_t t = static_cast<uint32_t>(static_cast<int32_t>(rn) + rcp_deltas()[m]);
  // T[m] lies in (0.5, 1]; scaling by 2^-e keeps it normal for |b| <= 2^126.
  return f32_from_bits(sign | static_cast<uint32_t>(static_cast<int32_t>(t) - (e << 23)));
}

}  // namespace fp8sim
