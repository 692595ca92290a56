#pragma once
// What one fuzz input does to the trace reader, shared by the libFuzzer target
// (tests/fuzz/fuzz_trace_reader.cpp) and the bounded mutation test that runs in every build
// (tests/test_trace_fuzz.cpp). The contract under test: whatever the bytes, TraceReader either
// works or throws fp8sim::Error; it never crashes, hangs, or throws anything else.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sim/common/check.hpp"
#include "sim/trace/trace.hpp"

namespace fp8sim::fuzz {

// Writes `data` to `path`, opens it as a trace and reads up to `max_tensors` tensors (at most
// `max_bytes` in total). Returns true when the file was accepted as a trace. fp8sim::Error is the
// expected way to fail and is swallowed; any other exception propagates to the caller.
inline bool exercise_trace_reader(const uint8_t* data, size_t size, const std::string& path, size_t max_tensors = 64,
                                  uint64_t max_bytes = uint64_t{64} << 20) {
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  try {
    trace::TraceReader r(path);
    size_t n = 0;
    uint64_t bytes = 0;
    for (const auto& t : r.tensors()) {
      if (n++ >= max_tensors || bytes + t.bytes() > max_bytes) break;
      bytes += t.bytes();
      try {
        const trace::TensorData d = r.read(t);
        (void)trace::count_nonfinite(d);
      } catch (const Error&) {
        // A damaged dataset: the other datasets may still be readable.
      }
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A small structure-unaware mutator: bit flips, byte sets to boundary values, block copies,
// truncation, insertion and deletion. Deterministic for a given seed.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::vector<uint8_t> mutate(const std::vector<uint8_t>& in) {
    std::vector<uint8_t> v = in;
    const int ops = 1 + static_cast<int>(rng_() % 4);
    for (int i = 0; i < ops && !v.empty(); ++i) {
      const size_t at = pick_offset(v.size());
      switch (rng_() % 7) {
        case 0:
          v[at] ^= static_cast<uint8_t>(1u << (rng_() % 8));
          break;
        case 1: {
          static const uint8_t kVals[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE};
          v[at] = kVals[rng_() % std::size(kVals)];
          break;
        }
        case 2:
          v[at] = static_cast<uint8_t>(rng_());
          break;
        case 3:
          v.resize(at);
          break;   // truncate
        case 4: {  // insert a few random bytes
          const size_t k = 1 + rng_() % 8;
          std::vector<uint8_t> ins(k);
          for (auto& b : ins) b = static_cast<uint8_t>(rng_());
          v.insert(v.begin() + static_cast<long>(at), ins.begin(), ins.end());
          break;
        }
        case 5: {  // delete a few bytes
          const size_t k = std::min<size_t>(v.size() - at, 1 + rng_() % 16);
          v.erase(v.begin() + static_cast<long>(at), v.begin() + static_cast<long>(at + k));
          break;
        }
        case 6: {  // overwrite with a copy of another block (plausible-looking structure)
          const size_t from = rng_() % v.size();
          const size_t k = std::min({v.size() - at, v.size() - from, size_t{1} + rng_() % 64});
          std::copy_n(in.begin() + static_cast<long>(std::min(from, in.size() - 1)),
                      std::min(k, in.size() - std::min(from, in.size() - 1)), v.begin() + static_cast<long>(at));
          break;
        }
      }
    }
    return v;
  }

  // Mutations aimed at the region where HDF5 keeps its metadata (the first bytes and the file's
  // end, where v110 writers put object headers and B-tree/chunk-index blocks).
  size_t pick_offset(size_t size) {
    if (size == 0) return 0;
    const uint64_t r = rng_() % 4;
    if (r == 0) return rng_() % std::min<size_t>(size, 4096);
    if (r == 1) return size - 1 - rng_() % std::min<size_t>(size, 8192);
    return rng_() % size;
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

}  // namespace fp8sim::fuzz
