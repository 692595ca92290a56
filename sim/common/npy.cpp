#include "sim/common/npy.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <unistd.h>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"

namespace fp8sim {

namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct DtypeEntry {
  NpyDtype dtype;
  const char* descr;
  int size;
};
constexpr DtypeEntry kDtypes[] = {
    {NpyDtype::F32, "<f4", 4}, {NpyDtype::F16, "<f2", 2}, {NpyDtype::U16, "<u2", 2},
    {NpyDtype::U8, "|u1", 1},  {NpyDtype::V2, "|V2", 2},
};

// A tiny reader for the header's Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } (keys in any order, single or double quotes).
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& file) : s_(s), file_(file) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip();
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      const std::string key = quoted();
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        descr = quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = word() == "True";
        have_fortran = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}'", key));
      }
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip();
      if (peek() == '}') break;
      fail("expected ',' or '}'");
    }
    if (!have_descr || !have_fortran || !have_shape) fail("missing 'descr', 'fortran_order' or 'shape'");
  }

 private:
  std::string_view s_;
  const std::string& file_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("'{}' is not a valid .npy file: bad header ({})", file_, what));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    ++i_;
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  std::string word() {
    const size_t b = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> out;
    expect('(');
    while (true) {
      skip();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      int64_t v = 0;
      bool any = false;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v))
          fail("dimension too large");
        ++i_;
        any = true;
      }
      if (!any) fail("shape must be a tuple of non-negative integers");
      if (peek() == 'L') ++i_;  // Python 2 long suffix
      out.push_back(v);
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("expected ',' or ')' in shape");
    }
  }
};

}  // namespace

const char* npy_dtype_descr(NpyDtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.descr;
  return "?";
}

int npy_dtype_size(NpyDtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.size;
  return 0;
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NpyArray read_npy(const std::filesystem::path& path, bool with_data) {
  const bool from_stdin = path == "-";
  FP8SIM_CHECK(with_data || !from_stdin, "read_npy: a header-only read needs a file");
  const std::string file = from_stdin ? std::string("standard input") : path.string();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(nullptr, &std::fclose);
  uint64_t size = 0;  // the file's size; unknown for standard input
  if (from_stdin) {
    f.reset(::fdopen(::dup(STDIN_FILENO), "rb"));
    FP8SIM_REQUIRE(f != nullptr, "cannot read standard input: {}", std::strerror(errno));
  } else {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    FP8SIM_REQUIRE(!ec && std::filesystem::exists(st), "cannot open '{}': no such file", file);
    FP8SIM_REQUIRE(std::filesystem::is_regular_file(st), "'{}' is not a regular file", file);
    f.reset(std::fopen(file.c_str(), "rb"));
    FP8SIM_REQUIRE(f != nullptr, "cannot open '{}': {}", file, std::strerror(errno));
    note_input_read(path);
    size = std::filesystem::file_size(path);
  }

  unsigned char pre[12];
  const size_t got = std::fread(pre, 1, 10, f.get());
  FP8SIM_REQUIRE(got >= 6 && std::memcmp(pre, kMagic, 6) == 0,
                 "'{}' is not a .npy file (wrong magic: expected \\x93NUMPY)", file);
  FP8SIM_REQUIRE(got == 10, "'{}' is truncated (the .npy preamble is incomplete)", file);
  const int major = pre[6];
  FP8SIM_REQUIRE(major >= 1 && major <= 3, "'{}': unsupported .npy format version {}.{}", file, major, pre[7]);
  uint64_t hlen, hstart;
  if (major == 1) {
    hlen = pre[8] | (uint64_t{pre[9]} << 8);
    hstart = 10;
  } else {
    FP8SIM_REQUIRE(std::fread(pre + 10, 1, 2, f.get()) == 2, "'{}' is truncated (the .npy preamble is incomplete)",
                   file);
    hlen = pre[8] | (uint64_t{pre[9]} << 8) | (uint64_t{pre[10]} << 16) | (uint64_t{pre[11]} << 24);
    hstart = 12;
  }
  if (from_stdin) {
    // numpy writes headers of a few hundred bytes; a longer one from a stream is refused before
    // it is read.
    FP8SIM_REQUIRE(hlen <= (uint64_t{1} << 20), "'{}': a .npy header of {} bytes is too long", file, hlen);
  } else {
    FP8SIM_REQUIRE(hstart + hlen <= size, "'{}' is truncated (header of {} bytes, file of {} bytes)", file, hlen, size);
  }
  std::string header(hlen, '\0');
  FP8SIM_REQUIRE(std::fread(header.data(), 1, hlen, f.get()) == hlen, "'{}' is truncated (in the .npy header)", file);

  std::string descr;
  bool fortran = false;
  NpyArray a;
  HeaderParser(header, file).parse(descr, fortran, a.shape);
  FP8SIM_REQUIRE(!fortran,
                 "'{}' is stored in Fortran (column-major) order; save it with C order "
                 "(numpy.ascontiguousarray) first",
                 file);
  // '<' little-endian, '|' not applicable, '=' native (little-endian on every supported host).
  std::string norm = descr;
  if (!norm.empty() && (norm[0] == '=' || (norm[0] == '<' && (norm == "<u1" || norm == "<V2")))) norm[0] = '|';
  if (norm == "=f4") norm = "<f4";
  if (!norm.empty() && norm[0] == '|' && (norm == "|f4" || norm == "|f2" || norm == "|u2")) norm[0] = '<';
  bool found = false;
  for (const auto& e : kDtypes) {
    if (norm == e.descr) {
      a.dtype = e.dtype;
      found = true;
    }
  }
  if (!found && !with_data) {
    a.unsupported = descr;
    return a;
  }
  FP8SIM_REQUIRE(found,
                 "'{}' has unsupported dtype '{}' (supported: float32 '<f4', float16 '<f2', uint16 '<u2', "
                 "bfloat16 as '<V2' or raw '<u2', uint8 '|u1'; big-endian data is not supported)",
                 file, descr);

  int64_t numel = 1;
  for (int64_t d : a.shape) FP8SIM_REQUIRE(!__builtin_mul_overflow(numel, d, &numel), "'{}': shape is too large", file);
  int64_t bytes = 0;
  FP8SIM_REQUIRE(!__builtin_mul_overflow(numel, int64_t{npy_dtype_size(a.dtype)}, &bytes), "'{}': shape is too large",
                 file);
  const std::string shape_text = fmt::format("({})", fmt::join(a.shape, ", "));
  if (from_stdin) {
    // The size is known only at the end of the stream: read in slices, so a huge declared shape
    // over a short stream ends as "truncated", not as an allocation of the declared size.
    const size_t slice = size_t{64} << 20;
    size_t have = 0;
    while (have < static_cast<size_t>(bytes)) {
      const size_t want = std::min(slice, static_cast<size_t>(bytes) - have);
      a.data.resize(have + want);
      const size_t n = std::fread(a.data.data() + have, 1, want, f.get());
      have += n;
      FP8SIM_REQUIRE(n == want, "'{}' is truncated: shape {} needs {} bytes of data, found {}", file, shape_text, bytes,
                     have);
    }
    FP8SIM_REQUIRE(std::fgetc(f.get()) == EOF, "'{}' has unexpected bytes after the data (shape {})", file, shape_text);
    return a;
  }
  const uint64_t avail = size - hstart - hlen;
  FP8SIM_REQUIRE(avail >= static_cast<uint64_t>(bytes), "'{}' is truncated: shape {} needs {} bytes of data, found {}",
                 file, shape_text, bytes, avail);
  FP8SIM_REQUIRE(avail == static_cast<uint64_t>(bytes), "'{}' has {} unexpected bytes after the data (shape {})", file,
                 avail - static_cast<uint64_t>(bytes), shape_text);
  if (!with_data) return a;
  a.data.resize(static_cast<size_t>(bytes));
  FP8SIM_REQUIRE(std::fread(a.data.data(), 1, a.data.size(), f.get()) == a.data.size(), "'{}': read failed", file);
  return a;
}

void write_npy_to(AtomicFile& out, NpyDtype dtype, const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    FP8SIM_CHECK(d >= 0, "negative dimension");
    numel *= d;
  }
  FP8SIM_CHECK(static_cast<size_t>(numel) * npy_dtype_size(dtype) == bytes, "write_npy: {} bytes for {} elements",
               bytes, numel);
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_text += fmt::format("{}, ", shape[i]);
  if (shape.size() > 1) shape_text.resize(shape_text.size() - 2);
  else if (shape.size() == 1) shape_text.pop_back();  // "(5,)"
  shape_text += ")";
  const char* descr = dtype == NpyDtype::V2 ? "<V2" : npy_dtype_descr(dtype);
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  // Pad with spaces so that the data starts on a 64-byte boundary; the header ends with '\n'.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t pre = v2 ? 12 : 10;
  const size_t total = ((pre + dict.size() + 1 + 63) / 64) * 64;
  dict.append(total - pre - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string head(kMagic, 6);
  head.push_back(static_cast<char>(v2 ? 2 : 1));
  head.push_back(0);
  const uint32_t hl = static_cast<uint32_t>(dict.size());
  head.push_back(static_cast<char>(hl & 0xFF));
  head.push_back(static_cast<char>((hl >> 8) & 0xFF));
  if (v2) {
    head.push_back(static_cast<char>((hl >> 16) & 0xFF));
    head.push_back(static_cast<char>((hl >> 24) & 0xFF));
  }
  out.write(head.data(), head.size());
  out.write(dict.data(), dict.size());
  if (bytes) out.write(data, bytes);
}

void write_npy(const std::filesystem::path& path, NpyDtype dtype, const std::vector<int64_t>& shape, const void* data,
               size_t bytes) {
  AtomicFile out(path);
  write_npy_to(out, dtype, shape, data, bytes);
  out.commit();
}

}  // namespace fp8sim
