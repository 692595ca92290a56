// How fp8sim writes its outputs and how an interrupted run ends (docs/cli-contract.md):
// regular files replaced atomically, devices / FIFOs / sockets written in place, links followed,
// "-" for standard output, no output over an input or over another output, nothing left by a
// failed or interrupted run (its temporaries, its children, the folders it made), stale
// temporaries of dead runs removed, --quiet, report's section failures and --keep-going.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/common/json.hpp"
#include "sim/common/npy.hpp"
#include "sim/trace/trace.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;
using test::Background;
using test::run;
using test::RunOptions;
using test::RunResult;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += a + " ";
  return s;
}

void expect_error(const RunResult& r, int code, const std::string& needle, const std::string& what) {
  EXPECT_EQ(r.signal, 0) << what;
  EXPECT_EQ(r.exit_code, code) << what << "\n" << r.err;
  EXPECT_EQ(lines(r.err), 1) << what << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << what << ": wanted '" << needle << "' in\n" << r.err;
}

bool is_symlink(const std::string& p) { return fs::is_symlink(fs::symlink_status(p)); }

// Inputs every output test can use, in a fresh folder: a trace copy, a .npy, a raw f32 file.
struct Fixture {
  std::string dir = test::temp_dir();
  std::string trace = dir + "/t.h5";
  std::string npy = dir + "/x.npy";
  std::string raw = dir + "/x.f32";
  Fixture() {
    fs::copy_file(test::sample_trace(), trace);
    std::vector<float> x(4096);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i)) * 3.0f;
    write_npy(npy, NpyDtype::F32, {32, 128}, x.data(), x.size() * 4);
    std::ofstream(raw, std::ios::binary).write(reinterpret_cast<const char*>(x.data()), 4096 * 4);
  }
  // One command per subcommand that writes a file, with OUT where the output goes.
  std::vector<std::vector<std::string>> writers(const std::string& out) const {
    return {{"info", trace, "--summary", "--json", out},
            {"memory", "--model", "llama2-7b", "--json", out},
            {"speed", "--json", out},
            {"cast", "--in", raw, "--out", out},
            {"quantize", "--spec", "e4m3:g128", "--in", npy, "--out", out},
            {"analyze", trace, "--recipe", "bf16", "--no-gemm", "--json", out},
            {"optim", trace, "--no-table1", "--json", out},
            {"bench", "--write-plan", out}};
  }
};

TEST(CliOutputs, ASymlinkToACharacterDeviceIsWrittenThroughNeverReplaced) {
  Fixture f;
  const std::string link = f.dir + "/null-link";
  fs::create_symlink("/dev/null", link);
  for (const auto& args : f.writers(link)) {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << joined(args) << "\n" << r.err;
    EXPECT_TRUE(is_symlink(link)) << joined(args) << " replaced the link";
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
  }
  EXPECT_TRUE(test::temporaries_in(f.dir).empty());
}

TEST(CliOutputs, ACharacterDeviceNodeIsWrittenInPlace) {
  Fixture f;
  const std::string node = f.dir + "/null-node";
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs privileges";
  for (const auto& args : f.writers(node)) {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << joined(args) << "\n" << r.err;
    EXPECT_TRUE(fs::is_character_file(node)) << joined(args) << " replaced the device node";
  }
}

// Reads a FIFO in a child process (so a writer that never comes cannot block the test).
pid_t start_fifo_reader(const std::string& fifo, const std::string& copy) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(20);
    std::ifstream in(fifo, std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
    ::_exit(0);
  }
  return pid;
}

TEST(CliOutputs, AFifoReaderGetsTheWholeOutput) {
  Fixture f;
  const std::string fifo = f.dir + "/pipe", copy = f.dir + "/copy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const pid_t reader = start_fifo_reader(fifo, copy);
  const RunResult r = run({"memory", "--model", "llama2-7b", "--json", fifo});
  int st = 0;
  ::waitpid(reader, &st, 0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the FIFO was replaced";
  const Json doc = Json::parse(test::file_content(copy));
  EXPECT_TRUE(doc.contains("peak_gib"));
}

TEST(CliOutputs, AUnixSocketIsConnectedToAndWritten) {
  Fixture f;
  const std::string path = f.dir + "/sock";
  const int srv = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(srv, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(srv, 1), 0);
  std::string got;
  std::thread server([&] {
    pollfd p{srv, POLLIN, 0};
    if (::poll(&p, 1, 20000) <= 0) return;
    const int c = ::accept(srv, nullptr, nullptr);
    char buf[65536];
    for (ssize_t n; (n = ::read(c, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    ::close(c);
  });
  const RunResult r = run({"memory", "--model", "llama2-7b", "--json", path});
  server.join();
  ::close(srv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_socket(path));
  EXPECT_TRUE(Json::parse(got).contains("peak_gib"));
}

TEST(CliOutputs, ASymlinkToAFileReplacesTheFileNotTheLink) {
  Fixture f;
  const std::string target = f.dir + "/real.json", link = f.dir + "/link.json";
  std::ofstream(target) << "old";
  fs::create_symlink("real.json", link);
  ASSERT_EQ(run({"memory", "--model", "llama2-7b", "--json", link}).exit_code, 0);
  EXPECT_TRUE(is_symlink(link));
  EXPECT_TRUE(Json::parse(test::file_content(target)).contains("peak_gib"));
  // A link whose target does not exist yet: the target is created, the link kept.
  const std::string dangling = f.dir + "/dangling.json";
  fs::create_symlink("new.json", dangling);
  ASSERT_EQ(run({"memory", "--model", "llama2-7b", "--json", dangling}).exit_code, 0);
  EXPECT_TRUE(is_symlink(dangling));
  EXPECT_TRUE(Json::parse(test::file_content(f.dir + "/new.json")).contains("peak_gib"));
  // The replaced file keeps its permissions.
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_EQ(run({"memory", "--model", "llama2-7b", "--json", target}).exit_code, 0);
  EXPECT_EQ(fs::status(target).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

TEST(CliOutputs, DashIsStandardOutputAndStandardInput) {
  Fixture f;
  // JSON on stdout, and only JSON: the tables are not printed.
  for (const auto& args : std::vector<std::vector<std::string>>{{"memory", "--model", "llama2-7b", "--json", "-"},
                                                                {"info", f.trace, "--json", "-"},
                                                                {"speed", "--markdown", "-"},
                                                                {"bench", "--write-plan", "-"}}) {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << joined(args) << r.err;
    if (args.back() == "-" && args[args.size() - 2] != "--markdown")
      EXPECT_NO_THROW(Json::parse(r.out)) << joined(args) << "\n" << r.out.substr(0, 200);
    else EXPECT_EQ(r.out.rfind("#", 0), 0u) << r.out.substr(0, 200);
  }
  // quantize: .npy from stdin to stdout.
  RunOptions o;
  o.stdin_data = test::file_content(f.npy);
  const RunResult q = run({"quantize", "--spec", "e4m3:g128", "--in", "-", "--out", "-"}, o);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const std::string got = f.dir + "/q.npy";
  std::ofstream(got, std::ios::binary) << q.out;
  const NpyArray a = read_npy(got);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{32, 128}));
  // cast: raw values from stdin to codes on stdout.
  o.stdin_data = test::file_content(f.raw);
  const RunResult c = run({"cast", "--in", "-", "--out", "-"}, o);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out.size(), 4096u);
  // Two outputs cannot both be standard output.
  expect_error(run({"speed", "--json", "-", "--markdown", "-"}), 2, "standard output", "two stdout outputs");
}

TEST(CliOutputs, NoOutputIsEverOneOfTheRunsInputs) {
  Fixture f;
  const std::string before = test::file_content(f.trace);
  const std::string hard = f.dir + "/hard.h5", soft = f.dir + "/soft.h5";
  fs::create_hard_link(f.trace, hard);
  fs::create_symlink("t.h5", soft);
  for (const std::string& out : {f.trace, hard, soft, std::string("./") + "t.h5"}) {
    for (const auto& args : std::vector<std::vector<std::string>>{{"info", f.trace, "--json", out},
                                                                  {"analyze", f.trace, "--recipe", "bf16", "--md", out},
                                                                  {"optim", f.trace, "--json", out},
                                                                  {"compare", f.trace, "--json", out}}) {
      RunOptions o;
      o.cwd = f.dir;
      expect_error(run(args, o), 2, "input", joined(args));
    }
  }
  EXPECT_EQ(test::file_content(f.trace), before);
  EXPECT_TRUE(is_symlink(soft));
  expect_error(run({"quantize", "--spec", "e4m3:g128", "--in", f.npy, "--out", f.npy}), 2, "input", "quantize");
  expect_error(run({"cast", "--in", f.raw, "--out", f.raw}), 2, "input", "cast");
  const std::string recipe = f.dir + "/r.json";
  std::ofstream(recipe) << R"({"rules": [{"spec": "none"}]})";
  expect_error(run({"analyze", f.trace, "--recipe", recipe, "--json", recipe}), 2, "input", "recipe");
  EXPECT_TRUE(test::temporaries_in(f.dir).empty());
}

TEST(CliOutputs, NoTwoOutputsOfOneRunAreTheSameFile) {
  Fixture f;
  const std::string a = f.dir + "/a.out";
  expect_error(run({"speed", "--json", a, "--markdown", a}), 2, "same file", "speed");
  expect_error(run({"analyze", f.trace, "--recipe", "bf16", "--json", a, "--md", a}), 2, "same file", "analyze");
  expect_error(run({"quantize", "--spec", "e4m3:g128", "--in", f.npy, "--out", a, "--json", a}), 2, "same file",
               "quantize");
  EXPECT_FALSE(fs::exists(a));
  // Writing one character device twice is fine. (Through a link: a test never names a system
  // device itself, so a broken build under test cannot replace it.)
  const std::string null_link = f.dir + "/null";
  fs::create_symlink("/dev/null", null_link);
  EXPECT_EQ(run({"speed", "--json", null_link, "--markdown", null_link}).exit_code, 0);
}

TEST(CliOutputs, AFailedRunLeavesNoneOfItsOutputs) {
  Fixture f;
  const std::string ok = f.dir + "/ok.out";
  // The second output cannot be written (/proc takes no new files): the first must not appear.
  const std::vector<std::vector<std::string>> cases = {
      {"quantize", "--spec", "e4m3:g128", "--in", f.npy, "--out", ok, "--json", "/proc/fp8sim-x.json"},
      {"speed", "--json", ok, "--markdown", "/proc/fp8sim-x.md"},
      {"analyze", f.trace, "--recipe", "bf16", "--no-gemm", "--json", ok, "--md", "/proc/fp8sim-x.md"},
      {"bench", "--from", std::string(FP8SIM_SOURCE_DIR) + "/reports/h200/bench.json", "--json", ok, "--md",
       "/proc/fp8sim-x.md"},
  };
  for (const auto& args : cases) {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 1) << joined(args) << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_FALSE(fs::exists(ok)) << joined(args);
  }
  // A folder made for an output of a run that then fails is removed again.
  std::ofstream(f.dir + "/bad.npy") << "not a npy file";
  const RunResult r =
      run({"quantize", "--spec", "e4m3:g128", "--in", f.dir + "/bad.npy", "--out", f.dir + "/new/deeper/y.npy"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(f.dir + "/new"));
  // ... and kept when the run succeeds.
  EXPECT_EQ(run({"memory", "--model", "llama2-7b", "--json", f.dir + "/made/m.json"}).exit_code, 0);
  EXPECT_TRUE(fs::exists(f.dir + "/made/m.json"));
  EXPECT_TRUE(test::temporaries_in(f.dir).empty());
}

TEST(CliOutputs, AFolderAsAnOutputPathSaysSo) {
  Fixture f;
  fs::create_directory(f.dir + "/adir");
  const RunResult r = run({"memory", "--model", "llama2-7b", "--json", f.dir + "/adir"});
  expect_error(r, 1, "is a folder", "--json adir");
  EXPECT_EQ(r.err.find("Success"), std::string::npos) << r.err;
  std::ofstream(f.dir + "/afile") << "x";
  expect_error(run({"memory", "--model", "llama2-7b", "--json", f.dir + "/afile/x.json"}), 1, "not a folder",
               "file in the way");
}

TEST(CliOutputs, ReportNeverReplacesTheCurrentFolder) {
  Fixture f;
  const std::string cwd = test::temp_dir();
  RunOptions o;
  o.cwd = cwd;
  for (const std::string& out : std::vector<std::string>{".", "./", "..", cwd}) {
    const RunResult r = run({"report", f.trace, "--no-plots", "--recipes", "bf16", "--out", out}, o);
    expect_error(r, 2, "current folder", "--out " + out);
    EXPECT_TRUE(fs::is_directory(cwd));
  }
  // Nor a folder holding the run's trace.
  const std::string rep = f.dir + "/rep";
  fs::create_directory(rep);
  fs::copy_file(f.trace, rep + "/t.h5");
  expect_error(run({"report", rep + "/t.h5", "--no-plots", "--recipes", "bf16", "--out", rep}), 2, "trace",
               "trace inside --out");
  EXPECT_TRUE(fs::exists(rep + "/t.h5"));
}

TEST(CliOutputs, ReportThroughASymlinkReplacesTheFolderItLeadsTo) {
  Fixture f;
  const std::string real = f.dir + "/real", link = f.dir + "/link";
  fs::create_directory(real);
  std::ofstream(real + "/report.json") << "{}";
  fs::create_directory_symlink("real", link);
  const RunResult r = run({"report", f.trace, "--no-plots", "--recipes", "bf16", "--out", link});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(is_symlink(link));
  EXPECT_TRUE(Json::parse(test::file_content(real + "/report.json")).contains("sections"));
  EXPECT_TRUE(test::temporaries_in(f.dir).empty());
}

TEST(CliOutputs, QuantizeWithoutOutPrintsTheMetrics) {
  Fixture f;
  const RunResult r = run({"quantize", "--spec", "e4m3:g128", "--in", f.npy});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nmse"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("snr_db"), std::string::npos) << r.out;
}

TEST(CliOutputs, QuietPrintsNothingOnStdout) {
  Fixture f;
  const std::string out = test::temp_dir();
  const std::vector<std::vector<std::string>> cases = {
      {"info", f.trace},
      {"analyze", f.trace, "--recipe", "bf16", "--no-gemm"},
      {"optim", f.trace, "--no-table1"},
      {"memory", "--model", "llama2-7b"},
      {"memory", "--paper"},
      {"speed"},
      {"quantize", "--spec", "e4m3:g128", "--in", f.npy},
      {"cast", "1.5", "448"},
      {"bench", "--from", std::string(FP8SIM_SOURCE_DIR) + "/reports/h200/bench.json", "--json", out + "/b.json"},
      {"report", f.trace, "--no-plots", "--recipes", "bf16", "--out", out + "/rep"}};
  for (auto args : cases) {
    args.push_back("--quiet");
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << joined(args) << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << joined(args) << "\n" << r.out.substr(0, 300);
  }
}

// A model whose MLP the speed replay does not cover: the speed section fails with an error.
std::string gelu_model() {
  Json m = Json::parse(test::file_content(std::string(FP8SIM_SOURCE_DIR) + "/models/tiny-llama.json"));
  m["activation"] = "gelu";
  m["name"] = "tiny-gelu";
  const std::string path = test::temp_dir() + "/tiny-gelu.json";
  std::ofstream(path) << m.dump(2);
  return path;
}

TEST(CliOutputs, ReportFailsNamingAFailedSectionUnlessKeepGoing) {
  Fixture f;
  const std::string model = gelu_model();
  const std::string out = f.dir + "/rep";
  const RunResult r = run({"report", f.trace, "--model", model, "--no-plots", "--recipes", "bf16", "--out", out});
  expect_error(r, 1, "section", "report with a failing section");
  EXPECT_NE(r.err.find("--keep-going"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  const RunResult k =
      run({"report", f.trace, "--model", model, "--no-plots", "--recipes", "bf16", "--out", out, "--keep-going"});
  EXPECT_EQ(k.exit_code, 0) << k.err;
  const Json doc = Json::parse(test::file_content(out + "/report.json"));
  bool saw_error = false;
  for (const Json& s : doc.at("sections").as_array()) saw_error = saw_error || s.at("status").as_string() == "error";
  EXPECT_TRUE(saw_error);
  // A section that is unavailable for want of a GPU is not a failure.
  EXPECT_EQ(run({"report", f.trace, "--no-plots", "--recipes", "bf16", "--out", f.dir + "/ok"}).exit_code, 0);
}

// ---- interrupted runs ------------------------------------------------------------------------

// Waits until `pred` holds, at most `timeout_s`.
template <class P>
bool wait_until(P pred, double timeout_s) {
  const double end = test::seconds_now() + timeout_s;
  while (test::seconds_now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// cast reading standard input writes its output's temporary at once and then waits for data:
// a run that is reliably mid-write when the signal comes.
TEST(CliOutputs, ASignalMidWriteRemovesTheTemporaryAndEndsTheConventionalWay) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string dir = test::temp_dir();
    Background bg({"cast", "--in", "-", "--out", dir + "/out.u8", "--chunk-elements", "1048576"}, {}, true);
    bg.feed(std::string(4096, '\0'));
    ASSERT_TRUE(wait_until([&] { return !test::temporaries_in(dir).empty(); }, 20)) << "no temporary appeared";
    ::kill(bg.pid(), sig);
    const RunResult r = bg.wait(20);
    ASSERT_FALSE(r.timed_out) << strsignal(sig);
    EXPECT_TRUE(r.signal == sig || r.exit_code == 128 + sig)
        << strsignal(sig) << ": exit " << r.exit_code << ", signal " << r.signal;
    EXPECT_TRUE(test::temporaries_in(dir).empty()) << strsignal(sig) << " left " << test::temporaries_in(dir)[0];
    EXPECT_FALSE(fs::exists(dir + "/out.u8"));
  }
}

TEST(CliOutputs, AWriteOverTheFileSizeLimitFailsWithOneLineAndNoTemporary) {
  const std::string dir = test::temp_dir();
  RunOptions o;
  o.rlimit_fsize = 1000;  // the document is larger
  const RunResult r = run({"memory", "--model", "llama2-7b", "--json", dir + "/m.json"}, o);
  expect_error(r, 1, "large", "RLIMIT_FSIZE");
  EXPECT_TRUE(test::listing(dir).empty()) << test::listing(dir)[0];
}

// A stand-in for Python that records its pid and sleeps: the report's plots child.
std::string sleeping_python(const std::string& dir) {
  const std::string script = dir + "/python";
  std::ofstream(script) << "#!/bin/sh\necho $$ > '" << dir << "/child.pid'\nexec sleep 60\n";
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

TEST(CliOutputs, AKilledReportEndsItsPlotsChildAndLeavesNothing) {
  for (int sig : {SIGTERM, SIGKILL}) {
    Fixture f;
    const std::string work = test::temp_dir();
    RunOptions o;
    o.env["FP8SIM_PYTHON"] = sleeping_python(work);
    const std::string out = f.dir + "/rep";
    Background bg({"report", f.trace, "--recipes", "bf16", "--out", out}, o);
    ASSERT_TRUE(
        wait_until([&] { return fs::exists(work + "/child.pid") && fs::file_size(work + "/child.pid") > 0; }, 60))
        << "the plots child never started";
    const pid_t child = std::stoi(test::file_content(work + "/child.pid"));
    ::kill(bg.pid(), sig);
    const RunResult r = bg.wait(20);
    EXPECT_FALSE(r.timed_out);
    const bool child_ended = wait_until([&] { return !test::process_alive(child); }, 5);
    EXPECT_TRUE(child_ended) << strsignal(sig) << ": the plots child outlived fp8sim";
    if (!child_ended) ::kill(child, SIGKILL);
    EXPECT_FALSE(fs::exists(out));
    // SIGKILL cannot be handled: its staging folder stays until the next run removes it.
    if (sig != SIGKILL) {
      EXPECT_TRUE(test::temporaries_in(f.dir).empty()) << test::temporaries_in(f.dir)[0];
    }
  }
}

// A trace whose opening keeps the probe child busy for a moment (20000 step groups).
std::string many_steps_trace() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/many.h5";
    trace::TraceHeader h;
    trace::TraceWriter w(p, h);
    for (int s = 0; s < 20000; ++s) {
      trace::StepInfo st;
      st.step = s;
      w.set_step(st);
    }
    w.commit();
    return p;
  }();
  return path;
}

TEST(CliOutputs, TheTraceProbeChildDiesWithItsParent) {
  const std::string trace_path = many_steps_trace();
  for (int sig : {SIGKILL, SIGTERM}) {
    bool caught = false;
    for (int attempt = 0; attempt < 5 && !caught; ++attempt) {
      Background bg({"info", trace_path, "--summary"});
      pid_t child = -1;
      wait_until(
          [&] {
            const auto c = test::children_of(bg.pid());
            if (!c.empty()) child = c[0];
            return child > 0 || !test::process_alive(bg.pid());
          },
          20);
      if (child <= 0) continue;  // the probe finished before it was seen: try again
      // The probe sends its stderr to /dev/null after it has set itself up (PR_SET_PDEATHSIG
      // included); stopping it earlier would freeze it before that and test nothing.
      const std::string fd2 = "/proc/" + std::to_string(child) + "/fd/2";
      if (!wait_until(
              [&] {
                std::error_code ec;
                return fs::read_symlink(fd2, ec) == "/dev/null";
              },
              5))
        continue;
      ::kill(child, SIGSTOP);  // it stays until something ends it
      caught = true;
      ::kill(bg.pid(), sig);
      bg.wait(20);
      const bool ended = wait_until([&] { return !test::process_alive(child); }, 5);
      EXPECT_TRUE(ended) << strsignal(sig) << ": the probe outlived its parent";
      if (!ended) ::kill(child, SIGKILL);
    }
    if (!caught) GTEST_SKIP() << "the probe never ran long enough to be seen";
  }
}

TEST(CliOutputs, StaleTemporariesOfDeadRunsAreRemovedByTheNextRun) {
  const std::string dir = test::temp_dir();
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = dir + "/.m.json.tmp." + std::to_string(dead) + ".0";
  const std::string live = dir + "/.m.json.tmp." + std::to_string(::getpid()) + ".0";  // this process runs
  std::ofstream(stale) << "partial";
  std::ofstream(live) << "in use";
  const std::string stale_dir = dir + "/.rep.tmp." + std::to_string(dead) + ".0";
  fs::create_directories(stale_dir + "/sub");
  std::ofstream(stale_dir + "/sub/x.png") << "partial";
  std::ofstream(dir + "/.unrelated.tmp.notapid") << "keep";
  ASSERT_EQ(run({"memory", "--model", "llama2-7b", "--json", dir + "/m.json"}).exit_code, 0);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  const RunResult r = run({"report", test::sample_trace(), "--no-plots", "--recipes", "bf16", "--out", dir + "/rep"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale_dir));
  EXPECT_TRUE(fs::exists(dir + "/.unrelated.tmp.notapid"));
}

TEST(CliOutputs, ConcurrentWritersOfOneOutputLeaveOneWholeFile) {
  const std::string dir = test::temp_dir();
  const std::string out = dir + "/same.json";
  for (int round = 0; round < 4; ++round) {
    Background a({"memory", "--model", "llama2-7b", "--json", out});
    Background b({"memory", "--model", "llama2-13b", "--json", out});
    EXPECT_EQ(a.wait(60).exit_code, 0);
    EXPECT_EQ(b.wait(60).exit_code, 0);
    const Json doc = Json::parse(test::file_content(out));
    const std::string name = doc.at("model").at("display_name").as_string();
    EXPECT_TRUE(name == "Llama-2-7B" || name == "Llama-2-13B") << name;
  }
  EXPECT_EQ(test::listing(dir), std::vector<std::string>{"same.json"});
}

}  // namespace
}  // namespace fp8sim
