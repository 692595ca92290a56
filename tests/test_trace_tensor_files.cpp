// Tensors as they come (sim/trace/tensor_files.hpp): a safetensors checkpoint and a folder of .npy
// files read as a one-step trace, every value bit for bit, names mapped to roles, ops and layers,
// non-float tensors listed as ignored, and every malformed file a one-line error; tensors in
// memory (the Python package's dicts) read the same way; the CLI's info, analyze and report take
// them where they take a trace.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/json.hpp"
#include "sim/common/npy.hpp"
#include "sim/trace/tensor_files.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

struct Src {
  std::string name, dtype;  // safetensors dtype: F32, BF16, F16, I64
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<Src> sample() {
  auto f32 = [](size_t n, float scale) {
    std::vector<uint8_t> b(n * 4);
    for (size_t i = 0; i < n; ++i) {
      const float v = scale * static_cast<float>((i * 37) % 101) - 3.0f;
      std::memcpy(b.data() + 4 * i, &v, 4);
    }
    return b;
  };
  auto u16 = [](size_t n, uint16_t base) {
    std::vector<uint8_t> b(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t v = static_cast<uint16_t>(base + i * 7);
      std::memcpy(b.data() + 2 * i, &v, 2);
    }
    return b;
  };
  return {{"model.embed_tokens.weight", "F32", {16, 8}, f32(128, 0.1f)},
          {"model.layers.0.self_attn.q_proj.weight", "BF16", {8, 8}, u16(64, 0x3F00)},
          {"model.layers.0.input_layernorm.weight", "F16", {8}, u16(8, 0x3C00)},
          {"model.layers.1.mlp.down_proj.weight.exp_avg", "F32", {8, 12}, f32(96, 1e-4f)},
          {"position_ids", "I64", {4}, std::vector<uint8_t>(32, 1)}};
}

std::string write_safetensors(const std::string& dir, const std::vector<Src>& ts, const std::string& bad = "") {
  Json h = Json::object();
  uint64_t off = 0;
  std::string data;
  for (const auto& t : ts) {
    Json e = Json::object();
    e["dtype"] = t.dtype;
    Json sh = Json::array();
    for (int64_t d : t.shape) sh.push_back(d);
    e["shape"] = sh;
    Json o = Json::array();
    o.push_back(static_cast<int64_t>(off));
    o.push_back(static_cast<int64_t>(off + t.bytes.size()));
    e["data_offsets"] = o;
    h[t.name] = e;
    data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    off += t.bytes.size();
  }
  std::string text = bad.empty() ? h.dump(-1) : bad;
  const uint64_t n = text.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  const std::string path = dir + "/m.safetensors";
  std::ofstream(path, std::ios::binary) << out << text << data;
  return path;
}

void expect_sample(const trace::TraceReader& r, const std::vector<Src>& src) {
  ASSERT_EQ(r.steps().size(), 1u);
  ASSERT_EQ(r.tensors().size(), 4u);
  ASSERT_EQ(r.ignored().size(), 1u);
  EXPECT_NE(r.ignored()[0].find("position_ids"), std::string::npos);
  std::map<std::string, const trace::TensorInfo*> by;
  for (const auto& t : r.tensors()) by[std::string(trace::role_name(t.role)) + ":" + t.name] = &t;
  const auto* q = by.at("weight:model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q->op, "linear");
  EXPECT_EQ(q->layer, 0);
  EXPECT_EQ(q->module, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(q->dtype, trace::DType::BF16);
  EXPECT_EQ(by.at("weight:model.embed_tokens.weight")->op, "embedding");
  EXPECT_EQ(by.at("weight:model.embed_tokens.weight")->layer, -1);
  EXPECT_EQ(by.at("weight:model.layers.0.input_layernorm.weight")->op, "norm");
  EXPECT_EQ(by.at("weight:model.layers.0.input_layernorm.weight")->dtype, trace::DType::F16);
  const auto* m = by.at("exp_avg:model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(m->param, "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(m->layer, 1);
  // Every value, bit for bit.
  for (const auto& s : src) {
    if (s.dtype == "I64") continue;
    const std::string key = s.name.find(".exp_avg") != std::string::npos ? "exp_avg:model.layers.1.mlp.down_proj.weight"
                                                                         : "weight:" + s.name;
    const trace::TensorData d = r.read(*by.at(key));
    EXPECT_EQ(d.shape, s.shape) << key;
    const void* got = d.dtype == trace::DType::F32 ? static_cast<const void*>(d.f32.data()) : d.bits.data();
    ASSERT_EQ(d.size() * (d.dtype == trace::DType::F32 ? 4 : 2), s.bytes.size()) << key;
    EXPECT_EQ(std::memcmp(got, s.bytes.data(), s.bytes.size()), 0) << key;
  }
}

TEST(TensorFiles, SafetensorsReadAsAOneStepTrace) {
  const std::string dir = test::temp_dir();
  const auto src = sample();
  const trace::TraceReader r(write_safetensors(dir, src));
  expect_sample(r, src);
}

TEST(TensorFiles, NpyFolderReadsAsAOneStepTrace) {
  const std::string dir = test::temp_dir() + "/npy";
  std::filesystem::create_directories(dir);
  const auto src = sample();
  for (const auto& s : src) {
    const NpyDtype d = s.dtype == "F32"    ? NpyDtype::F32
                       : s.dtype == "BF16" ? NpyDtype::V2
                       : s.dtype == "F16"  ? NpyDtype::F16
                                           : NpyDtype::U8;
    write_npy(dir + "/" + s.name + ".npy", d, d == NpyDtype::U8 ? std::vector<int64_t>{32} : s.shape, s.bytes.data(),
              s.bytes.size());
  }
  std::ofstream(dir + "/notes.txt") << "not a tensor";
  const trace::TraceReader r(dir);
  expect_sample(r, src);
}

TEST(TensorFiles, TensorsInMemoryReadAsAOneStepTrace) {
  const auto src = sample();
  std::vector<trace::MemoryTensor> mem;
  for (const auto& s : src) {
    if (s.dtype == "I64") {
      mem.push_back({s.name, trace::DType::F32, {}, s.bytes.data()});  // 0-D: ignored, as a .npy folder's
      continue;
    }
    const trace::DType d =
        s.dtype == "F32" ? trace::DType::F32 : (s.dtype == "BF16" ? trace::DType::BF16 : trace::DType::F16);
    mem.push_back({s.name, d, s.shape, s.bytes.data()});
  }
  const trace::TraceReader r(trace::tensors_in_memory(mem, "<tensors>"), "<tensors>");
  EXPECT_EQ(r.path().string(), "<tensors>");
  expect_sample(r, src);

  // Another step number; two tensors of one role and parameter, or none at all, are refused.
  const trace::TraceReader r7(trace::tensors_in_memory({mem[0]}, "<t>", 7), "<t>");
  ASSERT_EQ(r7.steps().size(), 1u);
  EXPECT_EQ(r7.steps()[0].step, 7);
  EXPECT_NE(r7.find(7, trace::Role::Weight, "model.embed_tokens.weight"), nullptr);
  auto fails = [](std::vector<trace::MemoryTensor> ts, const std::string& needle) {
    try {
      trace::tensors_in_memory(std::move(ts), "<tensors>");
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails({mem[0], mem[0]}, "two tensors are the weight of 'model.embed_tokens.weight'");
  fails({}, "holds no float32");
}

TEST(TensorFiles, MalformedFilesAreOneLineErrors) {
  const std::string dir = test::temp_dir();
  auto src = sample();
  auto fails = [&](const std::string& path, const std::string& needle) {
    try {
      trace::TraceReader r(path);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  std::ofstream(dir + "/short.safetensors") << "abc";
  fails(dir + "/short.safetensors", "shorter than its 8-byte header length");
  fails(write_safetensors(dir, src, "{not json"), "its header is not JSON");
  std::string p = write_safetensors(dir, src);
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 40);
  fails(p, "lie outside the");
  src[0].shape = {16, 9};  // 144 elements for 128 values' bytes
  fails(write_safetensors(dir, src), "bytes of data for 144 F32 elements");
  fails(write_safetensors(dir, {{"x", "I64", {2}, std::vector<uint8_t>(16, 0)}}), "holds no float32");
  fails(write_safetensors(dir, {}, R"({"x": {"dtype": "F32"}})"), "lacks dtype, shape or data_offsets");
  fails(dir + "/missing.safetensors", "no such file");
  std::filesystem::create_directories(dir + "/empty");
  fails(dir + "/empty", "without .npy files");
}

TEST(TensorFiles, CommandsTakeACheckpointWhereTheyTakeATrace) {
  const std::string dir = test::temp_dir();
  const std::string st = write_safetensors(dir, sample());
  auto r = test::run_shell(std::string(FP8SIM_BINARY) + " analyze " + st + " --recipe bf16 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json doc = Json::parse(r.out);
  int exact = 0;
  for (const auto& t : doc.at("tensors").as_array())
    if (t.at("name").as_string() == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(t.at("nmse").as_number(), 0.0);  // stored in bf16: the bf16 recipe loses nothing
      ++exact;
    }
  EXPECT_EQ(exact, 1);
  r = test::run_shell(std::string(FP8SIM_BINARY) + " report " + st + " --no-plots --quiet --out " + dir + "/rep");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json rep = Json::parse(read_text_file(dir + "/rep/report.json"));
  for (const auto& s : rep.at("sections").as_array())
    if (s.at("id").as_string() == "optimizer") {
      EXPECT_EQ(s.at("status").as_string(), "unavailable");
    }
  // A folder of .npy files makes a report too.
  std::filesystem::create_directories(dir + "/npy");
  for (const auto& s : sample())
    if (s.dtype == "F32")
      write_npy(dir + "/npy/" + s.name + ".npy", NpyDtype::F32, s.shape, s.bytes.data(), s.bytes.size());
  r = test::run_shell(std::string(FP8SIM_BINARY) + " report " + dir +
                      "/npy --recipes bf16,coat --no-plots --quiet --out " + dir + "/rep2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/rep2/report.json"));
  std::ofstream(dir + "/bad.safetensors") << "abcdefghijk";
  r = test::run_shell(std::string(FP8SIM_BINARY) + " info " + dir + "/bad.safetensors");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not a safetensors file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp8sim
