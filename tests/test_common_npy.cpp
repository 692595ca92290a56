// .npy reader / writer: round trips for every supported dtype and shape rank, headers as numpy
// writes them (v1, v2, double quotes, reordered keys), and one-line errors for bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/common/npy.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fp8sim_npy_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path path(const std::string& name) const { return dir_ / name; }
  // A file with the given raw bytes.
  fs::path raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  // A v1 .npy with this header dict (padded like numpy) and data.
  static std::string npy_v1(const std::string& dict, const std::string& data) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64) h.push_back(' ');
    h.push_back('\n');
    std::string out = std::string("\x93NUMPY", 6) + '\x01' + '\x00';
    out.push_back(static_cast<char>(h.size() & 0xFF));
    out.push_back(static_cast<char>(h.size() >> 8));
    return out + h + data;
  }
  std::string error_of(const fs::path& p) const {
    try {
      read_npy(p);
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      return msg;
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(NpyTest, RoundTripsEveryDtypeAndRank) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3}, {2, 3, 4}, {0, 3}};
  for (NpyDtype d : {NpyDtype::F32, NpyDtype::F16, NpyDtype::U16, NpyDtype::U8, NpyDtype::V2}) {
    for (const auto& shape : shapes) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      std::vector<uint8_t> data(static_cast<size_t>(n) * npy_dtype_size(d));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
      const fs::path p = path("a.npy");
      write_npy(p, d, shape, data.data(), data.size());
      const NpyArray a = read_npy(p);
      EXPECT_EQ(a.dtype, d);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.data, data);
      // The data starts on a 64-byte boundary, as numpy writes it.
      EXPECT_EQ((fs::file_size(p) - data.size()) % 64, 0u);
    }
  }
}

TEST_F(NpyTest, ReadsNumpyStyleHeaders) {
  // Exactly what numpy 2.x writes for np.zeros((2, 3), np.float32) (header padded to 64).
  const std::string data(24, '\0');
  const NpyArray a =
      read_npy(raw("np.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data)));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, NpyDtype::F32);
  // 1-tuple, reordered keys, double quotes, no trailing comma; ml_dtypes' bfloat16 ('<V2').
  const NpyArray b = read_npy(
      raw("b.npy", npy_v1("{\"shape\": (4,), \"fortran_order\": False, \"descr\": \"<V2\"}", std::string(8, '\x01'))));
  EXPECT_EQ(b.shape, std::vector<int64_t>{4});
  EXPECT_EQ(b.dtype, NpyDtype::V2);
  // Version 2.0 (4-byte header length).
  std::string h = "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }";
  while ((12 + h.size() + 1) % 64) h.push_back(' ');
  h.push_back('\n');
  std::string v2 = std::string("\x93NUMPY", 6) + '\x02' + '\x00';
  v2.push_back(static_cast<char>(h.size()));
  v2 += std::string(3, '\0');
  const NpyArray c = read_npy(raw("v2.npy", v2 + h + "abc"));
  EXPECT_EQ(c.dtype, NpyDtype::U8);
  EXPECT_EQ(std::string(c.data.begin(), c.data.end()), "abc");
}

TEST_F(NpyTest, BadFilesGiveOneLineErrors) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  EXPECT_NE(error_of(path("missing.npy")).find("no such file"), std::string::npos);
  EXPECT_NE(error_of(dir_).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of(raw("magic.npy", "PK\x03\x04 this is a zip")).find("wrong magic"), std::string::npos);
  EXPECT_NE(error_of(raw("short.npy", std::string("\x93NUM", 4))).find("wrong magic"), std::string::npos);
  EXPECT_NE(error_of(raw("pre.npy", std::string("\x93NUMPY\x01", 7))).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(raw("f8.npy",
                         npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0'))))
                .find("unsupported dtype '<f8'"),
            std::string::npos);
  EXPECT_NE(
      error_of(raw("be.npy", npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0'))))
          .find("unsupported dtype '>f4'"),
      std::string::npos);
  EXPECT_NE(error_of(raw("fortran.npy",
                         npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0'))))
                .find("Fortran"),
            std::string::npos);
  const std::string trunc = error_of(raw("trunc.npy", npy_v1(good_dict, std::string(7, '\0'))));
  EXPECT_NE(trunc.find("truncated"), std::string::npos) << trunc;
  EXPECT_NE(trunc.find("needs 8 bytes"), std::string::npos) << trunc;
  EXPECT_NE(error_of(raw("extra.npy", npy_v1(good_dict, std::string(9, '\0')))).find("unexpected bytes"),
            std::string::npos);
  EXPECT_NE(
      error_of(raw("hdr.npy", npy_v1("{'descr': '<f4', 'shape': (2,), }", std::string(8, '\0')))).find("bad header"),
      std::string::npos);
  EXPECT_NE(error_of(raw("shape.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", "")))
                .find("bad header"),
            std::string::npos);
  // A header length pointing past the end of the file.
  std::string cut = npy_v1(good_dict, std::string(8, '\0')).substr(0, 30);
  EXPECT_NE(error_of(raw("cut.npy", cut)).find("truncated"), std::string::npos);
}

TEST_F(NpyTest, WritesAtomically) {
  // A target inside a missing directory is created; a failed write leaves nothing behind.
  const fs::path p = dir_ / "sub" / "out.npy";
  const float v[2] = {1.0f, 2.0f};
  write_npy(p, NpyDtype::F32, {2}, v, 8);
  EXPECT_TRUE(fs::exists(p));
  const fs::path blocked = dir_ / "file_not_dir";
  std::ofstream(blocked) << "x";
  EXPECT_THROW(write_npy(blocked / "x.npy", NpyDtype::F32, {2}, v, 8), Error);
  // Overwriting keeps the old file intact until the new one is complete (rename).
  write_npy(p, NpyDtype::F32, {1}, v, 4);
  EXPECT_EQ(read_npy(p).shape, std::vector<int64_t>{1});
  for (const auto& e : fs::directory_iterator(dir_ / "sub")) EXPECT_EQ(e.path().filename(), "out.npy");
}

}  // namespace
}  // namespace fp8sim
