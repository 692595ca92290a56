// The command line's contract on inputs, sizes and exit classes (docs/cli-contract.md): opening
// a trace is linear in its steps, JSON inputs are regular files of bounded size, every size is
// checked in one place, usage errors exit 2 and bad data 1, an incomplete optimizer window says
// what it leaves out, filters that match nothing name what exists, and the CPU subcommands start
// without the CUDA libraries.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;
using test::run;
using test::RunOptions;
using test::RunResult;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A bad run: the exit status, exactly one line on stderr naming the command, no signal.
void expect_error(const RunResult& r, int code, const std::string& needle, const std::string& what) {
  EXPECT_FALSE(r.timed_out) << what;
  EXPECT_EQ(r.signal, 0) << what;
  EXPECT_EQ(r.exit_code, code) << what << "\n" << r.err;
  EXPECT_EQ(lines(r.err), 1) << what << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("fp8sim", 0), 0u) << what << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << what << ": wanted '" << needle << "' in\n" << r.err;
  EXPECT_EQ(r.err.find("internal"), std::string::npos) << what << "\n" << r.err;
}

// A trace of `steps` step groups without tensors (what a recorder writing every step of a long run
// produces, minus the data).
std::string empty_steps_trace(int steps) {
  const std::string path = test::temp_dir() + "/steps" + std::to_string(steps) + ".h5";
  trace::TraceHeader h;
  h.producer = "tests/test_cli_regressions.cpp";
  trace::TraceWriter w(path, h);
  for (int s = 0; s < steps; ++s) {
    trace::StepInfo st;
    st.step = s;
    w.set_step(st);
  }
  w.commit();
  return path;
}

TEST(CliRegressions, OpeningATraceIsLinearInItsSteps) {
  // 8000 step groups: linear opening takes well under a second; the quadratic scan took minutes
  // (4000 took 14.7 s on the machine that found it). The bound leaves a slow, loaded CI machine
  // a 20x margin.
  const std::string path = empty_steps_trace(8000);
  RunOptions o;
  o.timeout_s = 30;
  const RunResult r = run({"info", path, "--summary"}, o);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 10.0) << "opening 8000 step groups took " << r.seconds << " s";
}

TEST(CliRegressions, JsonInputsMustBeRegularFilesOfBoundedSize) {
  const std::string dir = test::temp_dir();
  const std::string fifo = dir + "/in.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir + "/huge.json";  // sparse: 65 MiB of nothing, over the 64 MiB cap
  std::ofstream{huge}.close();
  fs::resize_file(huge, uint64_t{65} << 20);
  const std::string T = test::sample_trace();
  RunOptions o;
  o.timeout_s = 20;        // a FIFO read would block forever
  o.rlimit_as_mib = 2048;  // /dev/zero read to the end would take every byte of memory
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  std::vector<Case> cases;
  for (const std::string& bad : {fifo, std::string("/dev/zero")}) {
    cases.push_back({{"analyze", T, "--recipe", bad}, "regular file"});
    cases.push_back({{"speed", "--calibration", bad}, "regular file"});
    cases.push_back({{"memory", "--validate", bad}, "regular file"});
    cases.push_back({{"bench", "--from", bad, "--json", dir + "/b.json"}, "regular file"});
    cases.push_back({{"bench", "--peers", bad}, "regular file"});
  }
  cases.push_back({{"speed", "--calibration", huge}, "MiB"});
  cases.push_back({{"analyze", T, "--recipe", huge}, "MiB"});
  cases.push_back({{"memory", "--model", huge}, "MiB"});
  for (const auto& c : cases) {
    std::string what;
    for (const auto& a : c.args) what += a + " ";
    const RunResult r = run(c.args, o);
    expect_error(r, 1, c.needle, what);
    EXPECT_LT(r.seconds, 10.0) << what;
  }
  EXPECT_FALSE(fs::exists(dir + "/b.json"));
}

TEST(CliRegressions, SizesAreValidatedInOnePlaceForEveryCommand) {
  const std::vector<std::pair<std::string, std::string>> sizes = {{"--batch", "9223372036854775807"},
                                                                  {"--batch", "1099511627776"},
                                                                  {"--seq", "4611686018427387904"},
                                                                  {"--gpus", "9223372036854775807"},
                                                                  {"--batch", "18446744073709551616"},
                                                                  {"--seq", "-1"},
                                                                  {"--batch", "0"},
                                                                  {"--seq", "nan"}};
  for (const std::string cmd : {"memory", "speed", "report"}) {
    for (const auto& [opt, value] : sizes) {
      std::vector<std::string> args = {cmd};
      if (cmd == "memory") args.insert(args.end(), {"--model", "llama2-7b"});
      if (cmd == "report") args.insert(args.end(), {"--no-plots", "--out", test::temp_dir() + "/r"});
      args.insert(args.end(), {opt, value});
      const RunResult r = run(args);
      expect_error(r, 2, opt, cmd + " " + opt + " " + value);
      EXPECT_EQ(r.err.find("json:"), std::string::npos) << r.err;
    }
  }
  // speed's per-recipe batches go through the same check.
  expect_error(run({"speed", "--batch", "bf16=2,coat=1099511627776"}), 2, "--batch", "per-recipe batch");
  // A product that is too large, each factor within its limit.
  expect_error(run({"memory", "--model", "llama2-7b", "--batch", "1048576", "--seq", "1048576"}), 2, "tokens",
               "batch x seq");
}

TEST(CliRegressions, UsageErrorsExitTwoAndBadDataOne) {
  const std::string dir = test::temp_dir();
  const std::string T = test::sample_trace();
  // Usage: a model that does not exist, an empty --out, token counts the GEMMs cannot take.
  for (const std::string cmd : {"memory", "speed", "report"}) {
    std::vector<std::string> args = {cmd, "--model", "nope"};
    if (cmd == "report") args.insert(args.end(), {"--no-plots", "--out", dir + "/r"});
    expect_error(run(args), 2, "unknown model 'nope'", cmd + " --model nope");
  }
  expect_error(run({"report", "--no-plots", "--out", ""}), 2, "--out", "report --out ''");
  expect_error(run({"speed", "--seq", "5"}), 2, "multiple of 16", "speed --seq 5");
  // An optimizer-state spec with delayed scaling: a usage error, not an internal message.
  expect_error(run({"optim", T, "--recipe", "m=e4m3:tensor:delayed=4,v=fp32", "--no-table1"}), 2, "delayed",
               "optim delayed");
  // Data: a recipe file whose content is wrong (its base names no recipe) exits 1.
  const std::string recipe = dir + "/r.json";
  std::ofstream(recipe) << R"({"base": "nonsense", "rules": [{"spec": "none"}]})";
  expect_error(run({"analyze", T, "--recipe", recipe}), 1, "nonsense", "bad recipe base");
  // No command at all: usage on stderr, nothing on stdout, status 2.
  const RunResult r = run({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("usage: fp8sim"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("commands:"), std::string::npos) << r.err;
  // --help is not an error: usage on stdout, status 0.
  const RunResult h = run({"--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("usage: fp8sim"), std::string::npos);
}

// A copy of the sample trace without one grad inside the grad window.
std::string trace_without_one_grad(std::string* dropped_name) {
  const trace::TraceReader r(test::sample_trace());
  const auto [first, last] = *r.header().grad_window;
  const int64_t hole = first + 1 <= last ? first + 1 : first;
  std::string victim;
  for (const auto& t : r.tensors())
    if (t.step == hole && t.role == trace::Role::Grad) {
      victim = t.name;
      break;
    }
  const std::string path = test::temp_dir() + "/holey.h5";
  trace::TraceWriter w(path, r.header());
  for (const auto& s : r.steps()) w.set_step(s);
  for (const auto& t : r.tensors())
    if (!(t.step == hole && t.role == trace::Role::Grad && t.name == victim)) w.write(t, r.read(t));
  w.commit();
  *dropped_name = victim;
  return path;
}

TEST(CliRegressions, OptimSaysWhichWindowParametersItLeavesOut) {
  std::string victim;
  const std::string path = trace_without_one_grad(&victim);
  ASSERT_FALSE(victim.empty());
  const std::string json = test::temp_dir() + "/optim.json";
  const RunResult r = run({"optim", path, "--no-table1", "--json", json});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(victim), std::string::npos) << r.err;
  const Json doc = Json::parse(test::file_content(json));
  const Json* dropped = doc.at("window").find("dropped_params");
  ASSERT_TRUE(dropped && dropped->is_array());
  ASSERT_EQ(dropped->size(), 1u);
  EXPECT_EQ(dropped->as_array()[0].at("name").as_string(), victim);
  // The complete sample leaves nothing out and warns about nothing.
  const RunResult full = run({"optim", test::sample_trace(), "--no-table1"});
  EXPECT_EQ(full.exit_code, 0);
  EXPECT_EQ(full.err.find("warning"), std::string::npos) << full.err;
}

TEST(CliRegressions, InfoFiltersThatMatchNothingNameWhatExists) {
  const std::string T = test::sample_trace();
  // Exit 1, as analyze's --step naming a step the trace does not hold.
  expect_error(run({"info", T, "--step", "1"}), 1, "295", "--step 1");
  expect_error(run({"info", T, "--op", "nope"}), 1, "linear", "--op nope");
  expect_error(run({"info", T, "--layer", "99"}), 1, "layers", "--layer 99");
  expect_error(run({"info", T, "--name", "no-such-tensor"}), 1, "no-such-tensor", "--name");
  expect_error(run({"info", T, "--step", "295", "--role", "exp_avg", "--op", "silu_input"}), 1, "together",
               "empty combination");
  // A filter that matches prints as before.
  const RunResult ok = run({"info", T, "--step", "295", "--role", "weight"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(CliRegressions, CpuCommandsStartUnderAHalfGigabyteAddressSpaceLimit) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer needs more address space than the limit under test";
#endif
  // The CUDA libraries (cuBLASLt alone maps more than this) are loaded only by commands that
  // need a GPU; memory, cast, info and speed from a calibration start without them.
  RunOptions o;
  o.rlimit_as_mib = 512;
  const RunResult m = run({"memory", "--model", "llama2-7b"}, o);
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(run({"cast", "1.5"}, o).exit_code, 0);
  EXPECT_EQ(run({"info", test::sample_trace(), "--summary"}, o).exit_code, 0);
  EXPECT_EQ(run({"speed"}, o).exit_code, 0);
}

// A copy of the data folders a run finds by name (models, recipes, the default calibration), so
// that a run pointed at them through FP8SIM_SOURCE_DIR may try to overwrite them.
std::string copied_source_dir() {
  const fs::path src = fs::path(test::sample_trace()).parent_path().parent_path();
  const fs::path dst = fs::path(test::temp_dir()) / "src";
  fs::create_directories(dst / "reports" / "h200");
  fs::copy(src / "models", dst / "models", fs::copy_options::recursive);
  fs::copy(src / "recipes", dst / "recipes", fs::copy_options::recursive);
  fs::copy(src / "traces", dst / "traces", fs::copy_options::recursive);
  fs::copy_file(src / "reports" / "h200" / "calibration.json", dst / "reports" / "h200" / "calibration.json");
  return dst.string();
}

TEST(CliRegressions, InputsFoundByNameOrDefaultAreNeverOverwritten) {
  const std::string S = copied_source_dir();
  RunOptions o;
  o.env["FP8SIM_SOURCE_DIR"] = S;
  const std::string T = S + "/traces/" + fs::path(test::sample_trace()).filename().string();
  struct Case {
    std::vector<std::string> args;
    std::string victim;
  };
  const std::vector<Case> cases = {
      {{"synth", "--model", "tiny-llama", "--out", S + "/models/tiny-llama.json"}, S + "/models/tiny-llama.json"},
      {{"memory", "--model", "llama2-7b", "-q", "--json", S + "/models/llama2-7b.json"}, S + "/models/llama2-7b.json"},
      {{"analyze", T, "--recipe", "coat", "-q", "--json", S + "/recipes/coat.json"}, S + "/recipes/coat.json"},
      {{"recipes", "-q", "--json", S + "/recipes/te.json"}, S + "/recipes/te.json"},
      {{"speed", "--recipes", "bf16", "-q", "--json", S + "/reports/h200/calibration.json"},
       S + "/reports/h200/calibration.json"},
  };
  for (const Case& c : cases) {
    const std::string before = test::file_content(c.victim);
    ASSERT_FALSE(before.empty()) << c.victim;
    expect_error(run(c.args, o), 2, "never writes over its inputs", c.args[0] + " over " + c.victim);
    EXPECT_EQ(test::file_content(c.victim), before) << c.victim;
    EXPECT_TRUE(test::temporaries_in(fs::path(c.victim).parent_path().string()).empty()) << c.victim;
  }
  // A report whose --out folder holds a recipe file the run reads: refused, the file kept.
  const std::string out = test::temp_dir() + "/rep";
  ASSERT_EQ(
      run({"report", T, "--model", "tiny-llama", "--recipes", "coat", "--no-plots", "-q", "--out", out}, o).exit_code,
      0);
  fs::copy_file(S + "/recipes/coat.json", out + "/mine.json");
  expect_error(
      run({"report", T, "--model", "tiny-llama", "--recipes", out + "/mine.json", "--no-plots", "-q", "--out", out}, o),
      2, "recipe file", "report --out holding a recipe");
  EXPECT_TRUE(fs::exists(out + "/mine.json"));
  // A folder validation whose output sits in the folder runs again: the folder's documents that
  // are not measurements (that output) are not inputs.
  const fs::path src = fs::path(test::sample_trace()).parent_path().parent_path();
  const std::string fw = test::temp_dir() + "/fw";
  fs::create_directories(fw);
  fs::copy_file(src / "reports" / "h200" / "frameworks" / "hf__1b-gqa.json", fw + "/hf__1b-gqa.json");
  for (int i = 0; i < 2; ++i) {
    const RunResult v = run({"memory", "--validate", fw, "-q", "--json", fw + "/validation.json"});
    EXPECT_TRUE(v.exit_code == 0 || v.exit_code == 1) << "run " << i << ": " << v.err;  // the verdict
    EXPECT_NO_THROW(Json::parse(test::file_content(fw + "/validation.json"))) << "run " << i;
  }
}

TEST(CliRegressions, FailedWritesAndUnwritableStreamsEndInOneLine) {
  const std::string dir = test::temp_dir();
  // The file-size limit under a trace being written: one line, status 1, no temporary, no crash
  // inside HDF5 (which closing such a file, or its teardown at exit, would cause).
  RunOptions small;
  small.rlimit_fsize = 100 * 1024;
  expect_error(run({"synth", "--out", dir + "/big.h5"}, small), 1, "File too large", "synth under ulimit -f");
  EXPECT_TRUE(test::temporaries_in(dir).empty());
  EXPECT_FALSE(fs::exists(dir + "/big.h5"));
  // Standard output that cannot take the tables: status 1 and a line on stderr.
  const std::string bin = test::fp8sim_binary();
  // (in a subshell: run_shell adds its own redirections after the command)
  const test::CommandResult full = test::run_shell("('" + bin + "' memory --model llama2-7b > /dev/full)");
  EXPECT_EQ(full.exit_code, 1) << full.err;
  EXPECT_NE(full.err.find("cannot write to standard output"), std::string::npos) << full.err;
  // ... and it writes none of its files either.
  const test::CommandResult both =
      test::run_shell("('" + bin + "' memory --model llama2-7b --json " + dir + "/m.json > /dev/full)");
  EXPECT_EQ(both.exit_code, 1) << both.err;
  EXPECT_NE(both.err.find("cannot write to standard output"), std::string::npos) << both.err;
  EXPECT_FALSE(fs::exists(dir + "/m.json"));
  // A closed standard output: nothing lands in the run's output file (descriptor 1 is reused by
  // the next open() unless it is taken first).
  const test::CommandResult closed =
      test::run_shell("('" + bin + "' memory --model llama2-7b -q --json " + dir + "/c.json >&-)");
  EXPECT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_NO_THROW(Json::parse(test::file_content(dir + "/c.json")));
  // Standard error that cannot take the error line: the status still says it (no abort).
  EXPECT_EQ(test::run_shell("('" + bin + "' info " + dir + "/nonexistent.h5 2> /dev/full)").exit_code, 1);
  // --quiet with an output named /dev/stdout: the data still reach standard output.
  const RunResult q = run({"memory", "--model", "llama2-7b", "-q", "--json", "/dev/stdout"});
  EXPECT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NO_THROW(Json::parse(q.out)) << q.out.substr(0, 200);
}

TEST(CliRegressions, OddValuesGetTheRightStatus) {
  const std::string dir = test::temp_dir();
  const std::string T = test::sample_trace();
  expect_error(run({"quantize", "--spec", "e4m3:g16", "--in", dir + "/x.npy", "--threads", "100000"}), 2, "--threads",
               "quantize --threads 100000");
  expect_error(run({"analyze", T, "--threads", "100000"}), 2, "--threads", "analyze --threads 100000");
  expect_error(run({"accum", "--seed", "-1"}), 2, "--seed", "accum --seed -1");
  expect_error(run({"accum", "--k", ""}), 2, "--k", "accum --k ''");
  expect_error(run({"accum", "--k", "128,,256"}), 2, "empty entry", "accum --k 128,,256");
  expect_error(run({"synth", "--seed", "-1", "--out", dir + "/s.h5", "--dry-run"}), 2, "--seed", "synth --seed -1");
  // A recipe file that does not exist is a missing input (1); an unknown name is bad usage (2).
  expect_error(run({"analyze", T, "--recipe", dir + "/none.json"}), 1, "no such file", "missing recipe file");
  expect_error(run({"speed", "--recipes", "none.json"}), 1, "no such file", "speed: missing recipe file");
  expect_error(run({"analyze", T, "--recipe", "nope"}), 2, "unknown recipe", "unknown recipe name");
  // A value in a measurement file that the model refuses is bad data in that file (1), named so.
  Json m = Json::parse(test::file_content(
      (fs::path(T).parent_path().parent_path() / "reports" / "h200" / "memory_measured.json").string()));
  m["batch"] = 0;
  const std::string bad = dir + "/measured.json";
  std::ofstream(bad) << m.dump(1);
  expect_error(run({"memory", "--validate", bad}), 1, "measured.json", "measurement with batch 0");
  // A budget larger than any batch fp8sim models: the search stops at that limit, no error.
  const RunResult big = run({"memory", "--model", "tiny-llama", "--gpu-mem-gib", "100000", "--json", "-"});
  EXPECT_EQ(big.exit_code, 0) << big.err;
  EXPECT_EQ(Json::parse(big.out).at("max_batch").as_int(), int64_t{1} << 20);
  expect_error(run({"memory", "--model", "llama2-7b", "--gpu-mem-gib", "1e308"}), 2, "--gpu-mem-gib",
               "memory --gpu-mem-gib 1e308");
  expect_error(run({"cast", "--format", "bf17", "1"}), 2, "cast takes e4m3, e5m2, e2m1, e2m3 or e3m2",
               "cast --format bf17");
}

}  // namespace
}  // namespace fp8sim
