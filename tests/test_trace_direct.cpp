// sim/trace/chunk_decode.hpp (with trace.cpp locating the chunks): decoding a dataset's chunks on several threads gives
// the bytes H5Dread gives, for every filter combination the writer makes, chunks cut along any dimension, partial edge
// chunks, the committed sample and h5py's files; a damaged chunk goes back to H5Dread, which reports it; the
// Fletcher-32 is HDF5's own.
#include <H5Cpp.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/trace/chunk_decode.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::trace {
namespace {

const std::string kSample = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";

// Sets FP8SIM_HDF5_DIRECT for the scope (the reader reads it at every dataset).
struct DirectSwitch {
  explicit DirectSwitch(bool on) { ::setenv("FP8SIM_HDF5_DIRECT", on ? "1" : "0", 1); }
  ~DirectSwitch() { ::unsetenv("FP8SIM_HDF5_DIRECT"); }
};

TraceHeader header() {
  TraceHeader h;
  h.producer = "test_trace_direct";
  h.model_kind = "generic";
  h.model_config = Json::parse(R"({"name": "d", "hidden_size": 8})");
  return h;
}

TensorInfo meta(Role role, std::string name, DType dt, std::vector<int64_t> shape) {
  TensorInfo t;
  t.step = 1;
  t.role = role;
  t.name = std::move(name);
  t.dtype = dt;
  t.shape = std::move(shape);
  return t;
}

uint32_t pattern(uint64_t i) { return static_cast<uint32_t>(i * 0x9E3779B1ull + 0x7F4A7C15ull); }

TEST(TraceDirect, EveryFilterCombinationAndChunkShapeReadsTheWrittenBits) {
  // (37, 53) fp32 in 1000-byte chunks: 4 rows per chunk, a partial last chunk along dim 0;
  // (3, 5, 701) bf16: chunks (1, 1, 500), partial along the last dim; (10001,) fp32 in 1024s.
  struct Shape {
    const char* name;
    DType dt;
    std::vector<int64_t> shape;
  };
  const Shape shapes[] = {{"a", DType::F32, {37, 53}},
                          {"b", DType::BF16, {3, 5, 701}},
                          {"c", DType::F32, {10001}},
                          {"d", DType::F16, {2, 3000}}};
  for (int deflate : {0, 6})
    for (bool shuffle : {false, true})
      for (bool fletcher : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "deflate " << deflate << " shuffle " << shuffle << " fletcher " << fletcher);
        const std::string path = test::temp_dir() + "/direct.h5";
        WriterOptions o;
        o.deflate_level = deflate;
        o.shuffle = shuffle;
        o.fletcher32 = fletcher;
        o.chunk_bytes = 1000;
        std::vector<std::vector<uint32_t>> want;
        {
          TraceWriter w(path, header(), o);
          StepInfo s;
          s.step = 1;
          w.set_step(s);
          for (const Shape& sh : shapes) {
            int64_t n = 1;
            for (int64_t d : sh.shape) n *= d;
            std::vector<uint32_t> v(static_cast<size_t>(n));
            for (size_t i = 0; i < v.size(); ++i) {
              v[i] = pattern(i) >> (sh.dt == DType::F32 ? 0 : 16);
              // Keep 16-bit patterns off NaN so that nothing can canonicalise them on the way.
              if (sh.dt != DType::F32 && (v[i] & 0x7F80u) == 0x7F80u) v[i] &= 0xBFFFu;
              if (sh.dt == DType::F32 && (v[i] & 0x7F800000u) == 0x7F800000u) v[i] &= 0xBFFFFFFFu;
            }
            if (sh.dt == DType::F32) {
              std::vector<float> f(v.size());
              for (size_t i = 0; i < v.size(); ++i) f[i] = f32_from_bits(v[i]);
              w.write(meta(Role::Weight, sh.name, sh.dt, sh.shape), f.data());
            } else {
              std::vector<uint16_t> b(v.begin(), v.end());
              w.write(meta(Role::Weight, sh.name, sh.dt, sh.shape), b.data());
            }
            want.push_back(v);
          }
          w.commit();
        }
        TraceReader r(path);
        DirectSwitch on(true);
        const DirectReadStats before = direct_read_stats();
        for (size_t k = 0; k < std::size(shapes); ++k) {
          const TensorInfo* t = r.find(1, Role::Weight, shapes[k].name);
          ASSERT_NE(t, nullptr);
          const TensorData d = r.read(*t);
          ASSERT_EQ(d.size(), want[k].size());
          for (size_t i = 0; i < d.size(); ++i) {
            const uint32_t got = d.dtype == DType::F32 ? f32_bits(d.f32[i]) : d.bits[i];
            ASSERT_EQ(got, want[k][i]) << shapes[k].name << " element " << i;
          }
        }
        const DirectReadStats after = direct_read_stats();
        EXPECT_EQ(after.datasets - before.datasets, std::size(shapes)) << "every tensor decoded directly";
        EXPECT_EQ(after.fallbacks, before.fallbacks);
      }
}

TEST(TraceDirect, TheSampleAndH5pyFilesReadAsH5DreadReadsThem) {
  for (const std::string& path : {kSample, std::string(FP8SIM_TEST_DATA) + "/trace_h5py_dtypes.h5"}) {
    SCOPED_TRACE(path);
    TraceReader r(path);
    std::vector<TensorData> direct, plain;
    const DirectReadStats before = direct_read_stats();
    {
      DirectSwitch on(true);
      for (const auto& t : r.tensors()) direct.push_back(r.read(t));
    }
    const DirectReadStats after = direct_read_stats();
    {
      DirectSwitch off(false);
      for (const auto& t : r.tensors()) plain.push_back(r.read(t));
    }
    EXPECT_EQ(direct_read_stats().datasets, after.datasets) << "FP8SIM_HDF5_DIRECT=0 reads with H5Dread";
    EXPECT_GT(after.datasets, before.datasets);
    EXPECT_EQ(after.fallbacks, before.fallbacks);
    ASSERT_EQ(direct.size(), plain.size());
    for (size_t k = 0; k < direct.size(); ++k) {
      ASSERT_EQ(direct[k].dtype, plain[k].dtype);
      ASSERT_EQ(direct[k].bits, plain[k].bits) << r.tensors()[k].path;
      ASSERT_EQ(direct[k].f32.size(), plain[k].f32.size());
      if (!direct[k].f32.empty()) {  // (memcmp of an empty vector's null data is undefined)
        ASSERT_EQ(std::memcmp(direct[k].f32.data(), plain[k].f32.data(), direct[k].f32.size() * 4), 0)
            << r.tensors()[k].path;
      }
    }
  }
}

TEST(TraceDirect, ADamagedChunkIsReportedAsHdf5ReportsIt) {
  // Flip one byte in the middle of a stored chunk of the sample's largest tensor.
  const std::string path = test::temp_dir() + "/damaged.h5";
  std::filesystem::copy_file(kSample, path, std::filesystem::copy_options::overwrite_existing);
  std::string target;
  {
    TraceReader r(path);
    const TensorInfo* big = nullptr;
    for (const auto& t : r.tensors())
      if (!big || t.bytes() > big->bytes()) big = &t;
    target = big->path;
  }
  test::damage_first_chunk(path, target);
  auto error_of = [&](bool direct) {
    ::setenv("FP8SIM_TRACE_PROBE", "0", 1);  // the probe would read the damaged tensor too
    DirectSwitch sw(direct);
    TraceReader r(path);
    const TensorInfo* t = nullptr;
    for (const auto& x : r.tensors())
      if (x.path == target) t = &x;
    std::string msg;
    try {
      r.read(*t);
    } catch (const Error& e) {
      msg = e.what();
    }
    ::unsetenv("FP8SIM_TRACE_PROBE");
    return msg;
  };
  const uint64_t fallbacks = direct_read_stats().fallbacks;
  const std::string with = error_of(true), without = error_of(false);
  EXPECT_FALSE(with.empty()) << "the damaged chunk was read without an error";
  EXPECT_EQ(with, without);
  EXPECT_EQ(with.find('\n'), std::string::npos);
  EXPECT_EQ(direct_read_stats().fallbacks, fallbacks + 1);
}

TEST(TraceDirect, UnshuffleInvertsTheShuffleFilter) {
  // The shuffle filter as HDF5 defines it (byte k of element i goes to k * elements + i, a tail
  // shorter than one element stays last), undone by both loops, for every element size the
  // traces use and others, across the AVX2 loops' 32-element steps and with tails.
  for (size_t es : {1, 2, 3, 4, 8})
    for (size_t n : {0, 1, 5, 64, 127, 128, 129, 1000, 4099, 65536 + 3}) {
      SCOPED_TRACE(testing::Message() << es << "-byte elements, " << n << " bytes");
      std::vector<uint8_t> plain(n), shuffled(n);
      for (size_t i = 0; i < n; ++i) plain[i] = static_cast<uint8_t>(pattern(i) >> 11);
      const size_t elems = n / es;
      for (size_t k = 0; k < es; ++k)
        for (size_t i = 0; i < elems; ++i) shuffled[k * elems + i] = plain[i * es + k];
      for (size_t i = elems * es; i < n; ++i) shuffled[i] = plain[i];
      for (bool simd : {true, false}) {
        std::vector<uint8_t> out(n, 0xAB);
        hdf5_unshuffle(shuffled.data(), n, es, out.data(), simd);
        EXPECT_EQ(out, plain) << (simd ? "simd" : "portable");
      }
    }
}

TEST(TraceDirect, Fletcher32IsHdf5s) {
  // HDF5 appends its Fletcher-32 to each chunk; a dataset with that filter alone stores the raw
  // bytes and the checksum, read back with H5Dread_chunk. Odd chunk lengths take the last-byte rule.
  const std::string path = test::temp_dir() + "/fletcher.h5";
  // Lengths around the blocks of 8192 bytes that hdf5_fletcher32 sums at once, and contents whose
  // sums are large (all 0xFF) or zero, where the folding decides the representation.
  for (hsize_t n : {hsize_t{1}, hsize_t{2}, hsize_t{7}, hsize_t{360}, hsize_t{721}, hsize_t{722}, hsize_t{5000},
                    hsize_t{8191}, hsize_t{8192}, hsize_t{8193}, hsize_t{16389}, hsize_t{262144}, hsize_t{262147}})
    for (int fill : {-1, 0, 0xFF}) {
      SCOPED_TRACE(testing::Message() << n << " bytes, fill " << fill);
      std::vector<uint8_t> v(n);
      for (size_t i = 0; i < n; ++i)
        v[i] = fill < 0 ? static_cast<uint8_t>(pattern(i) >> 7) : static_cast<uint8_t>(fill);
      {
        H5::H5File f(path, H5F_ACC_TRUNC);
        H5::DSetCreatPropList cp;
        cp.setChunk(1, &n);
        cp.setFletcher32();
        H5::DataSpace sp(1, &n);
        H5::DataSet ds = f.createDataSet("x", H5::PredType::STD_U8LE, sp, cp);
        ds.write(v.data(), H5::PredType::NATIVE_UINT8);
      }
      H5::H5File f(path, H5F_ACC_RDONLY);
      H5::DataSet ds = f.openDataSet("x");
      std::vector<uint8_t> raw(n + 4);
      const hsize_t off = 0;
      uint32_t filters = 0;
      ASSERT_GE(H5Dread_chunk(ds.getId(), H5P_DEFAULT, &off, &filters, raw.data()), 0);
      ASSERT_EQ(std::memcmp(raw.data(), v.data(), n), 0);
      const uint32_t stored = static_cast<uint32_t>(raw[n]) | static_cast<uint32_t>(raw[n + 1]) << 8 |
                              static_cast<uint32_t>(raw[n + 2]) << 16 | static_cast<uint32_t>(raw[n + 3]) << 24;
      EXPECT_EQ(hdf5_fletcher32(v.data(), n), stored);
      EXPECT_EQ(hdf5_fletcher32(v.data(), n, false), stored);  // the portable loop
    }
}

}  // namespace
}  // namespace fp8sim::trace
