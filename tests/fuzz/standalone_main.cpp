// A libFuzzer-compatible driver for compilers without libFuzzer (gcc): runs every seed file
// given on the command line, then mutations of them for --seconds S (default 10), through
// LLVMFuzzerTestOneInput. Deterministic (--seed N). Exit 0 unless something other than
// fp8sim::Error escapes (which terminates with a non-zero status) or the process crashes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/trace_reader_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  std::vector<std::vector<uint8_t>> seeds;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::ifstream in(a, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "fuzz_trace_reader: cannot read seed %s\n", a.c_str());
        return 2;
      }
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "usage: fuzz_trace_reader [--seconds S] [--seed N] SEED_FILE...\n");
    return 2;
  }
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  fp8sim::fuzz::Mutator mut(seed);
  const auto start = std::chrono::steady_clock::now();
  size_t runs = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    const auto& s = seeds[runs % seeds.size()];
    const std::vector<uint8_t> m = mut.mutate(s);
    LLVMFuzzerTestOneInput(m.data(), m.size());
    ++runs;
  }
  std::printf("fuzz_trace_reader: %zu seeds + %zu mutated inputs in %.1f s, no crash\n", seeds.size(), runs, seconds);
  return 0;
}
