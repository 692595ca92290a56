#include "tests/support/test_util.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fp8sim::test {

namespace fs = std::filesystem;

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::vector<uint8_t> out;
  if (path.size() > 3 && path.substr(path.size() - 3) == ".gz") {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) {
      ADD_FAILURE() << "cannot open " << path;
      return out;
    }
    uint8_t buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
    gzclose(f);
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return out;
  }
  out.assign(std::istreambuf_iterator<char>(in), {});
  return out;
}

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

CommandResult run_shell(const std::string& cmdline) {
  const fs::path dir = temp_dir();
  const fs::path o = dir / "stdout", e = dir / "stderr";
  const std::string full = cmdline + " >" + quote(o.string()) + " 2>" + quote(e.string()) + " </dev/null";
  const int rc = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

CommandResult run_fp8sim(const std::vector<std::string>& args) {
  const char* other = std::getenv("FP8SIM_TEST_BINARY");  // the CLI tests against another build
  std::string cmd = quote(other && *other ? other : FP8SIM_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  return run_shell(cmd);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
struct TempRoot {
  fs::path root;
  TempRoot() {
    char tmpl[] = "/tmp/fp8sim-test-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};
}  // namespace

std::string temp_dir() {
  static TempRoot r;
  static int n = 0;
  fs::path p = r.root / std::to_string(n++);
  fs::create_directories(p);
  return p.string();
}

void damage_first_chunk(const std::string& file, const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = f < 0 ? -1 : H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hsize_t coord[32] = {};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  const herr_t rc = d < 0 ? -1 : H5Dget_chunk_info_by_coord(d, coord, &mask, &addr, &size);
  if (d >= 0) H5Dclose(d);
  if (f >= 0) H5Fclose(f);
  ASSERT_GE(rc, 0) << "no first chunk of " << dataset << " in " << file;
  ASSERT_GT(size, 16u);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(addr + size / 2));
  char c = 0;
  io.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  io.seekp(static_cast<std::streamoff>(addr + size / 2));
  io.write(&c, 1);
}

}  // namespace fp8sim::test
