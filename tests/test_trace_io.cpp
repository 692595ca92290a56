// sim/trace/trace.hpp: bit-exact round trips of every dtype, a foreign (h5py-written) file, the
// committed sample from real training, and every way a file can fail to be a trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim::trace {
namespace {

namespace fs = std::filesystem;

const std::string kData = FP8SIM_TEST_DATA;
const std::string kSample = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";

// The bit patterns scripts/make_trace_test_files.py writes: (i * 0x9E3779B1 + 0x7F4A7C15) mod 2^32,
// except every 4th element, a NaN with a payload (signalling ones included, some negative): a
// reader that converted values instead of copying bits would quiet or canonicalise them.
uint32_t formula32(uint64_t i) { return static_cast<uint32_t>(i * 0x9E3779B1ull + 0x7F4A7C15ull); }
uint32_t pattern32(uint64_t i) {
  if (i % 4 == 0) return static_cast<uint32_t>((0x7F800001ull + i * 0x1000ull) | ((i & 8) << 28));
  return formula32(i);
}
uint16_t pattern16(uint64_t i) {
  if (i % 4 == 0) return static_cast<uint16_t>((0x7C01ull + i) | ((i & 8) << 12));
  return static_cast<uint16_t>(formula32(i) >> 16);
}

// Opening must fail with one fp8sim::Error line containing `needle`.
void expect_open_error(const std::string& path, const std::string& needle) {
  try {
    TraceReader r(path);
    ADD_FAILURE() << path << " opened without error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
  }
}

TraceHeader test_header() {
  TraceHeader h;
  h.producer = "test_trace_io";
  h.model_kind = "generic";
  h.model_config = Json::parse(R"({"name": "rt", "hidden_size": 8})");
  h.optimizer.name = "torch.optim.AdamW";
  h.optimizer.lr = 1e-3;
  h.optimizer.beta1 = 0.9;
  h.optimizer.beta2 = 0.95;
  h.optimizer.eps = 1e-8;
  h.optimizer.weight_decay = 0.1;
  h.optimizer.options = Json::parse(R"({"foreach": false})");
  h.training = Json::parse(R"({"steps": 3})");
  h.grad_window = std::make_pair<int64_t, int64_t>(2, 3);
  return h;
}

TensorInfo meta(int64_t step, Role role, std::string name, DType dt, std::vector<int64_t> shape) {
  TensorInfo t;
  t.step = step;
  t.role = role;
  t.name = std::move(name);
  t.dtype = dt;
  t.shape = std::move(shape);
  return t;
}

TEST(TraceIo, RoundTripsEveryDtypeBitExactly) {
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/rt.h5";
  // Every bf16 and fp16 pattern (all NaN payloads, Infs, subnormals, -0), and 1024 x 1027 fp32
  // patterns spread over all exponents plus the special values.
  Buffer<uint16_t> all16(65536);
  for (uint32_t i = 0; i < 65536; ++i) all16[i] = static_cast<uint16_t>(i);
  std::vector<float> f32(1024 * 1027);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = f32_from_bits(pattern32(i));  // NaN payloads every 4th
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u,
                               0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7F7FFFFFu};
  for (size_t i = 0; i < std::size(specials); ++i) f32[i] = f32_from_bits(specials[i]);
  {
    TraceWriter w(path, test_header());
    StepInfo s;
    s.step = 2;
    s.lr = 5e-4;
    s.loss = 2.5;
    s.adamw_step = 1;
    s.contents = "full";
    w.set_step(s);
    TensorInfo a = meta(2, Role::Weight, "w.f32", DType::F32, {1024, 1027});
    a.op = "linear";
    a.module = "blk.0.lin";
    a.param = "blk.0.lin.weight";
    a.aliases = {"head.weight", "other.weight"};
    a.layer = 0;
    w.write(a, f32.data());
    TensorInfo b = meta(2, Role::Activation, "x.bf16", DType::BF16, {256, 256});
    b.op = "linear_input";
    b.module = "blk.0.lin";
    b.modules = {"blk.0.q", "blk.0.k", "blk.0.v"};
    b.layer = 3;
    w.write(b, all16.data());
    w.write(meta(3, Role::ActivationGrad, "g.f16", DType::F16, {16, 16, 256}), all16.data());
    // A tensor whose bf16 bits are written through the TensorData overload.
    TensorData td;
    td.dtype = DType::BF16;
    td.shape = {5};
    td.bits = {0x3F80, 0xFF80, 0x7FC1, 0x0001, 0x8000};
    w.write(meta(3, Role::Grad, "small", DType::BF16, {5}), td);
    EXPECT_FALSE(fs::exists(path)) << "the target must appear only on commit";
    w.commit();
  }
  ASSERT_TRUE(fs::exists(path));
  TraceReader r(path);
  const TraceHeader& h = r.header();
  EXPECT_EQ(h.version, kFormatVersion);
  EXPECT_EQ(h.producer, "test_trace_io");
  EXPECT_EQ(h.model_config.at("hidden_size").as_int(), 8);
  EXPECT_EQ(*h.optimizer.beta2, 0.95);
  EXPECT_EQ(*h.optimizer.eps, 1e-8);
  EXPECT_FALSE(h.optimizer.options.at("foreach").as_bool());
  ASSERT_TRUE(h.grad_window.has_value());
  EXPECT_EQ(h.grad_window->first, 2);
  EXPECT_EQ(h.grad_window->second, 3);
  ASSERT_EQ(r.steps().size(), 2u);
  EXPECT_EQ(r.steps()[0].step, 2);
  EXPECT_EQ(*r.steps()[0].lr, 5e-4);
  EXPECT_EQ(*r.steps()[0].loss, 2.5);
  EXPECT_EQ(*r.steps()[0].adamw_step, 1);
  EXPECT_EQ(r.steps()[0].contents, "full");
  EXPECT_FALSE(r.steps()[1].lr.has_value());
  ASSERT_EQ(r.tensors().size(), 4u);

  const TensorInfo* ta = r.find(2, Role::Weight, "w.f32");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->op, "linear");
  EXPECT_EQ(ta->param, "blk.0.lin.weight");
  EXPECT_EQ(ta->aliases, (std::vector<std::string>{"head.weight", "other.weight"}));
  EXPECT_EQ(ta->layer, 0);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{1024, 1027}));
  EXPECT_EQ(ta->rows(), 1024);
  EXPECT_EQ(ta->cols(), 1027);
  EXPECT_GT(ta->stored_bytes, 0u);
  const TensorData da = r.read(*ta);
  ASSERT_EQ(da.f32.size(), f32.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < f32.size(); ++i) mismatches += f32_bits(da.f32[i]) != f32_bits(f32[i]);
  EXPECT_EQ(mismatches, 0u) << "fp32 patterns must survive bit-exactly (NaN payloads included)";

  const TensorInfo* tb = r.find(2, Role::Activation, "x.bf16");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::BF16);
  EXPECT_EQ(tb->modules, (std::vector<std::string>{"blk.0.q", "blk.0.k", "blk.0.v"}));
  EXPECT_EQ(tb->layer, 3);
  const TensorData db = r.read(*tb);
  EXPECT_TRUE(db.f32.empty());
  EXPECT_EQ(db.bits, all16);
  // The widening accessor is exact: bf16 bits are the top half of the fp32 bits.
  for (uint32_t i = 0; i < 65536; i += 97) EXPECT_EQ(f32_bits(db.value(i)), i << 16);

  const TensorInfo* tc = r.find(3, Role::ActivationGrad, "g.f16");
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(tc->dtype, DType::F16);
  const TensorData dc = r.read(*tc);
  EXPECT_EQ(dc.bits, all16);
  // fp16 widening against the direct definition for a few normal, subnormal and special codes.
  EXPECT_EQ(dc.value(0x3C00), 1.0f);
  EXPECT_EQ(dc.value(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(dc.value(0xFBFF), -65504.0f);
  EXPECT_TRUE(std::isinf(dc.value(0x7C00)));
  EXPECT_TRUE(std::isnan(dc.value(0x7E00)));

  const TensorData dd = r.read(*r.find(3, Role::Grad, "small"));
  EXPECT_EQ(dd.bits, (Buffer<uint16_t>{0x3F80, 0xFF80, 0x7FC1, 0x0001, 0x8000}));
  const NonFinite nf = count_nonfinite(dd);
  EXPECT_EQ(nf.nan, 1u);
  EXPECT_EQ(nf.inf, 1u);

  // The count of NaN/Inf over all 65536 fp16 codes: 2 Infs, 2 * 1023 NaNs.
  const NonFinite nf16 = count_nonfinite(dc);
  EXPECT_EQ(nf16.inf, 2u);
  EXPECT_EQ(nf16.nan, 2u * 1023u);
  const NonFinite nfb = count_nonfinite(db);
  EXPECT_EQ(nfb.inf, 2u);
  EXPECT_EQ(nfb.nan, 2u * 127u);
}

// count_nonfinite counts in blocks and splits only a block with specials: NaN and Inf of every
// sign at block edges, in the first and last element and in a short last block, on tensors long
// enough for several threads, against a plain count (fp32, bf16, fp16).
TEST(TraceIo, NonFiniteCountsAtBlockEdges) {
  const size_t n = 300007;
  const std::vector<size_t> at = {0, 1, 32767, 32768, 65535, 65536, 98303, 131072, 299999, n - 1};
  for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
    TensorData t;
    t.dtype = dt;
    t.shape = {static_cast<int64_t>(n)};
    const uint32_t inf32 = 0x7F800000u;
    const uint16_t inf16 = dt == DType::BF16 ? 0x7F80u : 0x7C00u;
    uint64_t nan = 0, inf = 0;
    if (dt == DType::F32) {
      t.f32 = Buffer<float>(n);
      for (size_t i = 0; i < n; ++i) t.f32[i] = static_cast<float>(i % 1000) - 500.0f;
    } else {
      t.bits = Buffer<uint16_t>(n);
      for (size_t i = 0; i < n; ++i) t.bits[i] = static_cast<uint16_t>(i % 0x7000);  // finite codes
    }
    for (size_t k = 0; k < at.size(); ++k) {
      const bool is_nan = k % 3 != 0, neg = k % 2 == 1;
      if (dt == DType::F32) {
        const uint32_t b = (neg ? 0x80000000u : 0u) | inf32 | (is_nan ? 0x1234u : 0u);
        std::memcpy(&t.f32[at[k]], &b, 4);
      } else {
        t.bits[at[k]] = static_cast<uint16_t>((neg ? 0x8000u : 0u) | inf16 | (is_nan ? 1u : 0u));
      }
      (is_nan ? nan : inf) += 1;
    }
    const NonFinite nf = count_nonfinite(t);
    EXPECT_EQ(nf.nan, nan) << static_cast<int>(dt);
    EXPECT_EQ(nf.inf, inf) << static_cast<int>(dt);
  }
}

TEST(TraceIo, FiltersSelectByStepRoleLayerAndOp) {
  const std::string path = test::temp_dir() + "/f.h5";
  {
    TraceWriter w(path, test_header());
    std::vector<float> v(6, 1.0f);
    for (int step : {4, 5})
      for (int layer : {0, 1}) {
        TensorInfo t = meta(step, Role::Activation, "l" + std::to_string(layer) + ".in", DType::F32, {2, 3});
        t.layer = layer;
        t.op = layer ? "norm_input" : "linear_input";
        w.write(t, v.data());
        w.write(meta(step, Role::Grad, "p" + std::to_string(layer), DType::F32, {6}), v.data());
      }
    w.commit();
  }
  TraceReader r(path);
  EXPECT_EQ(r.tensors().size(), 8u);
  Filter f;
  f.step = 5;
  EXPECT_EQ(r.select(f).size(), 4u);
  f.role = Role::Activation;
  EXPECT_EQ(r.select(f).size(), 2u);
  f.layer = 1;
  ASSERT_EQ(r.select(f).size(), 1u);
  EXPECT_EQ(r.select(f)[0]->op, "norm_input");
  Filter g;
  g.op = "linear_input";
  EXPECT_EQ(r.select(g).size(), 2u);
  size_t visited = 0;
  r.for_each(g, [&](const TensorInfo& t, const TensorData& d) {
    EXPECT_EQ(t.op, "linear_input");
    EXPECT_EQ(d.size(), 6u);
    ++visited;
  });
  EXPECT_EQ(visited, 2u);
}

TEST(TraceIo, ReadsEveryDtypeFromAnH5pyWrittenFile) {
  TraceReader r(kData + "/trace_h5py_dtypes.h5");
  EXPECT_EQ(r.header().model_kind, "generic");
  EXPECT_EQ(*r.header().optimizer.weight_decay, 0.1);
  ASSERT_EQ(r.steps().size(), 1u);
  EXPECT_EQ(*r.steps()[0].adamw_step, 6);
  // Unknown groups and soft links are skipped and reported, not followed.
  std::set<std::string> ignored(r.ignored().begin(), r.ignored().end());
  EXPECT_TRUE(ignored.count("/steps/step_000007/notes_from_the_future"));
  EXPECT_TRUE(ignored.count("/steps/step_000007/weight/a_soft_link"));
  struct Want {
    Role role;
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const Want wants[] = {{Role::Weight, "f32_le", DType::F32, {3, 5}},
                        {Role::Weight, "f32_be", DType::F32, {7}},
                        {Role::Activation, "bf16_u16", DType::BF16, {4, 4}},
                        {Role::Activation, "bf16_i16", DType::BF16, {5}},
                        {Role::ActivationGrad, "f16_float", DType::F16, {2, 3, 4}},
                        {Role::ActivationGrad, "f16_u16", DType::F16, {6}}};
  ASSERT_EQ(r.tensors().size(), std::size(wants));
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    const TensorInfo* t = r.find(7, w.role, w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    const TensorData d = r.read(*t);
    ASSERT_EQ(static_cast<int64_t>(d.size()), t->numel());
    for (size_t i = 0; i < d.size(); ++i) {
      if (w.dtype == DType::F32) {
        ASSERT_EQ(f32_bits(d.f32[i]), pattern32(i)) << "element " << i;
      } else {
        ASSERT_EQ(d.bits[i], pattern16(i)) << "element " << i;
      }
    }
  }
  const TensorInfo* a = r.find(7, Role::Activation, "bf16_u16");
  EXPECT_EQ(a->modules, (std::vector<std::string>{"m.a", "m.b"}));
  EXPECT_EQ(a->op, "linear_input");
}

TEST(TraceIo, RejectsFilesThatAreNotTracesWithOneLine) {
  const std::string dir = test::temp_dir();
  expect_open_error(dir + "/does-not-exist.h5", "no such file");
  expect_open_error(dir, "a folder without .npy files");  // a folder is read as .npy files
  { std::ofstream(dir + "/empty.h5"); }
  expect_open_error(dir + "/empty.h5", "empty");
  { std::ofstream(dir + "/text.h5") << "this is a text file, not HDF5\n"; }
  expect_open_error(dir + "/text.h5", "not an HDF5 file");
  expect_open_error(kData + "/trace_bad_no_attrs.h5", "missing root attribute 'format'");
  expect_open_error(kData + "/trace_bad_format_name.h5", "'some-other-format'");
  expect_open_error(kData + "/trace_bad_version.h5", "version 99 is newer");
  expect_open_error(kData + "/trace_bad_no_steps.h5", "missing group /steps");
  expect_open_error(kData + "/trace_bad_int32.h5", "unsupported dtype int32");
  expect_open_error(kData + "/trace_bad_float64.h5", "unsupported dtype float64");
  expect_open_error(kData + "/trace_bad_u16_no_dtype.h5", "without a dtype attribute");
  expect_open_error(kData + "/trace_bad_zero_size.h5", "zero-size shape (0, 4)");
  expect_open_error(kData + "/trace_bad_dtype_mismatch.h5", "dtype attribute says bfloat16");
  expect_open_error(kData + "/trace_bad_missing_role.h5", "missing attribute 'role'");
  expect_open_error(kData + "/trace_bad_unwritten.h5", "no data stored");
  expect_open_error(kData + "/trace_bad_lzf.h5", "cannot decode");
}

TEST(TraceIo, WriterRefusesZeroSizeShapesAndLeavesNoFile) {
  const std::string path = test::temp_dir() + "/z.h5";
  {
    TraceWriter w(path, test_header());
    float v = 0;
    EXPECT_THROW(w.write(meta(1, Role::Grad, "z", DType::F32, {3, 0}), &v), Error);
    EXPECT_THROW(w.write(meta(1, Role::Grad, "a/b", DType::F32, {1}), &v), Error);
    w.write(meta(1, Role::Grad, "ok", DType::F32, {1}), &v);
    EXPECT_THROW(w.write(meta(1, Role::Grad, "ok", DType::F32, {1}), &v), Error);
    // destroyed without commit()
  }
  EXPECT_FALSE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    ADD_FAILURE() << "left behind: " << e.path();
}

TEST(TraceIo, TruncatedCopiesOfTheSampleFailWithOneLine) {
  ASSERT_TRUE(fs::exists(kSample)) << kSample;
  const auto bytes = test::read_file_bytes(kSample);
  ASSERT_GT(bytes.size(), 100000u);
  const std::string dir = test::temp_dir();
  const size_t cuts[] = {
      0, 7, 8, 512, 4096, bytes.size() / 10, bytes.size() / 2, bytes.size() - 4096, bytes.size() - 1};
  for (size_t cut : cuts) {
    SCOPED_TRACE(cut);
    const std::string p = dir + "/cut" + std::to_string(cut) + ".h5";
    {
      std::ofstream o(p, std::ios::binary);
      o.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(cut));
    }
    try {
      TraceReader r(p);
      // If the metadata survived, reading every tensor must still fail cleanly somewhere or
      // succeed; never crash.
      for (const auto& t : r.tensors()) (void)r.read(t);
      ADD_FAILURE() << "a truncated file read back completely";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// ---- the committed sample from real training ------------------------------------------------------

TEST(TraceSample, HasTheSchemaTheToolsRelyOn) {
  TraceReader r(kSample);
  const TraceHeader& h = r.header();
  EXPECT_EQ(h.model_kind, "llama");
  EXPECT_EQ(h.optimizer.name, "torch.optim.AdamW");
  const Json& cfg = h.model_config;
  const int64_t d = cfg.at("hidden_size").as_int(), ffn = cfg.at("intermediate_size").as_int();
  const int64_t layers = cfg.at("num_hidden_layers").as_int(), vocab = cfg.at("vocab_size").as_int();
  ASSERT_TRUE(h.grad_window.has_value());
  const auto [first, last] = *h.grad_window;
  EXPECT_GE(last - first + 1, 4) << "the optimizer replay wants a window of several steps";

  // The full snapshot (the window's first step) holds every role for every parameter.
  const StepInfo* full = r.find_step(first);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(full->contents, "full");
  std::map<Role, int> per_role;
  for (size_t i : full->tensors) per_role[r.tensors()[i].role]++;
  const int params =
      1 + 9 * static_cast<int>(layers) + 1;  // embedding (tied head), 7 linears + 2 norms per block, final norm
  for (Role role : {Role::Weight, Role::Grad, Role::ExpAvg, Role::ExpAvgSq}) EXPECT_EQ(per_role[role], params);
  EXPECT_GT(per_role[Role::Activation], 0);
  EXPECT_GT(per_role[Role::ActivationGrad], 0);

  // Every linear weight has the nn.Linear shape (out, in); every linear input names consumers
  // whose weights are in the same step, with matching inner dimension (the GEMM pairing).
  std::map<std::string, const TensorInfo*> weight_by_module;
  for (const TensorInfo* t : r.select({.step = first, .role = Role::Weight})) {
    if (t->op != "linear" && t->op != "embedding") continue;
    weight_by_module[t->module] = t;
    for (const auto& a : t->aliases) weight_by_module[a.substr(0, a.rfind('.'))] = t;
  }
  EXPECT_EQ(weight_by_module.at("layers.0.mlp.up_proj")->shape, (std::vector<int64_t>{ffn, d}));
  EXPECT_EQ(weight_by_module.at("lm_head")->shape, (std::vector<int64_t>{vocab, d}));
  int linear_inputs = 0;
  std::set<std::string> ops;
  for (const TensorInfo* t : r.select({.step = first, .role = Role::Activation})) {
    ops.insert(t->op);
    EXPECT_GE(t->layer, -1);
    if (t->op != "linear_input" && t->op != "attn_output") continue;
    ++linear_inputs;
    ASSERT_FALSE(t->modules.empty()) << t->name;
    for (const auto& m : t->modules) {
      ASSERT_TRUE(weight_by_module.count(m)) << t->name << " -> " << m;
      EXPECT_EQ(weight_by_module.at(m)->cols(), t->cols()) << t->name << " -> " << m;
    }
  }
  EXPECT_EQ(linear_inputs, 4 * static_cast<int>(layers) + 1);  // qkv, o, gate/up, down per block + lm_head
  EXPECT_EQ(ops, (std::set<std::string>{"linear_input", "attn_output", "norm_input", "silu_input", "mul_input",
                                        "residual_add"}));

  // Real training data: every tensor is finite and not all zero.
  for (const auto& t : r.tensors()) {
    const TensorData data = r.read(t);
    EXPECT_EQ(count_nonfinite(data).total(), 0u) << t.path;
    bool any = false;
    for (size_t i = 0; i < data.size() && !any; ++i) any = data.value(i) != 0.0f;
    EXPECT_TRUE(any) << t.path;
  }
}

// The grad window is complete: a plain fp32 AdamW replay (torch's formula, no FMA) from the
// stored start state, grads and per-step lr lands on the stored end weights. torch's vectorised
// CPU kernels fuse some multiply-adds, so the two differ by rounding only: per element at most
// a few ulps of the largest weight of the tensor (bound 2^-20 relative, i.e. 8 ulp). A wrong lr,
// step count or missing grad moves weights by ~lr = 1e-4 relative, far outside.
TEST(TraceSample, GradWindowReplaysToTheCapturedEndWeights) {
  TraceReader r(kSample);
  const auto& h = r.header();
  const auto [first, last] = *h.grad_window;
  const double b1 = *h.optimizer.beta1, b2 = *h.optimizer.beta2, eps = *h.optimizer.eps, wd = *h.optimizer.weight_decay;
  const StepInfo* end = r.find_step(last + 1);
  ASSERT_NE(end, nullptr);
  EXPECT_EQ(*end->adamw_step, *r.find_step(first)->adamw_step + (last - first + 1));
  int replayed = 0;
  for (size_t ti : end->tensors) {
    const TensorInfo& pend = r.tensors()[ti];
    if (pend.role != Role::Weight) continue;
    Buffer<float> p = r.read_f32(*r.find(first, Role::Weight, pend.name));
    Buffer<float> m = r.read_f32(*r.find(first, Role::ExpAvg, pend.name));
    Buffer<float> v = r.read_f32(*r.find(first, Role::ExpAvgSq, pend.name));
    int64_t t = *r.find_step(first)->adamw_step;
    for (int64_t s = first; s <= last; ++s) {
      const TensorInfo* gi = r.find(s, Role::Grad, pend.name);
      ASSERT_NE(gi, nullptr) << "step " << s << " lacks grad " << pend.name;
      const Buffer<float> g = r.read_f32(*gi);
      const double lr = *r.find_step(s)->lr;
      ++t;
      const float decay = static_cast<float>(1.0 - lr * wd), w1 = static_cast<float>(1.0 - b1);
      const float fb2 = static_cast<float>(b2), w2 = static_cast<float>(1.0 - b2);
      const float bc2s = static_cast<float>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t))));
      const float step_size = static_cast<float>(-lr / (1.0 - std::pow(b1, static_cast<double>(t))));
      for (size_t i = 0; i < p.size(); ++i) {
        p[i] = p[i] * decay;
        m[i] = m[i] + w1 * (g[i] - m[i]);
        v[i] = v[i] * fb2 + w2 * g[i] * g[i];
        const float denom = std::sqrt(v[i]) / bc2s + static_cast<float>(eps);
        p[i] = p[i] + step_size * (m[i] / denom);
      }
    }
    const Buffer<float> want = r.read_f32(pend);
    float scale = 0;
    for (float x : want) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < p.size(); ++i)
      ASSERT_LE(std::fabs(p[i] - want[i]), std::ldexp(scale, -20)) << pend.name << "[" << i << "]";
    ++replayed;
  }
  EXPECT_GT(replayed, 5);
}

}  // namespace
}  // namespace fp8sim::trace
