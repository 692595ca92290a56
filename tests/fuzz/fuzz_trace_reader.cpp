// libFuzzer target for the trace reader. Build (clang):
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
//         -DFP8SIM_FUZZ=ON -DFP8SIM_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo   (one line)
//   cmake --build build-fuzz --target fuzz_trace_reader
//   build-fuzz/tests/fuzz/fuzz_trace_reader -max_total_time=30 -max_len=400000 CORPUS_DIR tests/data
// Seed corpus: tests/data/trace_*.h5 (small traces written by h5py). Without clang/libFuzzer,
// tests/fuzz/CMakeLists.txt links this file with standalone_main.cpp instead, and the suite runs
// it over the seeds with a bounded number of mutations (ctest -R fuzz_trace_reader).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/trace_reader_fuzz.hpp"

namespace {

// The file each input is written to, under $TMPDIR, removed when the process exits.
struct InputFile {
  std::string path;
  InputFile() {
    const char* t = std::getenv("TMPDIR");
    path = std::string(t && *t ? t : "/tmp") + "/fp8sim_fuzz_trace_" + std::to_string(::getpid()) + ".h5";
  }
  ~InputFile() { std::remove(path.c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const InputFile file;
  fp8sim::fuzz::exercise_trace_reader(data, size, file.path);
  return 0;
}
