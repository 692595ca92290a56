#include "sim/trace/tensor_files.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>

#include "sim/common/check.hpp"
#include "sim/common/json.hpp"
#include "sim/common/npy.hpp"
#include "sim/common/output.hpp"

namespace fp8sim::trace {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Role, parameter, module, op and layer of a tensor called `name` (the rules in the header).
TensorInfo describe(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  TensorInfo t;
  t.role = Role::Weight;
  std::string param = name;
  for (const auto& [suffix, role] : {std::pair<std::string_view, Role>{".exp_avg_sq", Role::ExpAvgSq},
                                     {".exp_avg", Role::ExpAvg},
                                     {".grad", Role::Grad}})
    if (ends_with(name, suffix)) {
      t.role = role;
      param = name.substr(0, name.size() - suffix.size());
      break;
    }
  t.param = param;
  t.name = param;
  const auto dot = param.rfind('.');
  t.module = dot == std::string::npos ? param : param.substr(0, dot);
  const std::string last = t.module.substr(t.module.rfind('.') == std::string::npos ? 0 : t.module.rfind('.') + 1);
  if (t.module.find("embed") != std::string::npos || last == "wte" || last == "wpe") t.op = "embedding";
  else if (last.find("norm") != std::string::npos || last.rfind("ln_", 0) == 0) t.op = "norm";
  else if (shape.size() == 2) t.op = "linear";
  else t.op = "other";
  static const std::regex kLayer(R"((?:^|\.)(?:layers|h|layer|blocks)\.(\d+)\.)");
  std::smatch m;
  if (std::regex_search(param, m, kLayer)) t.layer = std::stoi(m[1].str());
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.path = fmt::format("{}/{}", role_name(t.role), t.name);
  t.stored_bytes = t.bytes();
  return t;
}

// Sorts the tensors (by role, then name) and fills the rest of the trace; `per_tensor`, parallel to
// the tensors as found, is put in the same order.
template <class T>
void finish(TensorFiles& f, std::vector<T>& per_tensor, const std::string& producer, const fs::path& path) {
  std::vector<size_t> order(f.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TensorInfo &x = f.tensors[a], &y = f.tensors[b];
    return x.role != y.role ? x.role < y.role : x.name < y.name;
  });
  std::vector<TensorInfo> tensors;
  std::vector<T> data;
  for (size_t i : order) {
    tensors.push_back(std::move(f.tensors[i]));
    data.push_back(std::move(per_tensor[i]));
  }
  f.tensors = std::move(tensors);
  per_tensor = std::move(data);
  for (size_t i = 1; i < f.tensors.size(); ++i)
    FP8SIM_REQUIRE(f.tensors[i].role != f.tensors[i - 1].role || f.tensors[i].name != f.tensors[i - 1].name,
                   "'{}': two tensors are the {} of '{}'", path.string(), role_name(f.tensors[i].role),
                   f.tensors[i].name);
  FP8SIM_REQUIRE(!f.tensors.empty(), "'{}' holds no float32, bfloat16 or float16 tensor{}", path.string(),
                 f.ignored.empty() ? "" : fmt::format(" ({} ignored: {})", f.ignored.size(), f.ignored.front()));
  f.header.producer = producer;
  f.header.command = path.string();
  f.header.model_kind = "generic";
  StepInfo s;
  s.step = f.tensors.empty() ? 0 : f.tensors.front().step;
  s.group = "tensors";
  s.contents = "tensors";
  for (size_t i = 0; i < f.tensors.size(); ++i) s.tensors.push_back(i);
  f.steps = {s};
}

// ---- safetensors ------------------------------------------------------------------------------------
class Safetensors : public TensorFiles {
 public:
  explicit Safetensors(const fs::path& p) : path_(p) {
    const std::string file = p.string();
    std::error_code ec;
    FP8SIM_REQUIRE(fs::is_regular_file(p, ec), "cannot open '{}': no such file", file);
    bytes = fs::file_size(p);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(file.c_str(), "rb"), &std::fclose);
    FP8SIM_REQUIRE(f != nullptr, "cannot open '{}': {}", file, std::strerror(errno));
    note_input_read(p);
    unsigned char n8[8];
    FP8SIM_REQUIRE(bytes >= 8 && std::fread(n8, 1, 8, f.get()) == 8,
                   "'{}' is not a safetensors file (shorter than its 8-byte header length)", file);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | n8[i];
    FP8SIM_REQUIRE(n >= 2 && n <= bytes - 8, "'{}' is not a safetensors file (header length {} for a file of {} bytes)",
                   file, n, bytes);
    std::string text(n, '\0');
    FP8SIM_REQUIRE(std::fread(text.data(), 1, n, f.get()) == n, "'{}': cannot read its header", file);
    Json doc;
    try {
      doc = Json::parse(text);
    } catch (const Error& e) {
      throw Error(fmt::format("'{}' is not a safetensors file (its header is not JSON: {})", file, e.what()));
    }
    FP8SIM_REQUIRE(doc.is_object(), "'{}': the safetensors header is not a JSON object", file);
    data_start_ = 8 + n;
    const uint64_t data_bytes = bytes - data_start_;
    for (const auto& [name, e] : doc.as_object()) {
      if (name == "__metadata__") {
        header.training = e;
        continue;
      }
      const std::string where = fmt::format("'{}': tensor '{}'", file, name);
      FP8SIM_REQUIRE(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
                     "{} lacks dtype, shape or data_offsets", where);
      const Json& dt = e.at("dtype");
      const Json& sh = e.at("shape");
      const Json& off = e.at("data_offsets");
      FP8SIM_REQUIRE(dt.is_string() && sh.is_array() && off.is_array() && off.size() == 2,
                     "{}: dtype must be a string, shape an array, data_offsets two numbers", where);
      std::vector<int64_t> shape;
      int64_t numel = 1;
      for (const auto& d : sh.as_array()) {
        FP8SIM_REQUIRE(d.is_number() && d.as_number() >= 0 && d.as_number() == static_cast<double>(d.as_int()),
                       "{}: shape entries must be non-negative integers", where);
        shape.push_back(d.as_int());
        FP8SIM_REQUIRE(!__builtin_mul_overflow(numel, d.as_int(), &numel), "{}: shape is too large", where);
      }
      for (const auto& o : off.as_array())
        FP8SIM_REQUIRE(o.is_number() && o.as_number() >= 0 && o.as_number() == static_cast<double>(o.as_int()),
                       "{}: data_offsets must be non-negative integers", where);
      const uint64_t b = static_cast<uint64_t>(off.as_array()[0].as_int());
      const uint64_t end = static_cast<uint64_t>(off.as_array()[1].as_int());
      FP8SIM_REQUIRE(b <= end && end <= data_bytes, "{}: data_offsets [{}, {}] lie outside the {} bytes of data", where,
                     b, end, data_bytes);
      const std::string d = dt.as_string();
      const int elem = d == "F32" ? 4 : (d == "BF16" || d == "F16") ? 2 : 0;
      if (d == "F32" || d == "BF16" || d == "F16") {
        FP8SIM_REQUIRE(end - b == static_cast<uint64_t>(numel) * static_cast<uint64_t>(elem),
                       "{}: {} bytes of data for {} {} elements", where, end - b, numel, d);
      }
      if (elem == 0 || numel == 0) {
        ignored.push_back(fmt::format("{} ({}, {})", name, d, numel == 0 ? "empty" : "not a float type fp8sim reads"));
        continue;
      }
      const DType dtype = d == "F32" ? DType::F32 : (d == "BF16" ? DType::BF16 : DType::F16);
      tensors.push_back(describe(name, dtype, shape));
      offsets_.push_back(b);
    }
    finish(*this, offsets_, "safetensors file", p);
  }

  TensorData read(size_t i) const override {
    const TensorInfo& t = tensors.at(i);
    TensorData d;
    d.dtype = t.dtype;
    d.shape = t.shape;
    const size_t n = static_cast<size_t>(t.numel());
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path_.c_str(), "rb"), &std::fclose);
    FP8SIM_REQUIRE(f != nullptr, "cannot open '{}': {}", path_.string(), std::strerror(errno));
    FP8SIM_REQUIRE(std::fseek(f.get(), static_cast<long>(data_start_ + offsets_[i]), SEEK_SET) == 0,
                   "cannot read '{}' from '{}'", t.name, path_.string());
    size_t got;
    if (t.dtype == DType::F32) {
      d.f32.resize(n);
      got = std::fread(d.f32.data(), 4, n, f.get());
    } else {
      d.bits.resize(n);
      got = std::fread(d.bits.data(), 2, n, f.get());
    }
    FP8SIM_REQUIRE(got == n, "cannot read '{}' from '{}' (file changed?)", t.name, path_.string());
    return d;
  }

 private:
  fs::path path_;
  uint64_t data_start_ = 0;
  std::vector<uint64_t> offsets_;  // parallel to tensors
};

// ---- a folder of .npy files ---------------------------------------------------------------------------
class NpyFolder : public TensorFiles {
 public:
  explicit NpyFolder(const fs::path& dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".npy") files.push_back(e.path());
    FP8SIM_REQUIRE(!ec, "cannot list '{}': {}", dir.string(), ec.message());
    std::sort(files.begin(), files.end());
    FP8SIM_REQUIRE(!files.empty(),
                   "'{}' is a folder without .npy files (fp8sim reads a trace, a .safetensors file "
                   "or a folder of .npy files)",
                   dir.string());
    for (const auto& p : files) {
      const NpyArray a = read_npy(p, false);
      bytes += fs::file_size(p);
      const std::string name = p.stem().string();
      if (!a.unsupported.empty()) {
        ignored.push_back(
            fmt::format("{} (dtype '{}', not a float type fp8sim reads)", p.filename().string(), a.unsupported));
        continue;
      }
      if (a.dtype == NpyDtype::U16 || a.dtype == NpyDtype::U8 || a.numel() == 0 || a.shape.empty()) {
        ignored.push_back(fmt::format("{} ({})", p.filename().string(),
                                      a.numel() == 0 || a.shape.empty() ? "empty or 0-D"
                                      : a.dtype == NpyDtype::U16 ? "raw uint16: save bfloat16 with ml_dtypes' bfloat16"
                                                                 : "uint8"));
        continue;
      }
      const DType dtype = a.dtype == NpyDtype::F32 ? DType::F32 : (a.dtype == NpyDtype::F16 ? DType::F16 : DType::BF16);
      tensors.push_back(describe(name, dtype, a.shape));
      files_.push_back(p);
    }
    finish(*this, files_, "folder of .npy files", dir);
  }

  TensorData read(size_t i) const override {
    const TensorInfo& t = tensors.at(i);
    const NpyArray a = read_npy(files_.at(i));
    FP8SIM_REQUIRE(a.shape == t.shape, "'{}' changed since it was opened", files_.at(i).string());
    TensorData d;
    d.dtype = t.dtype;
    d.shape = t.shape;
    if (t.dtype == DType::F32) d.f32.assign(a.f32(), a.f32() + a.numel());
    else d.bits.assign(a.u16(), a.u16() + a.numel());
    return d;
  }

 private:
  std::vector<fs::path> files_;  // parallel to tensors
};

// ---- tensors in memory ---------------------------------------------------------------------------------
class InMemory : public TensorFiles {
 public:
  InMemory(std::vector<MemoryTensor> in, const std::string& label, int64_t step) {
    for (auto& m : in) {
      int64_t numel = 1;
      for (int64_t d : m.shape) numel *= d;
      if (m.shape.empty() || numel <= 0) {
        ignored.push_back(fmt::format("{} ({})", m.name, m.shape.empty() ? "0-D" : "empty"));
        continue;
      }
      FP8SIM_REQUIRE(m.data != nullptr, "{}: tensor '{}' has no data", label, m.name);
      TensorInfo t = describe(m.name, m.dtype, m.shape);
      t.step = step;
      bytes += t.bytes();
      tensors.push_back(std::move(t));
      data_.push_back(m.data);
    }
    finish(*this, data_, "tensors in memory", label);
  }

  TensorData read(size_t i) const override {
    const TensorInfo& t = tensors.at(i);
    TensorData d;
    d.dtype = t.dtype;
    d.shape = t.shape;
    const size_t n = static_cast<size_t>(t.numel());
    if (t.dtype == DType::F32) {
      const float* p = static_cast<const float*>(data_.at(i));
      d.f32.assign(p, p + n);
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(data_.at(i));
      d.bits.assign(p, p + n);
    }
    return d;
  }

 private:
  std::vector<const void*> data_;  // parallel to tensors
};

}  // namespace

std::unique_ptr<TensorFiles> tensors_in_memory(std::vector<MemoryTensor> tensors, const std::string& label,
                                               int64_t step) {
  return std::make_unique<InMemory>(std::move(tensors), label, step);
}

bool is_tensor_files(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || path.extension() == ".safetensors";
}

std::unique_ptr<TensorFiles> open_tensor_files(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return std::make_unique<NpyFolder>(path);
  return std::make_unique<Safetensors>(path);
}

}  // namespace fp8sim::trace
