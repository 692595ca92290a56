// The distributed runs (sim/common/dist.hpp): the partition, the bytes ranks send, and the command
// line under mpirun (skipped where no MPI launcher or MPI module was built): the same output for
// every rank count, one error line for a failure on any rank, no output after a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <thread>

#include "sim/common/dist.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;

std::vector<uint64_t> loads(const std::vector<uint64_t>& cost, const std::vector<int>& owner, int ranks) {
  std::vector<uint64_t> l(static_cast<size_t>(ranks), 0);
  for (size_t i = 0; i < cost.size(); ++i) l[static_cast<size_t>(owner[i])] += cost[i];
  return l;
}

TEST(Partition, LargestFirstToTheLeastLoadedRank) {
  const std::vector<uint64_t> cost = {7, 10, 6, 9, 8, 5};
  const std::vector<int> owner = dist::partition(cost, 2);
  EXPECT_EQ(owner[1], 0);  // the largest goes to rank 0
  EXPECT_EQ(owner[3], 1);  // the next to the empty rank 1
  EXPECT_EQ(owner[4], 1);  // 8 to rank 1 (9 < 10)
  const std::vector<uint64_t> l = loads(cost, owner, 2);
  EXPECT_EQ(l[0] + l[1], 45u);
  EXPECT_LE(std::max(l[0], l[1]) - std::min(l[0], l[1]), 10u);  // within the largest item
}

TEST(Partition, DeterministicAndComplete) {
  std::vector<uint64_t> cost(1000);
  for (size_t i = 0; i < cost.size(); ++i) cost[i] = test::splitmix64(i) % 100000;
  for (int ranks : {1, 2, 3, 7, 16}) {
    const std::vector<int> a = dist::partition(cost, ranks), b = dist::partition(cost, ranks);
    EXPECT_EQ(a, b);
    for (int o : a) ASSERT_TRUE(o >= 0 && o < ranks);
    const std::vector<uint64_t> l = loads(cost, a, ranks);
    const uint64_t hi = *std::max_element(l.begin(), l.end()), lo = *std::min_element(l.begin(), l.end());
    EXPECT_LE(hi - lo, *std::max_element(cost.begin(), cost.end())) << ranks << " ranks";
  }
}

TEST(Partition, EqualCostsGoRoundTheRanksInItemOrder) {
  const std::vector<int> owner = dist::partition(std::vector<uint64_t>(7, 5), 3);
  EXPECT_EQ(owner, (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
  // Zero-cost items still spread (each counts as 1).
  EXPECT_EQ(dist::partition(std::vector<uint64_t>(4, 0), 2), (std::vector<int>{0, 1, 0, 1}));
}

TEST(Bytes, RoundTripAndTruncation) {
  dist::ByteWriter w;
  w.pod(int64_t{-3});
  w.str("layers.0.mlp");
  w.pods(std::vector<double>{1.5, -0.0, 1e300});
  w.pod(true);
  const std::string bytes = w.take();
  dist::ByteReader r(bytes);
  EXPECT_EQ(r.pod<int64_t>(), -3);
  EXPECT_EQ(r.str(), "layers.0.mlp");
  const std::vector<double> v = r.pods<double>();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(std::signbit(v[1]));
  EXPECT_EQ(v[2], 1e300);
  EXPECT_TRUE(r.pod<bool>());
  EXPECT_TRUE(r.done());
  const std::string cut = bytes.substr(0, bytes.size() - 12);
  dist::ByteReader t(cut);
  t.pod<int64_t>();
  t.str();
  EXPECT_THROW(t.pods<double>(), Error);
}

TEST(Exchange, OneProcessRunsTheWorkAndLetsItsErrorsThrough) {
  ASSERT_EQ(dist::size(), 1);
  EXPECT_EQ(dist::exchange([] { return std::string("abc"); }), std::vector<std::string>{"abc"});
  EXPECT_THROW(dist::exchange([]() -> std::string { throw UsageError("bad"); }), UsageError);
  const dist::Outcome o = dist::finish(1, "failed");
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.message, "failed");
}

// In one process the job-wide counter is a plain counter: each fetch_add returns the value before
// it, and every counter starts at 0.
TEST(Counter, OneProcessHandsOutConsecutiveNumbers) {
  ASSERT_EQ(dist::size(), 1);
  const std::unique_ptr<dist::Counter> c = dist::make_counter();
  EXPECT_EQ(c->fetch_add(1), 0u);
  EXPECT_EQ(c->fetch_add(3), 1u);
  EXPECT_EQ(c->fetch_add(1), 4u);
  EXPECT_EQ(dist::make_counter()->fetch_add(1), 0u);
}

TEST(ProcessAge, CountsFromTheProcessStartAndGrows) {
  // This test process started before the test ran, and not more than the suite's time limit ago.
  const double a = dist::process_age_seconds();
  EXPECT_GT(a, 0.0);
  EXPECT_LT(a, 3600.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(dist::process_age_seconds(), a + 0.03);  // ticks of 10 ms
  EXPECT_EQ(dist::startup_seconds(), 0.0) << "no job start-up in a single process";
}

// ---- the command line under mpirun ------------------------------------------------------------

std::string q(const std::string& s) { return "'" + s + "'"; }

class Mpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(FP8SIM_MPIEXEC).empty()) GTEST_SKIP() << "no MPI launcher was found at build time";
    if (!fs::exists(fs::path(test::fp8sim_binary()).parent_path() / "libfp8sim_mpi.so"))
      GTEST_SKIP() << "this build has no MPI module";
  }
  // mpirun -np N fp8sim ARGS (as root where CI runs; Open MPI's own allocations at MPI_Init are
  // never freed, so the sanitizer build's leak check is off for the ranks). A job that hangs is
  // killed after 300 s (exit 124).
  test::CommandResult mpirun(int n, const std::string& args) {
    const std::string cmd =
        "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
        "FP8SIM_PROGRESS=0 ASAN_OPTIONS=detect_leaks=0 timeout 300 " +
        q(FP8SIM_MPIEXEC) + " --quiet --oversubscribe -np " + std::to_string(n) + " " + q(test::fp8sim_binary()) + " " +
        args;
    return test::run_shell(cmd);
  }
  static std::string synthetic(const std::string& dir) {
    const std::string t = dir + "/synth.h5";
    const test::CommandResult r = test::run_fp8sim({"synth", "--model", "tiny-llama", "--layers", "2", "--out", t});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return t;
  }
};

size_t error_lines(const std::string& err) {
  size_t n = 0;
  for (size_t at = err.find("fp8sim "); at != std::string::npos; at = err.find("fp8sim ", at + 1)) ++n;
  return n;
}

TEST_F(Mpirun, AnalyzeGivesTheSameBytesForEveryRankCount) {
  const std::string dir = test::temp_dir();
  for (const std::string& trace : {test::sample_trace(), synthetic(dir)}) {
    const std::string one = dir + "/one.json";
    const test::CommandResult plain = test::run_fp8sim({"analyze", trace, "--json", one, "--recipe", "coat"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    for (int n = 1; n <= 4; ++n) {
      const std::string out = dir + "/np" + std::to_string(n) + ".json";
      const test::CommandResult r = mpirun(n, "analyze " + q(trace) + " --recipe coat --json " + q(out));
      ASSERT_EQ(r.exit_code, 0) << n << " ranks: " << r.err;
      EXPECT_EQ(test::file_content(out), test::file_content(one)) << n << " ranks, " << trace;
      EXPECT_EQ(r.out, plain.out) << n << " ranks: the tables differ (or another rank printed)";
      fs::remove(out);
    }
  }
}

// --timing accounts for the time outside the ranks' work: when it began (MPI's start-up part of that
// time) and how long exchanging and writing took after it.
TEST_F(Mpirun, AnalyzeTimingSaysWhereTheTimeOutsideTheWorkWent) {
  const std::string dir = test::temp_dir(), out = dir + "/t.json";
  const test::CommandResult r =
      mpirun(2, "analyze " + q(test::sample_trace()) + " --recipe te --no-gemm --timing --json " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string key = "rank 0: the work began ";
  const size_t at = r.err.find(key);
  ASSERT_NE(at, std::string::npos) << r.err;
  const double began = std::stod(r.err.substr(at + key.size()));
  const size_t up = r.err.find(" s after the process started (", at);
  ASSERT_NE(up, std::string::npos) << r.err;
  const double startup = std::stod(r.err.substr(up + 30));
  EXPECT_GE(startup, 0.0);
  EXPECT_GE(began, startup) << "the start-up is part of the time before the work";
  EXPECT_LT(began, 300.0);
  EXPECT_NE(r.err.find("the latest rank's at "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the results were exchanged and written in "), std::string::npos) << r.err;
}

TEST_F(Mpirun, OptimGivesTheSameBytesForEveryRankCount) {
  const std::string dir = test::temp_dir(), one = dir + "/one.json", trace = test::sample_trace();
  // Stochastic rounding keys on each parameter's place in the window, whichever rank replays it.
  const std::string opts = " --table1-lowbit --rounding stochastic --seed 3 --json ";
  const test::CommandResult plain =
      test::run_fp8sim({"optim", trace, "--table1-lowbit", "--rounding", "stochastic", "--seed", "3", "--json", one});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (int n = 2; n <= 4; ++n) {
    const std::string out = dir + "/np.json";
    const test::CommandResult r = mpirun(n, "optim " + q(trace) + opts + q(out));
    ASSERT_EQ(r.exit_code, 0) << n << " ranks: " << r.err;
    EXPECT_EQ(test::file_content(out), test::file_content(one)) << n << " ranks";
    EXPECT_EQ(r.out, plain.out) << n << " ranks";
  }
}

TEST_F(Mpirun, ReportRunsWithRankZeroWriting) {
  const std::string dir = test::temp_dir();
  const test::CommandResult r = mpirun(3, "report --no-plots --recipes bf16,coat --out " + q(dir + "/r"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/r/report.json"));
  EXPECT_EQ(test::listing(dir), (std::vector<std::string>{"r", "r/report.html", "r/report.json", "r/report.md"}));
}

TEST_F(Mpirun, ACommandThatDoesNotDistributeIsOneUsageError) {
  const test::CommandResult r = mpirun(2, "cast --format e4m3 1.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(error_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("fp8sim cast: error: cast runs in one process"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(Mpirun, BadUsageOnEveryRankIsOneLine) {
  const test::CommandResult r = mpirun(3, "analyze " + q(test::sample_trace()) + " --recipe no-such-recipe");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(error_lines(r.err), 1u) << r.err;
}

TEST_F(Mpirun, AFailureOnRankZeroBeforeAnyExchangeEndsEveryRank) {
  // Rank 0 alone creates the report's folder; here it cannot (its parent is a file), while the
  // other ranks are already in the analysis. --keep-going must not keep them waiting for it.
  const std::string dir = test::temp_dir();
  { std::ofstream(dir + "/file") << "x"; }
  const test::CommandResult r =
      mpirun(3, "report --no-plots --keep-going --recipes bf16,coat --out " + q(dir + "/file/r"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(error_lines(r.err), 1u) << r.err;
  EXPECT_EQ(test::listing(dir), std::vector<std::string>{"file"});
}

TEST_F(Mpirun, TwoOutputsOnOneFileAreOneUsageErrorOnEveryRank) {
  const std::string dir = test::temp_dir(), out = q(dir + "/a");
  const test::CommandResult r = mpirun(2, "analyze " + q(test::sample_trace()) + " --json " + out + " --md " + out);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(error_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("name the same file"), std::string::npos) << r.err;
}

// The byte offset of chunk (0, ...) of a dataset and its stored size.
TEST_F(Mpirun, ACorruptTensorOnOneRankEndsTheJobWithoutOutput) {
  const std::string dir = test::temp_dir(), trace = synthetic(dir);
  // One dataset's data corrupted: the file opens everywhere, and only the rank that owns that
  // tensor reads it (its Fletcher-32 checksum fails).
  const std::string ds = "/steps/step_000100/weight/layers.1.mlp.up_proj.weight";
  test::damage_first_chunk(trace, ds);
  const test::CommandResult plain = test::run_fp8sim({"analyze", trace, "--no-gemm", "--json", dir + "/p.json"});
  ASSERT_EQ(plain.exit_code, 1) << plain.err;
  for (int n : {2, 3}) {
    const std::string out = dir + "/np.json";
    const test::CommandResult r = mpirun(n, "analyze " + q(trace) + " --no-gemm --json " + q(out));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(error_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("layers.1.mlp.up_proj.weight"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(test::temporaries_in(dir).empty());
  }
}

}  // namespace
}  // namespace fp8sim
