// fp8sim::Json parse and write speed on committed result documents (Google Benchmark):
// reports/h200/compare.json (1.6 MB) and calibration.json (240 kB).
//   build/tests/bench/bench_json [--benchmark_filter=...]
// Bytes counted: the document's text (read when parsing, written when dumping).
#include <benchmark/benchmark.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "sim/common/json.hpp"

namespace {

const std::string& text(const std::string& name) {
  static std::string texts[2];
  std::string& t = texts[name == "compare" ? 0 : 1];
  if (t.empty()) {
    std::ifstream in(std::string(FP8SIM_SOURCE_DIR) + "/reports/h200/" + name + ".json", std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    t = ss.str();
  }
  return t;
}

void parse(benchmark::State& state, const std::string& name) {
  const std::string& t = text(name);
  for (auto _ : state) benchmark::DoNotOptimize(fp8sim::Json::parse(t));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size()));
}

void dump(benchmark::State& state, const std::string& name) {
  const fp8sim::Json j = fp8sim::Json::parse(text(name));
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string out = j.dump();
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// For reference: nlohmann's own value (ordered_json), parsed and written with its own writer
// (whose layout is not fp8sim's: see docs/dev-notes/libraries.md).
void nlohmann_parse(benchmark::State& state, const std::string& name) {
  const std::string& t = text(name);
  for (auto _ : state) benchmark::DoNotOptimize(nlohmann::ordered_json::parse(t));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size()));
}

void nlohmann_dump(benchmark::State& state, const std::string& name) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text(name));
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string out = j.dump(2);
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

BENCHMARK_CAPTURE(parse, compare, std::string("compare"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(parse, calibration, std::string("calibration"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(dump, compare, std::string("compare"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(dump, calibration, std::string("calibration"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(nlohmann_parse, compare, std::string("compare"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(nlohmann_dump, compare, std::string("compare"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
