// Bounded-time mutation fuzzing of the trace reader, run in every build (the libFuzzer target in
// tests/fuzz/ needs clang). Bytes of real traces are flipped, overwritten, inserted, deleted and
// truncated; the reader must only ever succeed or throw fp8sim::Error: a crash fails the test by
// killing it, any other exception fails the EXPECT below. Deterministic seeds, so a failure
// reproduces; FP8SIM_FUZZ_SECONDS overrides the time budget (default 15 s in total).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "sim/trace/trace.hpp"
#include "tests/fuzz/trace_reader_fuzz.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

double budget_seconds() {
  const char* e = std::getenv("FP8SIM_FUZZ_SECONDS");
  return e ? std::atof(e) : 15.0;
}

// A small trace from fp8sim's own writer with every dtype and a few roles: a seed whose
// structure (v110 object headers, chunk indexes, checksums) mutations can reach quickly.
std::vector<uint8_t> small_writer_trace(const std::string& dir) {
  const std::string p = dir + "/seed.h5";
  trace::TraceHeader h;
  h.producer = "test_trace_fuzz";
  h.model_config = Json::parse(R"({"hidden_size": 4})");
  h.optimizer.lr = 1e-3;
  h.grad_window = std::make_pair<int64_t, int64_t>(1, 2);
  trace::TraceWriter w(p, h);
  std::vector<float> f(96);
  std::vector<uint16_t> b(96);
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = static_cast<float>(i) * 0.37f - 11.0f;
    b[i] = static_cast<uint16_t>(0x3C00 + i * 7);
  }
  trace::TensorInfo t;
  t.step = 1;
  t.role = trace::Role::Weight;
  t.name = "w";
  t.op = "linear";
  t.shape = {8, 12};
  w.write(t, f.data());
  t.role = trace::Role::Activation;
  t.name = "x";
  t.op = "linear_input";
  t.modules = {"w"};
  t.dtype = trace::DType::BF16;
  w.write(t, b.data());
  t.step = 2;
  t.role = trace::Role::Grad;
  t.name = "g";
  t.dtype = trace::DType::F16;
  t.shape = {96};
  w.write(t, b.data());
  w.commit();
  return test::read_file_bytes(p);
}

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
  double share;  // of the time budget
};

TEST(TraceFuzz, MutatedTracesOnlyEverThrowFp8simError) {
  // A mutated file that makes HDF5 loop is reported after this long (the reader's guard).
  ::setenv("FP8SIM_TRACE_PROBE_TIMEOUT", "5", 1);
  const std::string dir = test::temp_dir();
  std::vector<Seed> seeds;
  seeds.push_back({"writer", small_writer_trace(dir), 0.4});
  seeds.push_back({"h5py", test::read_file_bytes(std::string(FP8SIM_TEST_DATA) + "/trace_h5py_dtypes.h5"), 0.4});
  seeds.push_back(
      {"sample", test::read_file_bytes(std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5"), 0.2});
  const std::string path = dir + "/fuzz.h5";
  const double budget = budget_seconds();
  uint64_t seed_no = 0;
  for (const Seed& s : seeds) {
    ASSERT_FALSE(s.bytes.empty()) << s.name;
    // The unmutated seed is a valid trace.
    EXPECT_TRUE(fuzz::exercise_trace_reader(s.bytes.data(), s.bytes.size(), path)) << s.name;
    fuzz::Mutator mut(0x5EED0000u + seed_no++);
    size_t runs = 0, accepted = 0;
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < budget * s.share) {
      const std::vector<uint8_t> m = mut.mutate(s.bytes);
      bool ok = false;
      EXPECT_NO_THROW(ok = fuzz::exercise_trace_reader(m.data(), m.size(), path, 16)) << s.name << " run " << runs;
      accepted += ok;
      ++runs;
    }
    std::printf("[fuzz] seed %s (%zu bytes): %zu mutated files, %zu still opened as traces\n", s.name.c_str(),
                s.bytes.size(), runs, accepted);
    EXPECT_GT(runs, 0u);
  }
}

}  // namespace
}  // namespace fp8sim
