// `fp8sim compare` and `fp8sim bench` without a GPU (what CI can check): usage errors, one-line
// messages, the no-GPU / no-CUDA refusal, the plan writer, and the pure-C++ parts of both
// libraries (peer merging, target evaluation, Markdown, compare's summary, ulp distance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "sim/backend/backend.hpp"
#include "sim/bench/bench.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/compare/compare.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_cases.hpp"
#include "sim/gemm/tc_gemm.hpp"
#include "sim/optim/adamw.hpp"
#include "sim/speed/calibrate.hpp"
#include "tests/support/test_util.hpp"
#ifdef FP8SIM_HAVE_CUDA
#include "gpu/common/device.hpp"
#endif

namespace fp8sim {
namespace {

bool have_gpu() {
#ifdef FP8SIM_HAVE_CUDA
  return gpu::device_info().available;
#else
  return false;
#endif
}

const std::string kTrace = std::string(FP8SIM_SOURCE_DIR) + "/traces/tiny-llama-s300.h5";

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

TEST(CliCompare, WithoutAGpuSaysSoAndFails) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present: the GPU run is covered by scripts/device/gpu.sh";
  const auto r = test::run_fp8sim({"compare", kTrace});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  EXPECT_TRUE(r.err.find("GPU") != std::string::npos || r.err.find("CUDA") != std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliCompare, BadInput) {
  auto r = test::run_fp8sim({"compare"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no TRACE"), std::string::npos) << r.err;
  r = test::run_fp8sim({"compare", kTrace, "--ops", "cast,nope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown op 'nope'"), std::string::npos) << r.err;
  r = test::run_fp8sim({"compare", "/nonexistent/trace.h5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("nonexistent"), std::string::npos) << r.err;
  const std::string junk = test::temp_dir() + "/junk.h5";
  write_file_atomic(junk, "not an hdf5 file");
  r = test::run_fp8sim({"compare", junk});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  r = test::run_fp8sim({"compare", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
}

TEST(CliBench, WritePlanNeedsNoGpu) {
  const std::string dir = test::temp_dir();
  auto r = test::run_fp8sim({"bench", "--write-plan", dir + "/plan.json", "--smoke", "--ops", "quantize,gemm"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json plan = Json::parse(read_text_file(dir + "/plan.json"));
  const auto& ks = plan.at("kernels").as_array();
  ASSERT_FALSE(ks.empty());
  EXPECT_EQ(ks[0].at("op").as_string(), "copy");  // the ceiling is always measured
  bool quant = false, gemm = false;
  for (const auto& k : ks) {
    quant |= k.at("op").as_string() == "quantize";
    gemm |= k.at("op").as_string() == "gemm";
    EXPECT_NE(k.at("op").as_string(), "adamw") << "--ops restricts the plan";
  }
  EXPECT_TRUE(quant && gemm);
  EXPECT_TRUE(plan.at("no_compile").as_bool()) << "the smoke plan skips torch.compile";
  EXPECT_EQ(plan.at("gemm_cooldown_s").as_number(), 0.0) << "no GEMM cool-down in the smoke plan";
  // The cool-down travels to bench_peers.py through the plan, so both sides idle alike.
  r = test::run_fp8sim({"bench", "--write-plan", dir + "/plan2.json", "--ops", "gemm", "--gemm-cooldown", "1.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(read_text_file(dir + "/plan2.json")).at("gemm_cooldown_s").as_number(), 1.5);
  // So does the launch lead (bench_peers.py keeps the GPU busy as long before each timed call).
  EXPECT_EQ(plan.at("launch_lead_us").as_number(), bench::kLaunchLeadUs);
  EXPECT_GT(bench::kLaunchLeadUs, 0.0);
  r = test::run_fp8sim({"bench", "--write-plan", dir + "/plan4.json", "--ops", "copy", "--launch-lead", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(read_text_file(dir + "/plan4.json")).at("launch_lead_us").as_number(), 0.0);
  // The full plan times a bf16 cast at the smallest shape the bf16 quantizers are timed at (their
  // reference at that size: a kernel with no group arithmetic moving the same kind of traffic).
  r = test::run_fp8sim({"bench", "--write-plan", dir + "/plan3.json", "--ops", "cast,quantize"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json plan3 = Json::parse(read_text_file(dir + "/plan3.json"));
  auto elems = [](const Json& k) {
    double n = 1;
    for (const auto& d : k.at("shape").as_array()) n *= d.as_number();
    return n;
  };
  double smallest_quant = 0;
  std::vector<double> cast_bf16;
  for (const auto& k : plan3.at("kernels").as_array()) {
    if (k.at("dtype").as_string() != "bf16") continue;
    if (k.at("op").as_string() == "quantize" && (smallest_quant == 0 || elems(k) < smallest_quant))
      smallest_quant = elems(k);
    if (k.at("op").as_string() == "cast") cast_bf16.push_back(elems(k));
  }
  ASSERT_GT(smallest_quant, 0);
  EXPECT_NE(std::find(cast_bf16.begin(), cast_bf16.end(), smallest_quant), cast_bf16.end())
      << "no bf16 cast at the quantizers' smallest shape";
}

TEST(CliBench, BadInputAndNoGpu) {
  auto r = test::run_fp8sim({"bench", "--ops", "quantize,bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown op 'bogus'"), std::string::npos) << r.err;
  r = test::run_fp8sim({"bench", "--reps", "0"});
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_fp8sim({"bench", "--flush", "sideways"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--flush must be read or write"), std::string::npos) << r.err;
  EXPECT_TRUE(one_line(r.err)) << r.err;
  r = test::run_fp8sim({"bench", "--gemm-cooldown", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gemm-cooldown must be between 0 and 60"), std::string::npos) << r.err;
  EXPECT_TRUE(one_line(r.err)) << r.err;
  for (const char* bad : {"-1", "nan", "100001", "abc"}) {
    r = test::run_fp8sim({"bench", "--launch-lead", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_TRUE(one_line(r.err)) << r.err;
  }
  r = test::run_fp8sim({"bench", "--launch-lead", "-1"});
  EXPECT_NE(r.err.find("--launch-lead must be between 0 and 100000"), std::string::npos) << r.err;
  r = test::run_fp8sim({"bench", "--gemm-search", "-3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gemm-search must be 0 or more"), std::string::npos) << r.err;
  EXPECT_TRUE(one_line(r.err)) << r.err;
  r = test::run_fp8sim({"bench", "--from", "/nonexistent/bench.json", "--md", "/tmp/x.md"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  r = test::run_fp8sim({"bench", "--from", "/nonexistent/bench.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--from needs --json or --md"), std::string::npos) << r.err;
  r = test::run_fp8sim({"bench", "--peers", "/nonexistent/peers.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  // A trace where a JSON document belongs: the error names the option and the file, in plain text.
  const std::string& trace = kTrace;
  for (const char* opt : {"--from", "--peers"}) {
    r = test::run_fp8sim({"bench", opt, trace, "--md", test::temp_dir() + "/x.md"});
    EXPECT_EQ(r.exit_code, 1) << opt;
    EXPECT_NE(r.err.find(std::string(opt) + " '" + trace + "': json: "), std::string::npos) << r.err;
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_TRUE(std::all_of(r.err.begin(), r.err.end(), [](char c) { return c == '\n' || (c >= 0x20 && c < 0x7F); }))
        << r.err;
  }
  if (!have_gpu()) {
    r = test::run_fp8sim({"bench", "--smoke"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(r.err.find("GPU") != std::string::npos || r.err.find("CUDA") != std::string::npos) << r.err;
  }
}

Json kernel(const std::string& key, const std::string& op, double ms, const std::string& extra_key = "") {
  Json k = Json::object();
  k["kernel"] = key;
  k["key"] = key;
  k["op"] = op;
  k["status"] = "ok";
  k["median_ms"] = ms;
  if (!extra_key.empty()) {
    Json a = Json::array();
    a.push_back(extra_key);
    k["extra_peer_keys"] = a;
  }
  return k;
}

Json peer(const std::string& key, const std::string& name, double ms, const std::string& status = "ok") {
  Json p = Json::object();
  p["key"] = key;
  p["peer"] = name;
  p["status"] = status;
  if (status == "ok") p["median_ms"] = ms;
  return p;
}

TEST(CliBench, PlanTimesTheQuantizersAtLlamaActivationShapesAndCastTranspose) {
  const std::string dir = test::temp_dir();
  auto r = test::run_fp8sim({"bench", "--write-plan", dir + "/plan.json", "--ops", "quantize,cast-transpose"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json plan = Json::parse(read_text_file(dir + "/plan.json"));
  std::set<std::string> keys;
  for (const auto& k : plan.at("kernels").as_array()) keys.insert(k.at("key").as_string());
  // Every quantizer the targets name at every activation shape of Llama-2-7B and -13B.
  for (const char* shape : {"8192x4096", "8192x5120", "8192x11008", "8192x13824"}) {
    for (const char* q : {"e4m3:g128|bf16|", "e4m3:g16:scale=bf16:eps=1e-10|bf16|", "e4m3:g32:scale=e8m0|bf16|",
                          "e4m3:row|bf16|", "e4m3:b128x128|bf16|"})
      EXPECT_TRUE(keys.count(std::string("quantize|") + q + shape)) << q << shape;
    EXPECT_TRUE(keys.count(std::string("quantize|e4m3:tensor|bf16|") + shape + "|group-scaling")) << shape;
    EXPECT_TRUE(keys.count(std::string("quantize|e4m3:tensor:delayed=1024,max|bf16|") + shape + "|delayed")) << shape;
  }
  EXPECT_TRUE(keys.count("cast-transpose|e4m3:tensor:delayed=1024,max|bf16|8192x4096|delayed"));
  EXPECT_TRUE(keys.count("cast-transpose|e4m3:tensor|bf16|8192x4096|jit"));
}

TEST(CliBench, CastTransposeIsHeldToEightyFivePercentOfItsCopy) {
  const std::string dir = test::temp_dir();
  Json doc = Json::object();
  doc["command"] = "fp8sim bench --json x";
  Json ks = Json::array();
  for (double frac : {0.86, 0.84}) {
    Json k = kernel("cast-transpose|e4m3:tensor|bf16|4x4|jit" + std::to_string(frac), "cast-transpose", 0.04);
    k["bytes"] = 1.3e8;
    k["ceiling_gbps"] = 4000.0;
    k["ceiling_kind"] = bench::kSameBytesCeiling;
    k["fraction_of_ceiling"] = frac;
    Json peers = Json::array();
    peers.push_back(peer(k.at("key").as_string(), "torch.compile", 0.045));
    k["peers"] = peers;
    ks.push_back(k);
  }
  doc["kernels"] = ks;
  write_file_atomic(dir + "/in.json", doc.dump(2));
  auto r = test::run_fp8sim({"bench", "--from", dir + "/in.json", "--json", dir + "/out.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json out = Json::parse(read_text_file(dir + "/out.json"));
  const auto& k = out.at("kernels").as_array();
  EXPECT_TRUE(k[0].at("targets").at("copy_bandwidth").at("met").as_bool());
  EXPECT_FALSE(k[1].at("targets").at("copy_bandwidth").at("met").as_bool());
  EXPECT_FALSE(k[0].at("targets").find("vs_torch_compile")) << "the peer is shown, with no target";
}

TEST(CliBench, FromReevaluatesTheTargetsOfASavedRunWithoutAGpu) {
  // A saved bench document (as --json writes it), with a quantize kernel whose torch.compile peer
  // is so fast that 1.25x it would need more than the copy bandwidth.
  const std::string dir = test::temp_dir();
  Json doc = Json::object();
  doc["command"] = "fp8sim bench --json x";
  doc["gemm_cooldown_s"] = 2.0;
  doc["peers_gemm_cooldown_s"] = 2.0;
  Json k = kernel("quantize|e4m3:g128|bf16|4x4", "quantize", 0.138);
  k["bytes"] = 5.468e8;
  k["ceiling_gbps"] = 4260.0;
  k["fraction_of_ceiling"] = 5.468e8 / 0.138e-3 / 1e9 / 4260.0;
  Json peers = Json::array();
  peers.push_back(peer(k.at("key").as_string(), "torch.compile", 0.157));
  k["peers"] = peers;
  Json ks = Json::array();
  ks.push_back(k);
  doc["kernels"] = ks;
  write_file_atomic(dir + "/in.json", doc.dump(2));
  auto r =
      test::run_fp8sim({"bench", "--from", dir + "/in.json", "--json", dir + "/out.json", "--md", dir + "/out.md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json out = Json::parse(read_text_file(dir + "/out.json"));
  const Json& t = out.at("kernels").as_array()[0].at("targets");
  EXPECT_TRUE(t.at("copy_bandwidth").at("met").as_bool());     // 93% >= 90%
  EXPECT_FALSE(t.at("vs_torch_compile").at("met").as_bool());  // 1.14x < 1.25x
  EXPECT_FALSE(t.at("vs_torch_compile").at("reachable").as_bool());
  EXPECT_EQ(out.at("targets_summary").at("met").as_int(), 1);
  const std::string md = read_text_file(dir + "/out.md");
  EXPECT_NE(md.find("needs 102% of copy"), std::string::npos) << md;
  EXPECT_NE(md.find("re-evaluated from this run's JSON"), std::string::npos) << md;
  EXPECT_NE(md.find("each GEMM starts after 2 s idle (the peers' file: 2)"), std::string::npos) << md;
  // Not a bench document: one line, exit 1, nothing written.
  write_file_atomic(dir + "/plan.json", "{\"kernelz\": []}");
  r = test::run_fp8sim({"bench", "--from", dir + "/plan.json", "--md", dir + "/bad.md"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("not a bench document"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad.md"));
}

TEST(CliBench, FromMergesAPeersFileTimedSeparately) {
  // A saved run and a peers file (scripts/bench_peers.py's form) for one of its kernels: --from
  // --peers merges them, records the file and its settings, drops the peers of an earlier file,
  // compares the settings with the document's run, and evaluates the targets.
  const std::string dir = test::temp_dir();
  Json doc = Json::object();
  doc["command"] = "fp8sim bench --json x";
  Json k = kernel("quantize|mxfp4|bf16|8192x4096", "quantize", 0.0284);
  k["bytes"] = 8.4e7;
  k["ceiling_gbps"] = 4290.0;
  k["fraction_of_ceiling"] = 8.4e7 / 0.0284e-3 / 1e9 / 4290.0;
  // a kernel whose peer came from an earlier file: the new file has none for it
  Json old = kernel("quantize|e4m3:g128|bf16|8192x4096", "quantize", 0.0310);
  Json old_peers = Json::array();
  old_peers.push_back(peer(old.at("key").as_string(), "torch.compile", 0.0323));
  old["peers"] = old_peers;
  old["peer"] = "torch.compile";
  old["peer_median_ms"] = 0.0323;
  old["speedup_vs_peer"] = 0.0323 / 0.0310;
  Json ks = Json::array();
  ks.push_back(k);
  ks.push_back(old);
  doc["kernels"] = ks;
  doc["launch_lead_us"] = 500.0;
  write_file_atomic(dir + "/in.json", doc.dump(2));
  Json peers = Json::object();
  Json es = Json::array();
  es.push_back(peer("quantize|mxfp4|bf16|8192x4096", "torch.compile", 0.1631));
  peers["entries"] = es;
  peers["torch"] = "2.11.0";
  peers["launch_lead_us"] = 500.0;
  write_file_atomic(dir + "/peers.json", peers.dump(2));
  auto r = test::run_fp8sim({"bench", "--from", dir + "/in.json", "--peers", dir + "/peers.json", "--json",
                             dir + "/out.json", "--md", dir + "/out.md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json out = Json::parse(read_text_file(dir + "/out.json"));
  const Json& k0 = out.at("kernels").as_array()[0];
  EXPECT_EQ(k0.at("peer").as_string(), "torch.compile");
  EXPECT_NEAR(k0.at("speedup_vs_peer").as_number(), 0.1631 / 0.0284, 1e-9);
  EXPECT_TRUE(k0.at("targets").at("vs_torch_compile").at("met").as_bool());
  EXPECT_EQ(out.at("peers_file").as_string(), dir + "/peers.json");
  EXPECT_EQ(out.at("peers_torch").as_string(), "2.11.0");
  const Json& k1 = out.at("kernels").as_array()[1];  // the earlier file's peer is gone with it
  EXPECT_FALSE(k1.find("peer")) << k1.dump(2);
  EXPECT_FALSE(k1.find("speedup_vs_peer")) << k1.dump(2);
  EXPECT_EQ(r.err.find("launch lead"), std::string::npos) << "the document's lead equals the peers': " << r.err;
  // The peers' settings are compared with the document's run: a document timed without the lead.
  doc["launch_lead_us"] = 0.0;
  write_file_atomic(dir + "/in0.json", doc.dump(2));
  r = test::run_fp8sim(
      {"bench", "--from", dir + "/in0.json", "--peers", dir + "/peers.json", "--json", dir + "/out0.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("launch lead"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("incomplete"), std::string::npos) << "no 'complete' key is not a partial file: " << r.err;
  // A peers file whose run stopped before the end of its plan is merged, with a warning.
  peers["complete"] = false;
  write_file_atomic(dir + "/partial.json", peers.dump(2));
  r = test::run_fp8sim(
      {"bench", "--from", dir + "/in.json", "--peers", dir + "/partial.json", "--json", dir + "/outp.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("'" + dir + "/partial.json' is incomplete"), std::string::npos) << r.err;
  EXPECT_TRUE(Json::parse(read_text_file(dir + "/outp.json")).at("kernels").as_array()[0].find("peer"));
  peers["complete"] = true;  // a finished run's file: no warning
  write_file_atomic(dir + "/done.json", peers.dump(2));
  r = test::run_fp8sim(
      {"bench", "--from", dir + "/in.json", "--peers", dir + "/done.json", "--json", dir + "/outd.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("incomplete"), std::string::npos) << r.err;
  // COAT's agreement is measured beside the kernels: refused with --from (usage, nothing written).
  r = test::run_fp8sim({"bench", "--from", dir + "/in.json", "--coat-states", dir, "--json", dir + "/coat.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(one_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("--coat-states"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/coat.json"));
}

TEST(BenchLib, MergePeersPicksTheFastestSuccessfulPeerAndEvaluatesTargets) {
  Json json_doc = Json::object();
  Json ks = Json::array();
  Json q = kernel("quantize|a", "quantize", 0.10);
  q["fraction_of_ceiling"] = 0.93;
  q["bytes"] = 3.0e8;          // 3e8 bytes in 0.15 / 1.25 ms is 2500 GB/s ...
  q["ceiling_gbps"] = 4000.0;  // ... 62.5% of this ceiling: reachable
  ks.push_back(q);
  Json q2 = kernel("quantize|b", "quantize", 0.30);
  q2["fraction_of_ceiling"] = 0.80;
  q2["bytes"] = 4.0e8;  // 4e8 bytes in 0.12 / 1.25 ms is 4167 GB/s: 104% of 4000
  q2["ceiling_gbps"] = 4000.0;
  ks.push_back(q2);
  Json a = kernel("adamw|coat|1", "adamw", 1.0, "adamw|fp32|1");
  a["spec"] = "coat";
  ks.push_back(a);
  Json gm = kernel("gemm|x", "gemm", 2.0);
  gm["x_format"] = "e4m3";
  ks.push_back(gm);
  json_doc["kernels"] = ks;
  Json peers = Json::object();
  Json es = Json::array();
  es.push_back(peer("quantize|a", "torch-eager", 1.0));
  es.push_back(peer("quantize|a", "torch.compile", 0.15));
  es.push_back(peer("quantize|a", "torch.compile-broken", 0.01, "error: boom"));
  es.push_back(peer("adamw|fp32|1", "torch.optim.AdamW(fused)", 1.5));
  es.push_back(peer("adamw|coat|1", "coat-kernel", 2.5));
  es.push_back(peer("quantize|b", "torch.compile", 0.12));
  peers["entries"] = es;
  bench::BenchDoc doc = bench::BenchDoc::from_json(json_doc);
  EXPECT_EQ(bench::merge_peers(doc, bench::Peers::from_json(peers)), 3);  // gemm has no peer
  const auto& k0 = doc.kernels[0];
  EXPECT_EQ(k0.peer, "torch.compile");
  EXPECT_DOUBLE_EQ(k0.speedup_vs_peer.value(), 1.5);
  EXPECT_EQ(k0.peers.value().size(), 3u);  // failures are listed, never chosen
  bench::evaluate_targets(doc);
  const auto& t0 = doc.kernels[0].targets.value();
  EXPECT_TRUE(t0.copy_bandwidth.value().met.value());
  EXPECT_TRUE(t0.vs_torch_compile.value().met.value());  // 1.5 >= 1.25
  EXPECT_NEAR(t0.vs_torch_compile.value().needs_fraction_of_ceiling.value(), 0.625, 1e-12);
  EXPECT_TRUE(t0.vs_torch_compile.value().reachable.value());
  const auto& tb = doc.kernels[1].targets.value();
  EXPECT_FALSE(tb.copy_bandwidth.value().met.value());    // 0.80 < 0.90
  EXPECT_FALSE(tb.vs_torch_compile.value().met.value());  // 0.4 < 1.25
  EXPECT_NEAR(tb.vs_torch_compile.value().needs_fraction_of_ceiling.value(),
              4.0e8 / (0.12 / 1.25 * 1e-3) / 1e9 / 4000.0, 1e-12);
  EXPECT_FALSE(tb.vs_torch_compile.value().reachable.value());
  const auto& t1 = doc.kernels[2].targets.value();
  EXPECT_FALSE(t1.vs_torch_fused.value().met.value());  // 1.5 < 1.8
  EXPECT_TRUE(t1.vs_coat_kernel.value().met.value());   // 2.5 >= 2
  const auto& t2 = doc.kernels[3].targets.value();
  EXPECT_FALSE(t2.vs_scaled_mm.value().met.has_value());  // no peer: unmeasured, not met
  const auto& s = doc.targets_summary.value();
  EXPECT_EQ(s.met, 3);
  EXPECT_EQ(s.missed, 3);
  EXPECT_EQ(s.unmeasured, 1);
  const std::string md = bench::render_markdown(doc);
  EXPECT_NE(md.find("vs_torch_compile MISSED (needs 104% of copy)"), std::string::npos) << md;
  EXPECT_NE(md.find("| kernel |"), std::string::npos);
  EXPECT_NE(md.find("MISSED"), std::string::npos);
}

TEST(BenchLib, SameBytesCeilingAndOlderRunsRenderInTheirOwnColumns) {
  // A run with the same-bytes ceiling: both fractions shown, the target says which ceiling it
  // used. A run from before (no ceiling_kind: its fraction was against the large copy): the
  // fraction goes under "of large copy" and the same-bytes column stays empty.
  Json json_doc = Json::object();
  Json ks = Json::array();
  Json now = kernel("quantize|new", "quantize", 0.03);
  now["ceiling_kind"] = "same-bytes copy";
  now["ceiling_gbps"] = 4000.0;
  now["fraction_of_ceiling"] = 0.91;
  now["large_copy_gbps"] = 4300.0;
  now["fraction_of_large_copy"] = 0.85;
  ks.push_back(now);
  Json old = kernel("quantize|old", "quantize", 0.03);
  old["ceiling_gbps"] = 4300.0;
  old["fraction_of_ceiling"] = 0.77;
  ks.push_back(old);
  json_doc["kernels"] = ks;
  bench::BenchDoc doc = bench::BenchDoc::from_json(json_doc);
  bench::evaluate_targets(doc);
  const auto& t0 = doc.kernels[0].targets.value().copy_bandwidth.value();
  EXPECT_TRUE(t0.met.value());
  EXPECT_NE(t0.what.find("same-run device copy of as many bytes"), std::string::npos) << t0.what;
  const auto& t1 = doc.kernels[1].targets.value().copy_bandwidth.value();
  EXPECT_FALSE(t1.met.value());
  EXPECT_EQ(t1.what.find("as many bytes"), std::string::npos);
  const auto rows = bench::table_rows(doc);
  const auto& h = bench::table_header();
  const auto col = [&](const char* name) {
    return static_cast<size_t>(std::find(h.begin(), h.end(), std::string(name)) - h.begin());
  };
  ASSERT_LT(col("of same-bytes copy"), h.size());
  ASSERT_LT(col("of large copy"), h.size());
  EXPECT_EQ(rows[0][col("of same-bytes copy")], "91%");
  EXPECT_EQ(rows[0][col("of large copy")], "85%");
  EXPECT_EQ(rows[1][col("of same-bytes copy")], "-");
  EXPECT_EQ(rows[1][col("of large copy")], "77%");
}

TEST(BenchLib, LaunchLeadIsReportedForNewRunsAndNamedAbsentInOldOnes) {
  bench::BenchDoc doc;
  doc.l2_flush = "256 MiB read";
  doc.launch_lead_us = 500.0;
  doc.peers_launch_lead_us = "not recorded";  // a peers file from before the lead
  doc.kernels.push_back(bench::BenchKernel::from_json(kernel("quantize|x", "quantize", 0.03)));
  bench::evaluate_targets(doc);
  std::string md = bench::render_markdown(doc);
  EXPECT_NE(md.find("- launch lead: a 500 us GPU-side wait"), std::string::npos)
      << md;  // a document measured with an idle wait
  EXPECT_NE(md.find("(the peers' file: \"not recorded\")"), std::string::npos) << md;
  doc.launch_lead_flushes = 8;
  md = bench::render_markdown(doc);
  EXPECT_NE(md.find("- launch lead: the L2 flush runs 8 times before each timed launch, at least 500 us"),
            std::string::npos)
      << md;
  doc.launch_lead_us.reset();  // a document measured without a lead: no launch_lead_us
  doc.launch_lead_flushes.reset();
  md = bench::render_markdown(doc);
  EXPECT_NE(md.find("- launch lead: none"), std::string::npos) << md;
  EXPECT_EQ(md.find("GPU-side wait"), std::string::npos) << md;
  EXPECT_EQ(md.find("flush runs"), std::string::npos) << md;
}

TEST(CompareLib, UlpDistance) {
  EXPECT_EQ(compare::ulp_distance(1.0f, 1.0f), 0u);
  EXPECT_EQ(compare::ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)), 1u);
  EXPECT_EQ(compare::ulp_distance(0.0f, -0.0f), 1u);
  EXPECT_EQ(compare::ulp_distance(-1.0f, std::nextafter(-1.0f, -2.0f)), 1u);
  EXPECT_EQ(compare::ulp_distance(NAN, NAN), 0u);
  EXPECT_EQ(compare::ulp_distance(std::nextafter(0.0f, 1.0f), std::nextafter(0.0f, -1.0f)), 3u);
}

TEST(CompareLib, NoGpuBackendIsAnError) {
  const std::unique_ptr<gpu::Backend> none = gpu::no_gpu_backend("no GPU in this test");
  EXPECT_FALSE(none->available());
  EXPECT_EQ(none->why_not(), "no GPU in this test");
  EXPECT_EQ(none->device().why_not, "no GPU in this test");
  try {
    none->require("compare needs one");
    ADD_FAILURE() << "require() passed without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no GPU in this test (compare needs one)");
  }
  EXPECT_THROW(none->run_bench(bench::BenchOptions{}), Error);
  EXPECT_THROW(none->measure_kernels({}, {}, {}), Error);
  compare::CompareOptions o;
  o.trace_path = kTrace;
  EXPECT_THROW(compare::compare_trace(o, *none), Error);
  o.ops = {"nope"};
  EXPECT_THROW(compare::compare_trace(o, *none), UsageError);
}

TEST(CompareLib, SummaryAndMarkdownFromADocument) {
  compare::CompareResult doc;
  doc.command = "fp8sim compare t.h5";
  doc.machine = Json::object();
  compare::QuantizeEntry a;
  a.spec = "e4m3:g128";
  a.elements = 100;
  a.differing_codes = 0;
  a.passed = true;
  doc.ops.push_back(a);
  compare::QuantizeEntry b = a;
  b.differing_codes = 3;
  b.passed = false;
  doc.ops.push_back(b);
  doc.summary.entries = 2;
  doc.summary.failed = 1;
  doc.summary.passed = false;
  const auto rows = compare::summary_rows(doc);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][2], "2");    // entries
  EXPECT_EQ(rows[0][3], "200");  // elements
  EXPECT_EQ(rows[0][4], "3");    // differing codes
  EXPECT_EQ(rows[0].back(), "FAIL (1)");
  const std::string md = compare::render_markdown(doc);
  EXPECT_NE(md.find("1 of 2 comparisons passed"), std::string::npos) << md;
  EXPECT_NE(md.find("Failures"), std::string::npos);
}

}  // namespace
}  // namespace fp8sim

namespace fp8sim {
namespace {

// A "GPU" that is the CPU reference itself (and can be told to corrupt one result): exercises
// compare_trace end to end on the committed trace without a GPU, and shows that a wrong code, a
// wrong parameter bit or a wrong GEMM scale layout is caught.
class CpuAsGpu final : public gpu::Backend {
 public:
  bool corrupt_quantize = false, corrupt_transposed = false, corrupt_adamw = false, corrupt_gemm = false;
  std::string name = "the CPU reference";
  gpu::DeviceStatus device() override { return {.available = true, .name = name}; }
  Json machine() override { return Json::object(); }
  bench::BenchDoc run_bench(const bench::BenchOptions&) override { throw Error("CpuAsGpu: no bench"); }
  speed::Calibration measure_kernels(const std::vector<speed::KernelOp>&, const speed::MeasureSettings&,
                                     const std::function<void(double, double)>&) override {
    throw Error("CpuAsGpu: no kernel timing");
  }
  void cast_f32(const float* x, size_t n, const CastOptions& o, uint8_t* out) override {
    cast_f32_to_fp8(x, out, n, o);
  }
  void cast_bf16(const uint16_t* x, size_t n, const CastOptions& o, uint8_t* out) override {
    cast_bf16_to_fp8(x, out, n, o);
  }
  QuantizedTensor quantize(const void* x, InputDtype dt, std::span<const int64_t> shape, const QuantSpec& spec,
                           const QuantizeOptions& opts) override {
    QuantizedTensor q = quantize_any(x, dt, shape, spec, opts);
    if (corrupt_quantize && !q.codes.empty()) q.codes[q.codes.size() / 2] ^= 1;
    return q;
  }
  QuantizedTensor quantize_transposed(const void* x, InputDtype dt, std::span<const int64_t> shape,
                                      const QuantSpec& spec, const QuantizeOptions& opts,
                                      std::vector<uint8_t>& codes_t) override {
    QuantizedTensor q = quantize(x, dt, shape, spec, opts);
    codes_t = transpose_codes(q.codes, shape.empty() ? 1 : shape.back());
    if (corrupt_transposed && !codes_t.empty()) codes_t[codes_t.size() / 3] ^= 1;
    ++transposed_calls;
    return q;
  }
  int transposed_calls = 0;
  std::vector<float> dequantize(const QuantizedTensor& q) override { return fp8sim::dequantize(q); }
  void adamw_fp32(float* p, const float* g, float* m, float* v, size_t n, const optim::AdamwStepConsts& c) override {
    optim::adamw_step_fp32(p, g, m, v, n, c);
    if (corrupt_adamw) p[0] = std::nextafter(p[0], 1e30f);
  }
  void adamw_lowp(float* p, const float* g, optim::ParamOptimState& st, const optim::AdamwStepConsts& c,
                  uint64_t param_index, uint64_t step, bool fused) override {
    if (fused) optim::lowp_adamw_step_grouped(p, g, st, c, param_index, step);
    else {
      optim::LowpScratch s;
      optim::lowp_adamw_step(p, g, st, c, param_index, step, s);
    }
    if (corrupt_adamw) p[0] = std::nextafter(p[0], 1e30f);
  }
  // Y from the request's codes and scales, in double, with the scale layouts written out again.
  // What the GPU computes: the tensor-core model of cuBLASLt's GEMMs (sim/gemm/tc_gemm.hpp).
  gpu::GemmOutcome gemm(const gpu::GemmRequest& r) override {
    gpu::GemmOutcome out;
    out.supported = true;
    out.y.assign(static_cast<size_t>(r.m * r.n), 0.0f);
    gemm::TcGemmConfig c;
    c.x_format = r.x_format;
    c.w_format = r.w_format;
    c.scaling = r.scaling;
    c.fast_accum = r.fast_accum;
    c.y_format = r.y_bf16 ? Format::BF16 : Format::FP32;
    std::vector<float> ws = r.w_scales;
    if (corrupt_gemm)
      for (auto& v : ws) v *= 2.0f;
    const auto* x = r.scaling == 0 ? reinterpret_cast<const uint8_t*>(r.x_bf16.data()) : r.x_codes.data();
    const auto* w = r.scaling == 0 ? reinterpret_cast<const uint8_t*>(r.w_bf16.data()) : r.w_codes.data();
    gemm::tc_gemm(x, w, r.x_scales.data(), ws.data(), out.y.data(), r.m, r.n, r.k, c);
    return out;
  }
};

// `calibrate --update` refuses a file measured on another GPU before timing anything: one
// calibration holds one GPU's times under its device name.
TEST(CalibrateLib, UpdateFromAnotherGpusFileIsRefusedBeforeTiming) {
  CpuAsGpu gpu;
  speed::CalibrateOptions o;
  o.update_from = std::string(FP8SIM_SOURCE_DIR) + "/reports/h200/calibration.json";
  o.families = {"adamw_bf16m"};
  std::vector<std::string> notes;
  try {
    speed::calibrate(o, gpu, notes);
    FAIL() << "an H200 calibration was updated from another GPU";
  } catch (const UsageError& e) {
    FAIL() << "a usage error: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NVIDIA H200"), std::string::npos) << what;
    EXPECT_NE(what.find("the CPU reference"), std::string::npos) << what;
    EXPECT_EQ(what.find("no kernel timing"), std::string::npos) << what;
  }
  // The file's own GPU gets as far as timing (which this stand-in cannot do).
  gpu.name = "NVIDIA H200";
  try {
    speed::calibrate(o, gpu, notes);
    FAIL() << "CpuAsGpu timed kernels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel timing"), std::string::npos) << e.what();
  }
}

TEST(CompareLib, EndToEndOnTheSampleTraceWithTheCpuAsTheGpu) {
  CpuAsGpu ops;
  compare::CompareOptions o;
  o.trace_path = kTrace;
  o.max_tensors = 1;
  const compare::CompareResult doc = compare::compare_trace(o, ops);
  const compare::CompareSummary& s = doc.summary;
  EXPECT_TRUE(s.passed) << compare::render_markdown(doc);
  for (const char* op : {"cast", "quantize", "adamw", "gemm"}) {
    ASSERT_TRUE(s.ops.count(op)) << op << " did not run";
    EXPECT_GT(s.ops.at(op).entries, 0) << op;
  }
  int transposed = 0;
  for (const auto& e : doc.ops) {
    const Json j = compare::entry_json(e);
    ASSERT_TRUE(j.find("elements") && j.at("elements").as_int() > 0) << j.dump(-1);
    ASSERT_TRUE(j.find("differing_codes")) << j.dump(-1);
    if (const Json* t = j.find("differing_transposed_codes")) {
      EXPECT_EQ(t->as_int(), 0) << j.dump(-1);
      ++transposed;
    }
  }
  // Every per-tensor FP8 spec (plain and delayed) goes through the cast-transpose kernel.
  EXPECT_GT(transposed, 0);
  EXPECT_EQ(transposed, ops.transposed_calls);
}

TEST(CompareLib, CatchesACorruptCodeParameterOrGemmScale) {
  compare::CompareOptions o;
  o.trace_path = kTrace;
  o.max_tensors = 1;
  {
    CpuAsGpu ops;
    ops.corrupt_quantize = true;
    o.ops = {"quantize"};
    const compare::CompareResult doc = compare::compare_trace(o, ops);
    EXPECT_GT(doc.summary.failed, 0);
  }
  {
    CpuAsGpu ops;
    ops.corrupt_transposed = true;  // only the transposed layout is wrong
    o.ops = {"quantize"};
    const compare::CompareResult doc = compare::compare_trace(o, ops);
    EXPECT_GT(ops.transposed_calls, 0);
    EXPECT_EQ(doc.summary.failed, ops.transposed_calls);
  }
  {
    CpuAsGpu ops;
    ops.corrupt_adamw = true;
    o.ops = {"adamw"};
    const compare::CompareResult doc = compare::compare_trace(o, ops);
    EXPECT_EQ(doc.summary.failed, doc.summary.entries);
  }
  {
    CpuAsGpu ops;
    ops.corrupt_gemm = true;
    o.ops = {"gemm"};
    const compare::CompareResult doc = compare::compare_trace(o, ops);
    // Every FP8 configuration scales W: a doubled W scale fails them all (BF16 has no scale).
    int64_t fp8_entries = 0, fp8_failed = 0;
    for (const auto& entry : doc.ops) {
      const auto& e = std::get<compare::GemmEntry>(entry);
      if (e.config == "bf16") continue;
      ++fp8_entries;
      fp8_failed += e.passed ? 0 : 1;
    }
    EXPECT_GT(fp8_entries, 0);
    EXPECT_EQ(fp8_failed, fp8_entries);
  }
}

}  // namespace
}  // namespace fp8sim

namespace fp8sim {
namespace {

// The whole random and adversarial GEMM suite through compare, with the tensor-core model as the
// "GPU" (which the H200 matches bit for bit, tests/test_gemm_tc_gpu.cpp): every output meets the
// ideal product's derived tolerance, subnormal-heavy and same-sign cases included.
TEST(CompareLib, GemmSuiteMeetsTheDerivedTolerance) {
  CpuAsGpu ops;
  compare::CompareOptions o;
  o.trace_path = kTrace;
  o.ops = {"gemm"};
  o.max_tensors = 1;
  o.gemm_suite = true;
  const compare::CompareResult doc = compare::compare_trace(o, ops);
  int64_t suite = 0;
  for (const auto& e : doc.ops) {
    const auto* g = std::get_if<compare::GemmEntry>(&e);
    ASSERT_NE(g, nullptr);
    if (g->tensor.rfind("suite", 0) != 0) continue;
    ++suite;
    EXPECT_TRUE(g->passed) << g->config << " " << g->tensor << ": " << g->to_json().dump(-1);
    EXPECT_TRUE(g->model_compared) << g->config << " " << g->tensor;
  }
  EXPECT_EQ(suite, static_cast<int64_t>(gemm::tc_gemm_suite().size()));
}

}  // namespace
}  // namespace fp8sim
