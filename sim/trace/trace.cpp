// The only file that talks to HDF5 (one vendor API per file). Everything HDF5 reports is turned
// into a one-line fp8sim::Error here; HDF5's own error-stack printing is switched off.
#include "sim/trace/trace.hpp"
#include "sim/trace/chunk_decode.hpp"
#include "sim/trace/tensor_files.hpp"

#include <H5Cpp.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <tuple>

#include "sim/common/check.hpp"
#include "sim/common/cleanup.hpp"
#include "sim/common/output.hpp"
#include "sim/formats/fp8.hpp"

namespace fp8sim::trace {

namespace fs = std::filesystem;

// ---- small enums ----------------------------------------------------------------------------------

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "float32";
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "float32") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16") return DType::F16;
  return std::nullopt;
}

std::string_view role_name(Role r) {
  switch (r) {
    case Role::Weight:
      return "weight";
    case Role::Grad:
      return "grad";
    case Role::ExpAvg:
      return "exp_avg";
    case Role::ExpAvgSq:
      return "exp_avg_sq";
    case Role::Activation:
      return "activation";
    case Role::ActivationGrad:
      return "activation_grad";
  }
  return "?";
}

std::optional<Role> parse_role(std::string_view s) {
  for (Role r : kAllRoles)
    if (role_name(r) == s) return r;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

float TensorData::value(size_t i) const {
  switch (dtype) {
    case DType::F32:
      return f32[i];
    case DType::BF16:
      return bf16_to_f32(bits[i]);
    case DType::F16:
      return fp16_to_f32(bits[i]);
  }
  return 0.0f;
}

// widen and count_nonfinite run on the OpenMP threads for large tensors: elementwise, and integer
// counts, so the results do not depend on the thread count.
constexpr int64_t kParallelElements = int64_t{1} << 18;

void TensorData::widen(float* out) const {
  const auto n = static_cast<int64_t>(size());
  if (dtype == DType::F32) {
    const float* x = f32.data();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];
  } else if (dtype == DType::BF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bits[static_cast<size_t>(i)]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(bits[static_cast<size_t>(i)]);
  }
}

Buffer<float> TensorData::widened() const {
  Buffer<float> out(size());
  widen(out.data());
  return out;
}

namespace {

// Elements per block of count_nonfinite: a block's count of all-ones exponents fits a 16-bit lane,
// so the compiler compares and counts eight 16-bit or four 32-bit elements per SSE instruction.
constexpr int64_t kNonFiniteBlock = 32768;

inline uint32_t bits_at(const float* x, int64_t i) { return f32_bits(x[i]); }
inline uint16_t bits_at(const uint16_t* x, int64_t i) { return x[i]; }

// NaN and Inf of elements [b, e) of x (fp32, or bf16 / fp16 bits) whose bits are Bits with exponent
// mask emask. Finite blocks (nearly all) cost one vectorised pass; a block with a special value is
// split into NaN and Inf afterwards.
template <class T, class Bits>
NonFinite nonfinite_of_block(const T* x, int64_t b, int64_t e, Bits emask) {
  uint16_t special = 0;
  for (int64_t i = b; i < e; ++i) special = static_cast<uint16_t>(special + ((bits_at(x, i) & emask) == emask ? 1 : 0));
  NonFinite nf;
  if (special == 0) return nf;
  const Bits mag = static_cast<Bits>(static_cast<Bits>(~Bits{0}) >> 1);  // the sign bit cleared
  for (int64_t i = b; i < e; ++i) {
    const Bits a = bits_at(x, i) & mag;
    if ((a & emask) != emask) continue;
    nf.inf += a == emask ? 1u : 0u;
    nf.nan += a != emask ? 1u : 0u;
  }
  return nf;
}

template <class T, class Bits>
NonFinite nonfinite_of(const T* x, int64_t n, Bits emask) {
  const int64_t blocks = (n + kNonFiniteBlock - 1) / kNonFiniteBlock;
  uint64_t nan = 0, inf = 0;
#pragma omp parallel for schedule(static) reduction(+ : nan, inf) if (n >= kParallelElements)
  for (int64_t k = 0; k < blocks; ++k) {
    const NonFinite nf = nonfinite_of_block(x, k * kNonFiniteBlock, std::min(n, (k + 1) * kNonFiniteBlock), emask);
    nan += nf.nan;
    inf += nf.inf;
  }
  return NonFinite{nan, inf};
}

}  // namespace

NonFinite count_nonfinite(const TensorData& t) {
  const auto n = static_cast<int64_t>(t.size());
  if (t.dtype == DType::F32) return nonfinite_of(t.f32.data(), n, uint32_t{0x7F800000u});
  // bf16: exponent 0x7F80; fp16: exponent 0x7C00 (all-ones exponent = Inf/NaN in both)
  return nonfinite_of(t.bits.data(), n, uint16_t(t.dtype == DType::BF16 ? 0x7F80u : 0x7C00u));
}

bool Filter::matches(const TensorInfo& t) const {
  if (step && t.step != *step) return false;
  if (role && t.role != *role) return false;
  if (layer && t.layer != *layer) return false;
  if (!op.empty() && t.op != op) return false;
  if (!name_contains.empty() && t.name.find(name_contains) == std::string::npos) return false;
  return true;
}

// ---- HDF5 plumbing --------------------------------------------------------------------------------
namespace {
std::atomic<bool> g_hdf5_teardown_unsafe{false};
}  // namespace

bool hdf5_teardown_unsafe() { return g_hdf5_teardown_unsafe.load(); }

namespace {

// HDF5 prints its whole error stack to stderr by default; we report one line instead. The
// setting is per thread in a thread-safe HDF5 build, so every thread that reads calls this.
void hdf5_init() {
  thread_local bool silenced = false;
  if (silenced) return;
  H5::Exception::dontPrint();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  silenced = true;
}

// The innermost (most specific) message on HDF5's error stack, e.g. "truncated file: eof = ...".
std::string hdf5_detail(const H5::Exception* e = nullptr) {
  struct Walk {
    std::string first;
  } w;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* wk = static_cast<Walk*>(data);
        if (wk->first.empty() && err && err->desc && *err->desc) wk->first = err->desc;
        return 0;
      },
      &w);
  H5Eclear2(H5E_DEFAULT);
  std::string s = w.first;
  if (s.empty() && e) s = e->getDetailMsg();
  if (s.empty()) s = "HDF5 error";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// A failed write's message: HDF5's, and the system's reason where the last system call failed for
// lack of room (a full disk, a quota, the file-size limit), which HDF5's message leaves out.
std::string write_failure_detail(const H5::Exception* e) {
  const int err = errno;
  std::string s = hdf5_detail(e);
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) s += fmt::format(" ({})", std::strerror(err));
  return s;
}

// A parsed step number from "step_000123"; nullopt when the name does not have that form.
std::optional<int64_t> step_from_name(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return std::nullopt;
  int64_t v = 0;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) return std::nullopt;
  return v;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::string join_list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

// Attribute access that distinguishes "absent" (nullopt) from "present but wrong" (Error).
class Attrs {
 public:
  Attrs(const H5::H5Object& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const { return obj_.attrExists(key); }

  std::optional<std::string> str(const char* key) const {
    if (!has(key)) return std::nullopt;
    H5::Attribute a = obj_.openAttribute(key);
    FP8SIM_REQUIRE(a.getTypeClass() == H5T_STRING, "{}: attribute '{}' is not a string", where_, key);
    FP8SIM_REQUIRE(a.getSpace().getSimpleExtentNpoints() == 1, "{}: attribute '{}' is not a single string", where_,
                   key);
    H5::StrType st = a.getStrType();
    std::string s;
    a.read(st, s);
    // Fixed-length strings may carry NUL padding.
    if (auto z = s.find('\0'); z != std::string::npos) s.resize(z);
    return s;
  }

  std::optional<double> num(const char* key) const {
    if (!has(key)) return std::nullopt;
    H5::Attribute a = obj_.openAttribute(key);
    const H5T_class_t c = a.getTypeClass();
    FP8SIM_REQUIRE(c == H5T_INTEGER || c == H5T_FLOAT, "{}: attribute '{}' is not a number", where_, key);
    FP8SIM_REQUIRE(a.getSpace().getSimpleExtentNpoints() == 1, "{}: attribute '{}' is not a single number", where_,
                   key);
    if (c == H5T_INTEGER) {
      int64_t v = 0;
      a.read(H5::PredType::NATIVE_INT64, &v);
      return static_cast<double>(v);
    }
    double v = 0;
    a.read(H5::PredType::NATIVE_DOUBLE, &v);
    return v;
  }

  std::optional<int64_t> integer(const char* key) const {
    if (!has(key)) return std::nullopt;
    H5::Attribute a = obj_.openAttribute(key);
    const H5T_class_t c = a.getTypeClass();
    FP8SIM_REQUIRE(c == H5T_INTEGER || c == H5T_FLOAT, "{}: attribute '{}' is not an integer", where_, key);
    FP8SIM_REQUIRE(a.getSpace().getSimpleExtentNpoints() == 1, "{}: attribute '{}' is not a single integer", where_,
                   key);
    if (c == H5T_INTEGER) {
      int64_t v = 0;
      a.read(H5::PredType::NATIVE_INT64, &v);
      return v;
    }
    double d = 0;
    a.read(H5::PredType::NATIVE_DOUBLE, &d);
    FP8SIM_REQUIRE(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15,
                   "{}: attribute '{}' = {} is not an integer", where_, key, d);
    return static_cast<int64_t>(d);
  }

  std::optional<std::vector<int64_t>> int_array(const char* key) const {
    if (!has(key)) return std::nullopt;
    H5::Attribute a = obj_.openAttribute(key);
    FP8SIM_REQUIRE(a.getTypeClass() == H5T_INTEGER, "{}: attribute '{}' is not an integer array", where_, key);
    const hssize_t n = a.getSpace().getSimpleExtentNpoints();
    FP8SIM_REQUIRE(n >= 0 && n <= 1024, "{}: attribute '{}' has {} elements", where_, key, n);
    std::vector<int64_t> v(static_cast<size_t>(n));
    if (n) a.read(H5::PredType::NATIVE_INT64, v.data());
    return v;
  }

  std::optional<Json> json(const char* key) const {
    auto s = str(key);
    if (!s) return std::nullopt;
    try {
      return Json::parse(*s);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: attribute '{}' is not valid JSON ({})", where_, key, e.what()));
    }
  }

 private:
  const H5::H5Object& obj_;
  std::string where_;
};

// How a dataset's bytes map to a TensorData, decided once at open.
enum class Storage : uint8_t { F32, U16, I16, Float16Bits };

// Whether the dataset's elements are stored with the bytes a read of `stor` delivers: IEEE
// binary32 or 16-bit integers or floats, little-endian (then no conversion happens in H5Dread).
bool stored_as_read(hid_t ds, Storage stor) {
  const hid_t ft = H5Dget_type(ds);
  if (ft < 0) return false;
  bool same = false;
  switch (stor) {
    case Storage::F32:
      same = H5Tequal(ft, H5T_IEEE_F32LE) > 0;
      break;
    case Storage::U16:
      same = H5Tequal(ft, H5T_STD_U16LE) > 0;
      break;
    case Storage::I16:
      same = H5Tequal(ft, H5T_STD_I16LE) > 0;
      break;
    case Storage::Float16Bits:
      same = H5Tget_class(ft) == H5T_FLOAT && H5Tget_size(ft) == 2 && H5Tget_order(ft) == H5T_ORDER_LE;
      break;
  }
  H5Tclose(ft);
  return same;
}

// A dataset's storage and whether its bytes are the read's (then its chunks can be decoded
// directly), both decided once at open.
struct Stored {
  Storage kind;
  bool as_read;
};

// Sizes a tensor's buffer before a read fills it: no zero-fill (Buffer), so the pages of a fresh
// block are first touched by whatever writes them, the decoding threads included (a block from
// Buffer's pool is already mapped). A large buffer is asked for in 2 MiB pages (madvise; a no-op
// where transparent huge pages are off): 512 times fewer page faults.
template <class T>
void resize_for_read(Buffer<T>& v, size_t n) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (v.empty() && n * sizeof(T) >= 4 * kHuge) {
    v.reserve(n);
    const uintptr_t a = reinterpret_cast<uintptr_t>(v.data()), e = a + n * sizeof(T);
    const uintptr_t b = (a + kHuge - 1) & ~(kHuge - 1), f = e & ~(kHuge - 1);
    if (f > b) ::madvise(reinterpret_cast<void*>(b), f - b, MADV_HUGEPAGE);
  }
  v.resize(n);
}

// A whole dataset read by decoding its chunks on the OpenMP threads (chunk_decode.hpp): HDF5 gives
// the layout and where each chunk lies. False when the dataset is not one decode_chunks handles
// (not chunked, a filter other than shuffle, deflate and Fletcher-32, a user block, a driver other
// than the default, a chunk never written or lying outside the file) or when a chunk fails to
// decode; the caller then reads with H5Dread. FP8SIM_HDF5_DIRECT=0 turns it off.
bool read_chunks_direct(hid_t ds, const std::string& path, uint64_t file_bytes, size_t elem_bytes, void* out) {
  if (const char* e = std::getenv("FP8SIM_HDF5_DIRECT"); e && std::string(e) == "0") return false;
  struct Id {  // closes an HDF5 identifier (negative: none)
    hid_t id;
    herr_t (*close)(hid_t);
    ~Id() {
      if (id >= 0) close(id);
    }
  };
  const Id dcpl{H5Dget_create_plist(ds), H5Pclose};
  if (dcpl.id < 0 || H5Pget_layout(dcpl.id) != H5D_CHUNKED) return false;
  const Id space{H5Dget_space(ds), H5Sclose};
  const int rank = space.id < 0 ? -1 : H5Sget_simple_extent_ndims(space.id);
  if (rank < 1 || rank > 32) return false;
  std::vector<hsize_t> dims(rank), cdims(rank);
  if (H5Sget_simple_extent_dims(space.id, dims.data(), nullptr) != rank ||
      H5Pget_chunk(dcpl.id, rank, cdims.data()) != rank)
    return false;
  ChunkLayout layout;
  layout.elem_bytes = elem_bytes;
  uint64_t chunk_bytes = elem_bytes;
  for (int k = 0; k < rank; ++k) {
    if (cdims[k] == 0 || dims[k] == 0) return false;
    layout.dims.push_back(dims[k]);
    layout.chunk.push_back(cdims[k]);
    chunk_bytes *= cdims[k];
  }
  const int nf = H5Pget_nfilters(dcpl.id);
  if (nf < 0 || nf > 32) return false;
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.id, static_cast<unsigned>(i), &flags, &ncd, cd, 0, nullptr, nullptr);
    if (id == H5Z_FILTER_SHUFFLE) layout.filters.push_back(ChunkFilter::Shuffle);
    else if (id == H5Z_FILTER_DEFLATE) layout.filters.push_back(ChunkFilter::Deflate);
    else if (id == H5Z_FILTER_FLETCHER32) layout.filters.push_back(ChunkFilter::Fletcher32);
    else return false;
  }
  // Chunk addresses are relative to the file's base address, which a user block moves; and only
  // the default driver keeps the file's bytes in one file at those addresses.
  const Id file{H5Iget_file_id(ds), H5Fclose};
  const Id fcpl{file.id < 0 ? -1 : H5Fget_create_plist(file.id), H5Pclose};
  const Id fapl{file.id < 0 ? -1 : H5Fget_access_plist(file.id), H5Pclose};
  hsize_t user_block = 0;
  if (fcpl.id < 0 || fapl.id < 0 || H5Pget_userblock(fcpl.id, &user_block) < 0 || user_block != 0 ||
      H5Pget_driver(fapl.id) != H5FD_SEC2)
    return false;
  // Every chunk of the grid, row-major.
  std::vector<hsize_t> grid(rank), at(rank, 0);
  size_t n_chunks = 1;
  for (int k = 0; k < rank; ++k) {
    grid[k] = (dims[k] + cdims[k] - 1) / cdims[k];
    n_chunks *= grid[k];
  }
  std::vector<StoredChunk> chunks(n_chunks);
  std::vector<hsize_t> offset(rank);
  for (StoredChunk& ch : chunks) {
    for (int k = 0; k < rank; ++k) offset[k] = at[k] * cdims[k];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    // Deflate can grow incompressible data by a little; more than an eighth is a damaged index.
    if (H5Dget_chunk_info_by_coord(ds, offset.data(), &mask, &addr, &size) < 0 || addr == HADDR_UNDEF || size == 0 ||
        size > chunk_bytes + chunk_bytes / 8 + 1024 || addr > file_bytes || size > file_bytes - addr)
      return false;
    ch.offset.assign(offset.begin(), offset.end());
    ch.skipped = mask;
    ch.addr = addr;
    ch.size = size;
    for (int k = rank - 1; k >= 0; --k) {
      if (++at[k] < grid[k]) break;
      at[k] = 0;
    }
  }
  return decode_chunks(path, layout, chunks, out);
}

struct FloatLayout {
  size_t size, spos, epos, esize, mpos, msize, ebias;
};

FloatLayout float_layout(const H5::FloatType& ft) {
  FloatLayout l{};
  l.size = ft.getSize();
  ft.getFields(l.spos, l.epos, l.esize, l.mpos, l.msize);
  l.ebias = ft.getEbias();
  return l;
}

bool same_layout(const FloatLayout& a, const FloatLayout& b) {
  return a.size == b.size && a.spos == b.spos && a.epos == b.epos && a.esize == b.esize && a.mpos == b.mpos &&
         a.msize == b.msize && a.ebias == b.ebias;
}

constexpr FloatLayout kIeeeF32{4, 31, 23, 8, 0, 23, 127};
constexpr FloatLayout kIeeeF16{2, 15, 10, 5, 0, 10, 15};
constexpr FloatLayout kBf16{2, 15, 7, 8, 0, 7, 127};

std::string describe_type(const H5::DataType& t) {
  const H5T_class_t c = t.getClass();
  const size_t sz = t.getSize();
  switch (c) {
    case H5T_INTEGER: {
      H5::IntType it(t.getId());
      return fmt::format("{}int{}", it.getSign() == H5T_SGN_NONE ? "u" : "", sz * 8);
    }
    case H5T_FLOAT:
      return fmt::format("float{}", sz * 8);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_VLEN:
      return "vlen";
    case H5T_REFERENCE:
      return "reference";
    case H5T_BITFIELD:
      return "bitfield";
    default:
      return fmt::format("type class {}", static_cast<int>(c));
  }
}

// Decides the stored dtype of a dataset from its HDF5 type and its `dtype` attribute, refusing
// anything that could not be read without a value conversion.
std::pair<DType, Storage> classify(const H5::DataSet& ds, const std::optional<std::string>& dtype_attr,
                                   const std::string& where) {
  std::optional<DType> declared;
  if (dtype_attr) {
    declared = parse_dtype(*dtype_attr);
    FP8SIM_REQUIRE(declared.has_value(), "{}: dtype attribute '{}' is not a trace dtype (float32, bfloat16, float16)",
                   where, *dtype_attr);
  }
  H5::DataType t = ds.getDataType();
  const H5T_class_t c = t.getClass();
  const std::string what = describe_type(t);
  if (c == H5T_FLOAT) {
    H5::FloatType ft = ds.getFloatType();
    const FloatLayout l = float_layout(ft);
    if (same_layout(l, kIeeeF32)) {
      FP8SIM_REQUIRE(!declared || *declared == DType::F32, "{}: stored as float32 but its dtype attribute says {}",
                     where, dtype_name(*declared));
      return {DType::F32, Storage::F32};
    }
    if (same_layout(l, kIeeeF16)) {
      FP8SIM_REQUIRE(!declared || *declared == DType::F16, "{}: stored as float16 but its dtype attribute says {}",
                     where, dtype_name(*declared));
      return {DType::F16, Storage::Float16Bits};
    }
    if (same_layout(l, kBf16)) {
      FP8SIM_REQUIRE(!declared || *declared == DType::BF16, "{}: stored as bfloat16 but its dtype attribute says {}",
                     where, dtype_name(*declared));
      return {DType::BF16, Storage::Float16Bits};
    }
    throw Error(
        fmt::format("{}: unsupported dtype {} (trace dtypes: float32, bfloat16 as uint16, float16)", where, what));
  }
  if (c == H5T_INTEGER && t.getSize() == 2) {
    FP8SIM_REQUIRE(declared.has_value() && *declared != DType::F32,
                   "{}: 16-bit integer dataset without a dtype attribute of bfloat16 or float16", where);
    H5::IntType it = ds.getIntType();
    return {*declared, it.getSign() == H5T_SGN_NONE ? Storage::U16 : Storage::I16};
  }
  throw Error(
      fmt::format("{}: unsupported dtype {} (trace dtypes: float32, bfloat16 as uint16, float16)", where, what));
}

}  // namespace

// ---- reader ---------------------------------------------------------------------------------------

struct TraceReader::Impl {
  std::unique_ptr<TensorFiles> files;  // a safetensors file or a folder of .npy files, instead of HDF5
  fs::path path;
  uint64_t file_bytes = 0;
  H5::H5File file;
  TraceHeader header;
  std::vector<StepInfo> steps;
  std::vector<TensorInfo> tensors;
  std::vector<Stored> storage;  // parallel to tensors
  std::vector<std::string> ignored;

  void precheck();  // cheap checks that need no HDF5 parsing (exists, regular, non-empty, signature)
  void open();
  void validate_in_child();
  void read_header();
  void scan_steps();
  void scan_role_group(const H5::Group& g, const std::string& gpath, Role role, StepInfo& step);
};

namespace {
// Kind of the child `name` of `g`: only hard links count; soft and external links are not followed
// (an external link could point anywhere on disk).
enum class Child { Group, Dataset, Other };
Child child_kind(const H5::Group& g, const std::string& name) {
  H5L_info_t li;
  if (H5Lget_info(g.getId(), name.c_str(), &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return Child::Other;
  const H5O_type_t t = g.childObjType(name);
  if (t == H5O_TYPE_GROUP) return Child::Group;
  if (t == H5O_TYPE_DATASET) return Child::Dataset;
  return Child::Other;
}

// The names of a group's links in name order, from one pass over the group: linear in the number
// of links (looking each name up by index costs a pass per name in HDF5's dense link storage,
// which made opening a trace with thousands of steps quadratic).
std::vector<std::string> child_names(const H5::Group& g) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* op) -> herr_t {
    static_cast<std::vector<std::string>*>(op)->emplace_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Literate(g.getId(), H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect, &names) < 0)
    throw H5::GroupIException("child_names", "cannot list the group's links");
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

void TraceReader::Impl::precheck() {
  hdf5_init();
  const std::string p = path.string();
  std::error_code ec;
  const auto st = fs::status(path, ec);
  FP8SIM_REQUIRE(!ec && fs::exists(st), "cannot open trace '{}': no such file", p);
  FP8SIM_REQUIRE(fs::is_regular_file(st), "cannot open trace '{}': not a regular file", p);
  FP8SIM_REQUIRE(::access(path.c_str(), R_OK) == 0, "cannot open trace '{}': {}", p, std::strerror(errno));
  file_bytes = fs::file_size(path, ec);
  FP8SIM_REQUIRE(!ec, "cannot open trace '{}': {}", p, ec.message());
  FP8SIM_REQUIRE(file_bytes > 0, "'{}' is not an fp8sim trace: the file is empty", p);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(fmt::format("'{}' is not an fp8sim trace: not an HDF5 file (no HDF5 signature)", p));
  }
}

void TraceReader::Impl::open() {
  precheck();
  note_input_read(path);
  const std::string p = path.string();
  try {
    file.openFile(p, H5F_ACC_RDONLY);
  } catch (const H5::Exception& e) {
    throw Error(fmt::format("cannot open '{}' as HDF5 (truncated or corrupt?): {}", p, hdf5_detail(&e)));
  }
  try {
    read_header();
    scan_steps();
  } catch (const H5::Exception& e) {
    throw Error(fmt::format("'{}': corrupt trace metadata: {}", p, hdf5_detail(&e)));
  }
}

void TraceReader::Impl::read_header() {
  const std::string p = path.string();
  H5::Group root = file.openGroup("/");
  Attrs a(root, fmt::format("'{}'", p));
  auto fmt_name = a.str("format");
  FP8SIM_REQUIRE(fmt_name.has_value(), "'{}' is an HDF5 file but not an fp8sim trace: missing root attribute 'format'",
                 p);
  FP8SIM_REQUIRE(*fmt_name == kFormatName, "'{}' is not an fp8sim trace: root attribute format is '{}', expected '{}'",
                 p, *fmt_name, kFormatName);
  auto ver = a.integer("format_version");
  FP8SIM_REQUIRE(ver.has_value(), "'{}' is not a valid fp8sim trace: missing root attribute 'format_version'", p);
  FP8SIM_REQUIRE(*ver >= 1, "'{}': invalid format_version {}", p, *ver);
  FP8SIM_REQUIRE(*ver <= kFormatVersion, "'{}': trace format version {} is newer than this reader (version {})", p,
                 *ver, kFormatVersion);
  header.version = static_cast<int>(*ver);
  header.producer = a.str("producer").value_or("");
  header.created = a.str("created").value_or("");
  header.command = a.str("command").value_or("");
  header.model_kind = a.str("model_kind").value_or("");
  header.model_config = a.json("model_config").value_or(Json());
  header.training = a.json("training").value_or(Json());
  header.optimizer.name = a.str("optimizer").value_or("");
  header.optimizer.lr = a.num("lr");
  header.optimizer.beta1 = a.num("beta1");
  header.optimizer.beta2 = a.num("beta2");
  header.optimizer.eps = a.num("eps");
  header.optimizer.weight_decay = a.num("weight_decay");
  header.optimizer.options = a.json("optimizer_options").value_or(Json());
  if (auto w = a.int_array("grad_window")) {
    FP8SIM_REQUIRE(w->size() == 2 && (*w)[0] <= (*w)[1], "'{}': root attribute grad_window must be [first, last]", p);
    header.grad_window = std::make_pair((*w)[0], (*w)[1]);
  }
}

void TraceReader::Impl::scan_steps() {
  const std::string p = path.string();
  FP8SIM_REQUIRE(file.nameExists("steps") && child_kind(file.openGroup("/"), "steps") == Child::Group,
                 "'{}' is not a valid fp8sim trace: missing group /steps", p);
  H5::Group sg = file.openGroup("steps");
  for (const std::string& name : child_names(sg)) {
    const std::string gpath = "/steps/" + name;
    if (child_kind(sg, name) != Child::Group || !step_from_name(name)) {
      ignored.push_back(gpath);
      continue;
    }
    H5::Group g = sg.openGroup(name);
    Attrs a(g, fmt::format("'{}' {}", p, gpath));
    StepInfo s;
    s.group = gpath;
    auto step = a.integer("step");
    FP8SIM_REQUIRE(step.has_value(), "'{}': step group {} lacks the 'step' attribute", p, gpath);
    FP8SIM_REQUIRE(*step == *step_from_name(name), "'{}': step group {} has step attribute {}", p, gpath, *step);
    s.step = *step;
    s.lr = a.num("lr");
    s.loss = a.num("loss");
    s.adamw_step = a.integer("adamw_step");
    s.contents = a.str("contents").value_or("");
    for (const std::string& child : child_names(g)) {
      auto role = parse_role(child);
      if (!role || child_kind(g, child) != Child::Group) {
        ignored.push_back(gpath + "/" + child);
        continue;
      }
      scan_role_group(g.openGroup(child), gpath + "/" + child, *role, s);
    }
    steps.push_back(std::move(s));
  }
  std::sort(steps.begin(), steps.end(), [](const StepInfo& x, const StepInfo& y) { return x.step < y.step; });
  for (size_t i = 1; i < steps.size(); ++i)
    FP8SIM_REQUIRE(steps[i].step != steps[i - 1].step, "'{}': two groups hold step {}", p, steps[i].step);
  // Order tensors by step, role, name and rebuild the per-step index lists.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const TensorInfo &a = tensors[x], &b = tensors[y];
    if (a.step != b.step) return a.step < b.step;
    if (a.role != b.role) return a.role < b.role;
    return a.name < b.name;
  });
  std::vector<TensorInfo> t2;
  std::vector<Stored> s2;
  t2.reserve(order.size());
  for (size_t i : order) {
    t2.push_back(std::move(tensors[i]));
    s2.push_back(storage[i]);
  }
  tensors = std::move(t2);
  storage = std::move(s2);
  for (auto& s : steps) s.tensors.clear();
  size_t si = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    while (steps[si].step != tensors[i].step) ++si;
    steps[si].tensors.push_back(i);
  }
}

void TraceReader::Impl::scan_role_group(const H5::Group& g, const std::string& gpath, Role role, StepInfo& step) {
  const std::string p = path.string();
  for (const std::string& name : child_names(g)) {
    const std::string dpath = gpath + "/" + name;
    if (child_kind(g, name) != Child::Dataset) {
      ignored.push_back(dpath);
      continue;
    }
    const std::string where = fmt::format("'{}' dataset {}", p, dpath);
    H5::DataSet ds = g.openDataSet(name);
    Attrs a(ds, where);
    TensorInfo t;
    t.path = dpath;
    t.name = name;
    t.step = step.step;
    t.role = role;
    auto r = a.str("role");
    FP8SIM_REQUIRE(r.has_value(), "{}: missing attribute 'role'", where);
    FP8SIM_REQUIRE(*r == role_name(role), "{}: role attribute '{}' does not match its group '{}'", where, *r,
                   role_name(role));
    if (auto s = a.integer("step"))
      FP8SIM_REQUIRE(*s == step.step, "{}: step attribute {} in step group {}", where, *s, step.step);
    t.op = a.str("op").value_or("");
    t.module = a.str("module").value_or("");
    t.param = a.str("param").value_or(is_param_role(role) ? name : "");
    t.modules = split_list(a.str("modules").value_or(""));
    t.aliases = split_list(a.str("aliases").value_or(""));
    if (auto l = a.integer("layer")) {
      FP8SIM_REQUIRE(*l >= -1 && *l < 1000000, "{}: layer attribute {} out of range", where, *l);
      t.layer = static_cast<int>(*l);
    }
    const auto [dtype, stor] = classify(ds, a.str("dtype"), where);
    t.dtype = dtype;

    H5::DataSpace space = ds.getSpace();
    FP8SIM_REQUIRE(space.isSimple(), "{}: not a simple (array) dataspace", where);
    const int rank = space.getSimpleExtentNdims();
    FP8SIM_REQUIRE(rank >= 1 && rank <= 8, "{}: rank {} (tensors have 1 to 8 dimensions)", where, rank);
    hsize_t dims[8];
    space.getSimpleExtentDims(dims);
    uint64_t numel = 1;
    for (int i = 0; i < rank; ++i) t.shape.push_back(static_cast<int64_t>(dims[i]));
    for (int i = 0; i < rank; ++i) {
      FP8SIM_REQUIRE(dims[i] > 0, "{}: zero-size shape {}", where, t.shape_str());
      FP8SIM_REQUIRE(dims[i] <= (uint64_t{1} << 40) / numel, "{}: shape too large", where);
      numel *= dims[i];
    }
    t.stored_bytes = ds.getStorageSize();
    // A dataset whose chunks were never written reads back as fill values; one that claims
    // far more data than deflate can expand from its stored bytes is corrupt. Both are refused
    // here instead of being read as zeros or allocating absurd buffers.
    FP8SIM_REQUIRE(t.stored_bytes > 0, "{}: no data stored (capture interrupted?)", where);
    FP8SIM_REQUIRE(t.stored_bytes <= file_bytes, "{}: stores {} bytes in a {}-byte file", where, t.stored_bytes,
                   file_bytes);
    FP8SIM_REQUIRE(t.bytes() <= 2048 * t.stored_bytes + 65536,
                   "{}: declares {} bytes but stores only {} (corrupt or incomplete)", where, t.bytes(),
                   t.stored_bytes);
    H5::DSetCreatPropList cp = ds.getCreatePlist();
    const int nf = cp.getNfilters();
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0;
      size_t nelem = 0;
      unsigned cd[8];
      char fname[64] = {0};
      unsigned fconfig = 0;
      const H5Z_filter_t id = cp.getFilter(i, flags, nelem, cd, sizeof(fname), fname, fconfig);
      FP8SIM_REQUIRE(H5Zfilter_avail(id) > 0, "{}: uses HDF5 filter {} ('{}'), which this build cannot decode", where,
                     static_cast<int>(id), fname);
    }
    tensors.push_back(std::move(t));
    storage.push_back({stor, stored_as_read(ds.getId(), stor)});
  }
}

// HDF5 1.10 trusts some on-disk structures without checksums (the global heap that holds
// variable-length strings, v1 B-trees in files from older writers) and can crash or loop on a
// corrupted file. So the file is first opened, scanned and (up to kProbeBytes of tensors) read in
// a forked child: if the child dies or hangs, the parent reports the file as corrupt instead of
// crashing; if the child succeeds (or fails with an ordinary Error), the parent opens the file
// itself, walking exactly the structures the child already walked. FP8SIM_TRACE_PROBE=0 turns
// the probe off (debuggers); FP8SIM_TRACE_PROBE_TIMEOUT sets the child's time limit in seconds.
namespace {
constexpr uint64_t kProbeBytes = uint64_t{64} << 20;
// The child's exit status when reading failed with an ordinary exception (the parent then opens
// the file itself to report that error). Any other non-zero status is a crash that did not end in
// a signal: a sanitizer's report exits with status 1, and glibc's abort() paths may be caught.
constexpr int kProbeCaughtError = 3;

double probe_timeout_seconds() {
  const char* t = std::getenv("FP8SIM_TRACE_PROBE_TIMEOUT");
  const double v = t ? std::atof(t) : 0.0;
  return v > 0 ? v : 120.0;
}
}  // namespace

void TraceReader::Impl::validate_in_child() {
  if (const char* e = std::getenv("FP8SIM_TRACE_PROBE"); e && std::string(e) == "0") return;
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return;  // cannot fork: read unguarded
  if (pid == 0) {
    // The probe dies with its parent, however the parent ends (also by SIGKILL): it never reads
    // on alone. If the parent is already gone, there is nobody to report to.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kProbeCaughtError);
    const struct rlimit no_core = {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    // A crash inside HDF5 makes glibc print "free(): invalid pointer" and the like: the parent
    // reports the corrupt file in one line, so the child's stderr goes nowhere.
    if (const char* e = std::getenv("FP8SIM_TRACE_PROBE_STDERR"); !e || std::string(e) != "1") {
      const int devnull = ::open("/dev/null", O_WRONLY);
      if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);
    }
    int rc = 0;
    try {
      open();
      uint64_t budget = kProbeBytes;
      for (const auto& t : tensors) {
        if (t.bytes() > budget) break;
        budget -= t.bytes();
        try {
          H5::DataSet ds = file.openDataSet(t.path);
          std::vector<uint8_t> buf(t.bytes());
          // The raw stored bytes: the same chunk index, filters and checksums as read().
          const hid_t ft = H5Dget_type(ds.getId());
          if (ft >= 0) {
            H5Dread(ds.getId(), ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
            H5Tclose(ft);
          }
        } catch (...) {
        }
      }
    } catch (...) {
      rc = kProbeCaughtError;
    }
    // The parent's reader closes the file in any case (also when open() threw), and HDF5 can crash
    // there on a corrupt file (freeing its metadata cache): the probe closes it too, so that such a
    // crash happens here.
    try {
      file.close();
    } catch (...) {
    }
    ::_exit(rc);
  }
  // Registered, so an interrupted fp8sim kills the probe before it removes its temporaries.
  struct ChildSlot {
    int slot;
    ~ChildSlot() { cleanup::forget_child(slot); }
  } child_slot{cleanup::remember_child(pid)};
  const auto start = std::chrono::steady_clock::now();
  const double limit = probe_timeout_seconds();
  auto nap = std::chrono::microseconds(200);
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return;  // lost the child: read unguarded
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      throw Error(
          fmt::format("cannot open '{}' as HDF5: reading its metadata did not finish within {:g} s "
                      "(corrupt file?)",
                      path.string(), limit));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(20000));
  }
  if (WIFSIGNALED(status))
    throw Error(fmt::format("cannot open '{}' as HDF5: the file is corrupt (the HDF5 library crashed reading it: {})",
                            path.string(), strsignal(WTERMSIG(status))));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != kProbeCaughtError)
    throw Error(
        fmt::format("cannot open '{}' as HDF5: the file is corrupt (the HDF5 library failed reading it, "
                    "exit status {})",
                    path.string(), WEXITSTATUS(status)));
}

TraceReader::TraceReader(const fs::path& path) {
  if (is_tensor_files(path)) {
    *this = TraceReader(open_tensor_files(path), path);
    return;
  }
  impl_ = std::make_unique<Impl>();
  impl_->path = path;
  impl_->precheck();
  impl_->validate_in_child();
  impl_->open();
}

TraceReader::TraceReader(std::unique_ptr<TensorFiles> files, const fs::path& label) : impl_(std::make_unique<Impl>()) {
  FP8SIM_CHECK(files != nullptr, "TraceReader of no tensors");
  auto& im = *impl_;
  im.path = label;
  im.files = std::move(files);
  im.header = im.files->header;
  im.steps = im.files->steps;
  im.tensors = im.files->tensors;
  im.ignored = im.files->ignored;
  im.file_bytes = im.files->bytes;
}
TraceReader::~TraceReader() {
  if (impl_ && !impl_->files) {
    try {
      impl_->file.close();
    } catch (const H5::Exception&) {
      H5Eclear2(H5E_DEFAULT);
    }
  }
}
TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;

const fs::path& TraceReader::path() const { return impl_->path; }
uint64_t TraceReader::file_bytes() const { return impl_->file_bytes; }
const TraceHeader& TraceReader::header() const { return impl_->header; }
const std::vector<StepInfo>& TraceReader::steps() const { return impl_->steps; }
const std::vector<TensorInfo>& TraceReader::tensors() const { return impl_->tensors; }
const std::vector<std::string>& TraceReader::ignored() const { return impl_->ignored; }

std::vector<const TensorInfo*> TraceReader::select(const Filter& f) const {
  std::vector<const TensorInfo*> out;
  for (const auto& t : impl_->tensors)
    if (f.matches(t)) out.push_back(&t);
  return out;
}

// Both lists are sorted (steps by step; tensors by step, role, name): binary searches.
const StepInfo* TraceReader::find_step(int64_t step) const {
  const auto& v = impl_->steps;
  const auto it = std::lower_bound(v.begin(), v.end(), step, [](const StepInfo& s, int64_t k) { return s.step < k; });
  return it != v.end() && it->step == step ? &*it : nullptr;
}

const TensorInfo* TraceReader::find(int64_t step, Role role, std::string_view name) const {
  const auto& v = impl_->tensors;
  auto key = [](const TensorInfo& t) { return std::tuple<int64_t, Role, std::string_view>(t.step, t.role, t.name); };
  const auto want = std::tuple<int64_t, Role, std::string_view>(step, role, name);
  const auto it =
      std::lower_bound(v.begin(), v.end(), want, [&](const TensorInfo& t, const auto& k) { return key(t) < k; });
  return it != v.end() && key(*it) == want ? &*it : nullptr;
}

size_t slab_dim(const std::vector<int64_t>& shape) {
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) return i;
  return 0;
}

TensorData TraceReader::read(const TensorInfo& t) const {
  return read_rows(t, 0, t.shape.empty() ? 1 : t.shape[slab_dim(t.shape)]);
}

TensorData TraceReader::read_rows(const TensorInfo& t, int64_t row0, int64_t rows) const {
  const auto& ts = impl_->tensors;
  FP8SIM_CHECK(&t >= ts.data() && &t < ts.data() + ts.size(), "TensorInfo {} does not belong to this reader", t.path);
  const size_t dim = slab_dim(t.shape);
  const int64_t all_rows = t.shape.empty() ? 1 : t.shape[dim];
  FP8SIM_REQUIRE(row0 >= 0 && rows >= 0 && row0 + rows <= all_rows, "rows [{}, {}) are outside {} ({} rows)", row0,
                 row0 + rows, t.path, all_rows);
  const bool whole = row0 == 0 && rows == all_rows;
  const int64_t row_elems = all_rows ? t.numel() / all_rows : 0;
  if (impl_->files) {
    TensorData d = impl_->files->read(static_cast<size_t>(&t - ts.data()));
    if (whole) return d;
    const auto b = static_cast<size_t>(row0 * row_elems), e = static_cast<size_t>((row0 + rows) * row_elems);
    if (d.dtype == DType::F32) d.f32 = Buffer<float>(d.f32.begin() + b, d.f32.begin() + e);
    else d.bits = Buffer<uint16_t>(d.bits.begin() + b, d.bits.begin() + e);
    d.shape[dim] = rows;
    return d;
  }
  hdf5_init();  // this thread may not have read before (analyze reads ahead on another thread)
  const Stored stored = impl_->storage[static_cast<size_t>(&t - ts.data())];
  const Storage stor = stored.kind;
  TensorData d;
  d.dtype = t.dtype;
  d.shape = t.shape;
  if (!d.shape.empty()) d.shape[dim] = rows;
  const size_t n = static_cast<size_t>(rows * row_elems);
  try {
    H5::DataSet ds = impl_->file.openDataSet(t.path);
    // The file's selection: all of it, or the rows as a hyperslab; the memory side is n values.
    H5::DataSpace fspace = ds.getSpace(), mspace;
    hid_t fsel = H5S_ALL, msel = H5S_ALL;
    if (!whole) {
      std::vector<hsize_t> start(t.shape.size(), 0), count(t.shape.begin(), t.shape.end());
      start[dim] = static_cast<hsize_t>(row0);
      count[dim] = static_cast<hsize_t>(rows);
      fspace.selectHyperslab(H5S_SELECT_SET, count.data(), start.data());
      const hsize_t mn = n;
      mspace = H5::DataSpace(1, &mn);
      fsel = fspace.getId();
      msel = mspace.getId();
    }
    auto read_into = [&](void* buf, hid_t mem_type) {
      if (H5Dread(ds.getId(), mem_type, msel, fsel, H5P_DEFAULT, buf) < 0)
        throw Error(fmt::format("cannot read {} from '{}': {}", t.path, impl_->path.string(), hdf5_detail()));
    };
    // A whole tensor stored as it is read (the same bytes) is decoded chunk by chunk on the
    // OpenMP threads (read_chunks_direct); anything else, or a chunk that fails, goes to H5Dread.
    if (whole && n > 0 && stored.as_read) {
      void* buf = nullptr;
      if (stor == Storage::F32) {
        resize_for_read(d.f32, n);
        buf = d.f32.data();
      } else {
        resize_for_read(d.bits, n);
        buf = d.bits.data();
      }
      if (read_chunks_direct(ds.getId(), impl_->path.string(), impl_->file_bytes, stor == Storage::F32 ? 4 : 2, buf))
        return d;
    }
    switch (stor) {
      case Storage::F32:
        resize_for_read(d.f32, n);
        read_into(d.f32.data(), H5T_NATIVE_FLOAT);
        break;
      case Storage::U16:
        resize_for_read(d.bits, n);
        read_into(d.bits.data(), H5T_NATIVE_UINT16);
        break;
      case Storage::I16: {
        // Same 16 bits, read as signed so HDF5 does not clip negatives, then reinterpreted.
        std::vector<int16_t> tmp(n);
        read_into(tmp.data(), H5T_NATIVE_INT16);
        resize_for_read(d.bits, n);
        std::memcpy(d.bits.data(), tmp.data(), n * 2);
        break;
      }
      case Storage::Float16Bits: {
        // A copy of the file's own 16-bit float type in little-endian order: HDF5 at most swaps
        // bytes, so the patterns arrive unchanged (no float conversion).
        H5::DataType ft = ds.getDataType();
        const hid_t mt = H5Tcopy(ft.getId());
        herr_t rc = mt < 0 ? -1 : H5Tset_order(mt, H5T_ORDER_LE);
        resize_for_read(d.bits, n);
        if (rc >= 0) rc = H5Dread(ds.getId(), mt, msel, fsel, H5P_DEFAULT, d.bits.data());
        if (mt >= 0) H5Tclose(mt);
        if (rc < 0)
          throw Error(fmt::format("cannot read {} from '{}': {}", t.path, impl_->path.string(), hdf5_detail()));
        break;
      }
    }
  } catch (const H5::Exception& e) {
    throw Error(fmt::format("cannot read {} from '{}': {}", t.path, impl_->path.string(), hdf5_detail(&e)));
  }
  return d;
}

Buffer<float> TraceReader::read_f32(const TensorInfo& t) const {
  TensorData d = read(t);
  if (d.dtype == DType::F32) return std::move(d.f32);
  return d.widened();
}

void TraceReader::for_each(const Filter& f, const std::function<void(const TensorInfo&, const TensorData&)>& fn) const {
  for (const auto& t : impl_->tensors) {
    if (!f.matches(t)) continue;
    const TensorData d = read(t);
    fn(t, d);
  }
}

// ---- writer ---------------------------------------------------------------------------------------

struct TraceWriter::Impl {
  fs::path target, tmp;
  int tmp_slot = -1;  // the temporary's entry in the signal-cleanup registry
  WriterOptions opts;
  H5::H5File file;
  bool open = false;
  bool committed = false;
  // An HDF5 call failed (a full disk, a file-size limit). Closing such a file crashes inside HDF5
  // 1.10 (H5F__close, also from the library's own teardown at exit), so it is never closed: the
  // writer removes its temporary and hdf5_teardown_unsafe() tells main to end without HDF5's
  // teardown.
  bool failed = false;
  // After a failed HDF5 call: marks the writer failed and throws Error("<what> to '<target>': why").
  [[noreturn]] void fail(const H5::Exception& e, const std::string& what);
  // Every writing call first: a writer that failed writes nothing more.
  void require_usable() const { FP8SIM_REQUIRE(!failed, "trace writer: writing '{}' failed earlier", target.string()); }

  H5::Group step_group(int64_t step);
  void attr_str(H5::H5Object& obj, const std::string& key, const std::string& v);
  void attr_i64(H5::H5Object& obj, const std::string& key, int64_t v);
  void attr_f64(H5::H5Object& obj, const std::string& key, double v);
};

void TraceWriter::Impl::attr_str(H5::H5Object& obj, const std::string& key, const std::string& v) {
  H5::StrType st(H5::PredType::C_S1, H5T_VARIABLE);
  st.setCset(H5T_CSET_UTF8);
  if (obj.attrExists(key)) obj.removeAttr(key);
  H5::Attribute a = obj.createAttribute(key, st, H5::DataSpace(H5S_SCALAR));
  a.write(st, v);
}

void TraceWriter::Impl::attr_i64(H5::H5Object& obj, const std::string& key, int64_t v) {
  if (obj.attrExists(key)) obj.removeAttr(key);
  H5::Attribute a = obj.createAttribute(key, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_INT64, &v);
}

void TraceWriter::Impl::attr_f64(H5::H5Object& obj, const std::string& key, double v) {
  if (obj.attrExists(key)) obj.removeAttr(key);
  H5::Attribute a = obj.createAttribute(key, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_DOUBLE, &v);
}

void TraceWriter::Impl::fail(const H5::Exception& e, const std::string& what) {
  const std::string detail = write_failure_detail(&e);  // before any other HDF5 call clears it
  failed = true;
  throw Error(fmt::format("{} to '{}': {}", what, target.string(), detail));
}

H5::Group TraceWriter::Impl::step_group(int64_t step) {
  FP8SIM_REQUIRE(step >= 0, "trace writer: negative step {}", step);
  const std::string name = fmt::format("/steps/step_{:06d}", step);
  if (file.nameExists(name)) return file.openGroup(name);
  H5::Group g = file.createGroup(name);
  attr_i64(g, "step", step);
  return g;
}

namespace {
// The same chunking rule as scripts/capture_trace.py: whole trailing rows, at most chunk_bytes.
std::vector<hsize_t> chunk_dims(const std::vector<int64_t>& shape, size_t itemsize, uint64_t chunk_bytes) {
  std::vector<hsize_t> c(shape.size());
  for (size_t ax = 0; ax < shape.size(); ++ax) {
    uint64_t row = itemsize;
    for (size_t j = ax + 1; j < shape.size(); ++j) row *= static_cast<uint64_t>(shape[j]);
    if (row <= chunk_bytes) {
      c[ax] = static_cast<hsize_t>(std::max<uint64_t>(1, std::min<uint64_t>(shape[ax], chunk_bytes / row)));
      for (size_t j = ax + 1; j < shape.size(); ++j) c[j] = static_cast<hsize_t>(shape[j]);
      return c;
    }
    c[ax] = 1;
  }
  return c;
}

H5::FloatType ieee_f16_le() {
  // IEEE binary16, built the way h5py builds its float16 type, so h5py reads it as numpy float16.
  H5::FloatType t(H5::PredType::IEEE_F32LE);
  t.setFields(15, 10, 5, 0, 10);
  t.setSize(2);
  t.setEbias(15);
  return t;
}
}  // namespace

TraceWriter::TraceWriter(const fs::path& path, const TraceHeader& h, const WriterOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  hdf5_init();
  refuse_overwriting_input(fmt::format("'{}'", path.string()), path);  // the model file, say
  impl_->target = path;
  impl_->opts = opts;
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  cleanup::remove_stale_temporaries(parent, path.filename().string());
  impl_->tmp = parent / cleanup::temporary_name(path);
  impl_->tmp_slot = cleanup::remember_path(impl_->tmp, cleanup::PathKind::File);
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  try {
    H5::FileAccPropList fapl;
    // v110 metadata carries checksums, so corruption is detected; HDF5 >= 1.10 and h5py read it.
    fapl.setLibverBounds(H5F_LIBVER_V110, H5F_LIBVER_V110);
    impl_->file = H5::H5File(impl_->tmp.string(), H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, fapl);
    impl_->open = true;
    H5::Group root = impl_->file.openGroup("/");
    impl_->attr_str(root, "format", kFormatName);
    impl_->attr_i64(root, "format_version", kFormatVersion);
    if (!h.producer.empty()) impl_->attr_str(root, "producer", h.producer);
    if (!h.created.empty()) impl_->attr_str(root, "created", h.created);
    if (!h.command.empty()) impl_->attr_str(root, "command", h.command);
    if (!h.model_kind.empty()) impl_->attr_str(root, "model_kind", h.model_kind);
    if (!h.model_config.is_null()) impl_->attr_str(root, "model_config", h.model_config.dump(-1));
    if (!h.training.is_null()) impl_->attr_str(root, "training", h.training.dump(-1));
    const OptimizerInfo& o = h.optimizer;
    if (!o.name.empty()) impl_->attr_str(root, "optimizer", o.name);
    if (o.lr) impl_->attr_f64(root, "lr", *o.lr);
    if (o.beta1) impl_->attr_f64(root, "beta1", *o.beta1);
    if (o.beta2) impl_->attr_f64(root, "beta2", *o.beta2);
    if (o.eps) impl_->attr_f64(root, "eps", *o.eps);
    if (o.weight_decay) impl_->attr_f64(root, "weight_decay", *o.weight_decay);
    if (!o.options.is_null()) impl_->attr_str(root, "optimizer_options", o.options.dump(-1));
    if (h.grad_window) {
      const int64_t w[2] = {h.grad_window->first, h.grad_window->second};
      hsize_t two = 2;
      H5::Attribute a = root.createAttribute("grad_window", H5::PredType::STD_I64LE, H5::DataSpace(1, &two));
      a.write(H5::PredType::NATIVE_INT64, w);
    }
    impl_->file.createGroup("/steps");
  } catch (const H5::Exception& e) {
    const std::string d = hdf5_detail(&e);
    fs::remove(impl_->tmp, ec);
    throw Error(fmt::format("cannot write trace '{}': {}", path.string(), d));
  }
}

TraceWriter::~TraceWriter() {
  if (impl_) cleanup::forget_path(impl_->tmp_slot);
  if (!impl_ || impl_->committed) return;
  if (impl_->open && !impl_->failed) {
    try {
      impl_->file.close();
    } catch (const H5::Exception&) {
      impl_->failed = true;  // the close's own flush failed: the same state as a failed write
    }
  }
  if (impl_->open && impl_->failed) {
    H5Iinc_ref(impl_->file.getId());  // H5File's destructor drops this reference instead of closing
    g_hdf5_teardown_unsafe.store(true);
  }
  H5Eclear2(H5E_DEFAULT);
  std::error_code ec;
  fs::remove(impl_->tmp, ec);
}

void TraceWriter::set_step(const StepInfo& s) {
  impl_->require_usable();
  try {
    H5::Group g = impl_->step_group(s.step);
    if (s.lr) impl_->attr_f64(g, "lr", *s.lr);
    if (s.loss) impl_->attr_f64(g, "loss", *s.loss);
    if (s.adamw_step) impl_->attr_i64(g, "adamw_step", *s.adamw_step);
    if (!s.contents.empty()) impl_->attr_str(g, "contents", s.contents);
  } catch (const H5::Exception& e) {
    impl_->fail(e, fmt::format("cannot write step {}", s.step));
  }
}

void TraceWriter::write(const TensorInfo& t, const void* data) {
  FP8SIM_REQUIRE(!t.name.empty() && t.name.find('/') == std::string::npos,
                 "trace writer: tensor name '{}' must be non-empty and contain no '/'", t.name);
  FP8SIM_REQUIRE(!t.shape.empty() && t.shape.size() <= 8, "trace writer: {} has rank {} (1..8 allowed)", t.name,
                 t.shape.size());
  for (int64_t d : t.shape) FP8SIM_REQUIRE(d > 0, "trace writer: {} has a zero-size shape {}", t.name, t.shape_str());
  impl_->require_usable();
  try {
    H5::Group sg = impl_->step_group(t.step);
    const std::string role(role_name(t.role));
    H5::Group rg = sg.nameExists(role) ? sg.openGroup(role) : sg.createGroup(role);
    FP8SIM_REQUIRE(!rg.nameExists(t.name), "trace writer: step {} already has {}/{}", t.step, role, t.name);
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    H5::DataSpace space(static_cast<int>(dims.size()), dims.data());
    H5::DSetCreatPropList cp;
    const auto cd = chunk_dims(t.shape, dtype_bytes(t.dtype), impl_->opts.chunk_bytes);
    cp.setChunk(static_cast<int>(cd.size()), cd.data());
    if (impl_->opts.shuffle) cp.setShuffle();
    if (impl_->opts.deflate_level > 0) cp.setDeflate(impl_->opts.deflate_level);
    if (impl_->opts.fletcher32) cp.setFletcher32();
    H5::DataSet ds;
    switch (t.dtype) {
      case DType::F32:
        ds = rg.createDataSet(t.name, H5::PredType::IEEE_F32LE, space, cp);
        ds.write(data, H5::PredType::NATIVE_FLOAT);
        break;
      case DType::BF16:
        // No HDF5/numpy bfloat16: the bit patterns go in a uint16 dataset with dtype=bfloat16.
        ds = rg.createDataSet(t.name, H5::PredType::STD_U16LE, space, cp);
        ds.write(data, H5::PredType::NATIVE_UINT16);
        break;
      case DType::F16: {
        const H5::FloatType ft = ieee_f16_le();
        ds = rg.createDataSet(t.name, ft, space, cp);
        ds.write(data, ft);
        break;
      }
    }
    impl_->attr_str(ds, "role", role);
    impl_->attr_str(ds, "dtype", std::string(dtype_name(t.dtype)));
    impl_->attr_i64(ds, "step", t.step);
    if (!t.op.empty()) impl_->attr_str(ds, "op", t.op);
    if (!t.module.empty()) impl_->attr_str(ds, "module", t.module);
    if (!t.param.empty()) impl_->attr_str(ds, "param", t.param);
    if (!t.modules.empty()) impl_->attr_str(ds, "modules", join_list(t.modules));
    if (!t.aliases.empty()) impl_->attr_str(ds, "aliases", join_list(t.aliases));
    impl_->attr_i64(ds, "layer", t.layer);
    ds.close();  // its data reach the file here: a write error is an exception, not a destructor's print
  } catch (const H5::Exception& e) {
    impl_->fail(e, fmt::format("cannot write {}", t.name));
  }
}

void TraceWriter::write(const TensorInfo& meta, const TensorData& data) {
  FP8SIM_REQUIRE(data.dtype == meta.dtype, "trace writer: {} is {} but its data are {}", meta.name,
                 dtype_name(meta.dtype), dtype_name(data.dtype));
  FP8SIM_REQUIRE(static_cast<int64_t>(data.size()) == meta.numel(), "trace writer: {} has shape {} but {} values",
                 meta.name, meta.shape_str(), data.size());
  write(meta, data.dtype == DType::F32 ? static_cast<const void*>(data.f32.data())
                                       : static_cast<const void*>(data.bits.data()));
}

void TraceWriter::set_root_attr(const std::string& key, const std::string& value) {
  impl_->require_usable();
  try {
    H5::Group root = impl_->file.openGroup("/");
    impl_->attr_str(root, key, value);
  } catch (const H5::Exception& e) {
    impl_->fail(e, fmt::format("cannot write attribute {}", key));
  }
}

void TraceWriter::set_root_attr(const std::string& key, double value) {
  impl_->require_usable();
  try {
    H5::Group root = impl_->file.openGroup("/");
    impl_->attr_f64(root, key, value);
  } catch (const H5::Exception& e) {
    impl_->fail(e, fmt::format("cannot write attribute {}", key));
  }
}

void TraceWriter::commit() {
  FP8SIM_REQUIRE(!impl_->committed, "trace writer: commit() called twice");
  impl_->require_usable();
  refuse_overwriting_input(fmt::format("'{}'", impl_->target.string()), impl_->target);
  try {
    impl_->file.close();
    impl_->open = false;
  } catch (const H5::Exception& e) {
    impl_->fail(e, "cannot finish the trace");
  }
  std::error_code ec;
  fs::rename(impl_->tmp, impl_->target, ec);
  if (ec) {
    fs::remove(impl_->tmp, ec);
    throw Error(fmt::format("cannot move trace into place at '{}': {}", impl_->target.string(), ec.message()));
  }
  impl_->committed = true;
}

}  // namespace fp8sim::trace
