// Trace reading on the CPU: every tensor of a trace read with TraceReader::read, through the
// chunk decoder on the OpenMP threads (1 and all) and through HDF5's own H5Dread
// (FP8SIM_HDF5_DIRECT=0), beside a plain sequential read of the same file and the zero-fill of
// buffers of the same bytes. Bytes/s are the tensors' bytes as stored (before compression).
//
// The file is written once per run under $TMPDIR: a synthetic trace (synth.hpp) of a 2-layer
// Llama-style model (hidden 1024, vocabulary 8192) at 1024 tokens, about 0.6 GB, in two copies:
// deflate 0 (what `fp8sim synth` writes) and deflate 6 with shuffle (what the recorder writes).
// FP8SIM_BENCH_TRACE=FILE times that file instead (its own filters), as one more case.
// The page cache holds the files after the first iteration, so the numbers are decoding and
// copying, not the disk: the "plain read" case is the same file read with pread into one buffer.
//   build/tests/bench/bench_trace [--benchmark_filter=...] [--benchmark_min_time=2]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/trace/synth.hpp"
#include "sim/trace/trace.hpp"

namespace {

namespace fs = std::filesystem;
using namespace fp8sim;

// The written traces, removed at exit.
struct Files {
  fs::path dir;
  fs::path plain, deflated;
  Files() {
    const char* t = std::getenv("TMPDIR");
    dir = fs::path(t && *t ? t : "/tmp") / ("fp8sim_bench_trace." + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path cfg = dir / "model.json";
    std::ofstream(cfg) << R"({"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
 "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 8192,
 "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": false})";
    trace::SynthOptions o;
    o.model = cfg.string();
    o.tokens = 1024;
    o.command = "bench_trace";
    plain = o.out = dir / "deflate0.h5";
    trace::write_synthetic_trace(o);
    o.deflate_level = 6;
    deflated = o.out = dir / "deflate6.h5";
    trace::write_synthetic_trace(o);
  }
  ~Files() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const Files& files() {
  static const Files f;
  return f;
}

fs::path file_of(const std::string& which) {
  if (which == "user") return std::getenv("FP8SIM_BENCH_TRACE");
  return which == "deflate6" ? files().deflated : files().plain;
}

uint64_t stored_bytes(const trace::TraceReader& r) {
  uint64_t b = 0;
  for (const trace::TensorInfo& t : r.tensors()) b += t.bytes();
  return b;
}

// state.range(0): OpenMP threads (0 = all); `direct`: the chunk decoder, else H5Dread.
void read_all(benchmark::State& state, const std::string& which, bool direct) {
  const trace::TraceReader r(file_of(which));
  const int threads = state.range(0) ? static_cast<int>(state.range(0)) : omp_get_num_procs();
  omp_set_num_threads(threads);
  ::setenv("FP8SIM_HDF5_DIRECT", direct ? "1" : "0", 1);
  for (auto _ : state) {
    for (const trace::TensorInfo& t : r.tensors()) {
      const trace::TensorData d = r.read(t);
      benchmark::DoNotOptimize(d.f32.data());
      benchmark::DoNotOptimize(d.bits.data());
    }
  }
  ::unsetenv("FP8SIM_HDF5_DIRECT");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stored_bytes(r)));
  state.counters["threads"] = threads;
  state.counters["file_MB"] = static_cast<double>(r.file_bytes()) / 1e6;
}

// The same file read with pread into one buffer: what reading its bytes costs with nothing
// decoded. Bytes/s are the file's bytes.
void plain_read(benchmark::State& state, const std::string& which) {
  const fs::path p = file_of(which);
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) {
    state.SkipWithError("cannot open the trace");
    return;
  }
  const uint64_t n = fs::file_size(p);
  std::vector<char> buf(4u << 20);
  for (auto _ : state) {
    for (uint64_t off = 0; off < n;) {
      const ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
      if (got <= 0) break;
      off += static_cast<uint64_t>(got);
    }
    benchmark::DoNotOptimize(buf.data());
  }
  ::close(fd);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

// Value-initialising vectors of every tensor's size, as a read's output buffers are made: the part
// of a read that is neither I/O nor decoding.
void zero_fill(benchmark::State& state, const std::string& which) {
  const trace::TraceReader r(file_of(which));
  for (auto _ : state) {
    for (const trace::TensorInfo& t : r.tensors()) {
      std::vector<char> v(t.bytes());
      benchmark::DoNotOptimize(v.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * stored_bytes(r)));
}

void register_file(const std::string& which) {
  const std::string w = which;
  benchmark::RegisterBenchmark(("read_direct/" + w).c_str(), [w](benchmark::State& s) { read_all(s, w, true); })
      ->Arg(1)
      ->Arg(0)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("read_h5dread/" + w).c_str(), [w](benchmark::State& s) { read_all(s, w, false); })
      ->Arg(1)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("plain_read/" + w).c_str(), [w](benchmark::State& s) { plain_read(s, w); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("zero_fill/" + w).c_str(), [w](benchmark::State& s) { zero_fill(s, w); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_file("deflate0");
  register_file("deflate6");
  if (const char* u = std::getenv("FP8SIM_BENCH_TRACE"); u && *u) register_file("user");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
