// The bad-input catalogue: hostile command lines run as a careless user would, each checked
// against the same contract (docs/cli-contract.md): exactly one line on stderr, exit 1 (bad data)
// or 2 (bad usage), never a signal or a hang, no output or temporary file left behind, no input
// changed. The cases are data: tables of arguments and expected exit classes, plus a few hundred
// seeded mutations of the sample trace and a set of malformed .npy files. (Signals mid-write and
// concurrent writers are in test_cli_outputs.cpp, which needs processes in the background.)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/common/npy.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/test_util.hpp"

namespace fp8sim {
namespace {

namespace fs = std::filesystem;
using test::RunOptions;
using test::RunResult;

// ---- fixtures ---------------------------------------------------------------------------------

// Read-only inputs shared by every case, in one folder; the catalogue checks that no case changes
// any of them (type, size, content).
struct Inputs {
  std::string dir = test::temp_dir();
  std::map<std::string, std::string> at;  // placeholder -> path

  Inputs() {
    auto put = [&](const std::string& key, const std::string& name, const std::string& bytes) {
      const std::string p = dir + "/" + name;
      std::ofstream(p, std::ios::binary) << bytes;
      at[key] = p;
    };
    fs::copy_file(test::sample_trace(), dir + "/t.h5");
    at["{T}"] = dir + "/t.h5";
    std::vector<float> x(1024);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 37) - 18.5f;
    write_npy(dir + "/x.npy", NpyDtype::F32, {8, 128}, x.data(), x.size() * 4);
    at["{N}"] = dir + "/x.npy";
    put("{RAW}", "x.f32", std::string(reinterpret_cast<const char*>(x.data()), 64 * 4));
    put("{RAW3}", "x3.f32", "abc");  // not a whole number of float32 values
    put("{JSON_BAD}", "bad.json", "{\"unterminated\": ");
    put("{JSON_ARRAY}", "array.json", "[1, 2, 3]");
    put("{JSON_EMPTY}", "empty.json", "");
    put("{RECIPE_BADBASE}", "badbase.json", R"({"base": "nope", "rules": [{"spec": "none"}]})");
    put("{RECIPE_BADSPEC}", "badspec.json", R"({"rules": [{"role": "weight", "spec": "e9m9:g128"}]})");
    put("{MODEL_BAD}", "model_bad.json", R"({"name": "m", "hidden_size": -4})");
    put("{TEXT}", "text.txt", "this is not a trace\n");
    put("{NOPLAN}", "noplan.json", R"({"base": "coat", "speed_plan": null})");  // a recipe speed cannot model
    fs::create_directory(dir + "/folder");
    at["{FOLDER}"] = dir + "/folder";
    ::mkfifo((dir + "/fifo").c_str(), 0600);
    at["{FIFO}"] = dir + "/fifo";
    const std::string huge = dir + "/huge.json";  // sparse, over the 64 MiB input cap
    std::ofstream{huge}.close();
    fs::resize_file(huge, uint64_t{65} << 20);
    at["{HUGE}"] = huge;
    // A copy: a case names it as an output (which must be refused), never the committed file.
    fs::copy_file(std::string(FP8SIM_SOURCE_DIR) + "/reports/h200/bench.json", dir + "/bench.json");
    at["{BENCHDOC}"] = dir + "/bench.json";
    make_npys();
  }

  // Malformed .npy files: bad headers, unsupported dtypes, Fortran order, odd shapes.
  void make_npys() {
    auto npy = [&](const std::string& key, const std::string& header_dict, size_t data_bytes, int version = 1,
                   const std::string& magic = "\x93NUMPY") {
      std::string dict = header_dict;
      const size_t pre = version == 1 ? 10 : 12;
      while ((pre + dict.size() + 1) % 64) dict += ' ';
      dict += '\n';
      std::string bytes = magic;
      bytes += static_cast<char>(version);
      bytes += '\0';
      const size_t hl = dict.size();
      bytes += static_cast<char>(hl & 0xFF);
      bytes += static_cast<char>((hl >> 8) & 0xFF);
      if (version != 1) bytes += std::string(2, '\0');
      bytes += dict;
      bytes += std::string(data_bytes, '\x01');
      const std::string p = dir + "/" + key.substr(1, key.size() - 2) + ".npy";
      std::ofstream(p, std::ios::binary) << bytes;
      at[key] = p;
    };
    const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
    npy("{NPY_MAGIC}", f4 + "(4,), }", 16, 1, "\x93NUMPZ");
    npy("{NPY_VERSION}", f4 + "(4,), }", 16, 9);
    npy("{NPY_DICT}", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,, }", 16);
    npy("{NPY_NOSHAPE}", "{'descr': '<f4', 'fortran_order': False, }", 16);
    npy("{NPY_EXTRAKEY}", f4 + "(4,), 'extra': 1, }", 16);
    npy("{NPY_F8}", "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", 32);
    npy("{NPY_BE}", "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", 16);
    npy("{NPY_I4}", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", 16);
    npy("{NPY_OBJ}", "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }", 32);
    npy("{NPY_FORTRAN}", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
    npy("{NPY_ZERO}", f4 + "(0, 4), }", 0);
    npy("{NPY_U8}", "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", 4);
    npy("{NPY_HUGE}", f4 + "(1000000000, 1000000000), }", 16);
    npy("{NPY_OVERFLOW}", f4 + "(4611686018427387904, 4611686018427387904), }", 16);
    npy("{NPY_NEGATIVE}", f4 + "(-4, 4), }", 16);
    npy("{NPY_TRUNCATED}", f4 + "(100,), }", 40);
    npy("{NPY_TRAILING}", f4 + "(4,), }", 20);
    npy("{NPY_U16}", "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", 8);
    std::ofstream(dir + "/short.npy", std::ios::binary) << "\x93NUM";
    at["{NPY_SHORT}"] = dir + "/short.npy";
    std::ofstream(dir + "/longhdr.npy", std::ios::binary) << std::string("\x93NUMPY\x01\x00\xff\xff", 10) << "{";
    at["{NPY_LONGHEADER}"] = dir + "/longhdr.npy";
  }

  // Type, size and modification time of every input: what a case must not change.
  std::string snapshot() const {
    std::string s;
    for (const auto& name : test::listing(dir)) {
      struct stat st {};
      ::lstat((dir + "/" + name).c_str(), &st);
      s += fmt::format("{} {:o} {} {}.{}\n", name, st.st_mode, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    }
    return s;
  }
};

const Inputs& inputs() {
  static const Inputs in;
  return in;
}

struct Case {
  std::vector<std::string> args;  // placeholders: those of Inputs, {D} (the case's own folder)
  int exit;                       // 1: bad data, 2: bad usage
  std::string needle = "";        // a word the one line must contain
  std::string stdin_data = "";    // standard input (empty: /dev/null)
};

std::string describe(const std::vector<std::string>& args) {
  std::string s = "fp8sim";
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

// Runs one case in a fresh folder (its working directory) and checks the whole contract.
void check(const Case& c) {
  const Inputs& in = inputs();
  const std::string before = in.snapshot();
  const std::string d = test::temp_dir();
  std::vector<std::string> args;
  for (std::string a : c.args) {
    for (const auto& [key, path] : in.at)
      for (size_t pos; (pos = a.find(key)) != std::string::npos;) a.replace(pos, key.size(), path);
    for (size_t pos; (pos = a.find("{D}")) != std::string::npos;) a.replace(pos, 3, d);
    args.push_back(a);
  }
  const std::vector<std::string> listing_before = test::listing(d);
  RunOptions o;
  o.cwd = d;
  o.timeout_s = 60;
  o.rlimit_as_mib = 4096;  // a case that read without bound would fail here, not take the machine
  if (!c.stdin_data.empty()) o.stdin_data = c.stdin_data;
  const RunResult r = test::run(args, o);
  const std::string what = describe(args);
  EXPECT_FALSE(r.timed_out) << what;
  EXPECT_EQ(r.signal, 0) << what << ": killed by " << strsignal(r.signal);
  EXPECT_EQ(r.exit_code, c.exit) << what << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("fp8sim", 0), 0u) << what << "\n" << r.err;
  EXPECT_NE(r.err.find(": error: "), std::string::npos) << what << "\n" << r.err;
  EXPECT_EQ(r.err.find("internal check"), std::string::npos) << what << "\n" << r.err;
  if (!c.needle.empty()) {
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << what << ": wanted '" << c.needle << "' in\n" << r.err;
  }
  EXPECT_EQ(test::listing(d), listing_before) << what << ": left files behind";
  EXPECT_EQ(in.snapshot(), before) << what << ": changed an input";
}

// ---- the tables ---------------------------------------------------------------------------------

const std::vector<std::string> kCommands = {"info",     "analyze", "optim",   "memory", "speed",
                                            "quantize", "cast",    "compare", "bench",  "report"};

// Missing and unknown options, missing values and required arguments.
std::vector<Case> option_cases() {
  std::vector<Case> v;
  for (const auto& cmd : kCommands) {
    v.push_back({{cmd, "--frobnicate"}, 2, "frobnicate"});
    v.push_back({{cmd, "-Z"}, 2});
  }
  for (const auto& cmd : {"info", "analyze", "optim", "memory", "speed", "quantize", "compare", "bench"})
    v.push_back({{cmd, "--json"}, 2, "--json"});
  v.push_back({{"frobnicate"}, 2, "unknown command"});
  v.push_back({{"info"}, 2, "no trace"});
  v.push_back({{"analyze"}, 2, "no trace"});
  v.push_back({{"optim"}, 2, "TRACE"});
  v.push_back({{"compare"}, 2, "TRACE"});
  v.push_back({{"memory"}, 2, "--model"});
  v.push_back({{"quantize"}, 2, "--spec"});
  v.push_back({{"quantize", "--spec", "e4m3:g128"}, 2, "--in"});
  v.push_back({{"cast"}, 2, "no values"});
  v.push_back({{"cast", "--in", "{RAW}"}, 2, "--out"});
  v.push_back({{"report", "--out"}, 2, "--out"});
  v.push_back({{"info", "{T}", "{T}"}, 2});
  v.push_back({{"memory", "--paper", "--list-models"}, 2, "only one"});
  v.push_back({{"speed", "--calibration", "{BENCHDOC}", "--write-calibration", "{D}/c.json"}, 2, "measuring"});
  v.push_back({{"bench", "--from", "{BENCHDOC}"}, 2, "--json or --md"});
  v.push_back({{"cast", "1", "--in", "{RAW}", "--out", "{D}/o"}, 2, "not both"});
  v.push_back({{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--codes", "-"}, 2, "--codes"});
  return v;
}

// Negative, zero, NaN, 2^64-overflowing and empty numbers for every numeric option.
std::vector<Case> number_cases() {
  const std::string r_out = "{D}/r";
  struct Opt {
    std::vector<std::string> prefix;
    std::string option;
    std::vector<std::string> bad;
  };
  const std::vector<std::string> all = {"-1", "0", "nan", "18446744073709551616", "", "1e3x"};
  const std::vector<std::string> neg = {"-1", "nan", "18446744073709551616", "", "inf"};
  const std::vector<Opt> opts = {
      {{"memory", "--model", "llama2-7b"}, "--gpus", all},
      {{"memory", "--model", "llama2-7b"}, "--batch", all},
      {{"memory", "--model", "llama2-7b"}, "--seq", all},
      {{"memory", "--model", "llama2-7b"}, "--zero", {"-1", "4", "nan", "18446744073709551616", ""}},
      {{"memory", "--model", "llama2-7b"}, "--gpu-mem-gib", {"-1", "0", "nan", "inf", "1e400", ""}},
      {{"speed"}, "--batch", all},
      {{"speed"}, "--seq", all},
      {{"speed"}, "--gpus", all},
      {{"speed"}, "--grad-accum", all},
      {{"speed"}, "--link-gbps", {"-1", "0", "nan", "inf", ""}},
      {{"speed"}, "--reps", {"-1", "0", "nan", ""}},
      {{"speed"}, "--warmup", neg},
      {{"report", "--no-plots", "--out", r_out}, "--gpus", all},
      {{"report", "--no-plots", "--out", r_out}, "--batch", all},
      {{"report", "--no-plots", "--out", r_out}, "--seq", all},
      {{"optim", "{T}"}, "--steps", neg},
      {{"optim", "{T}"}, "--threads", neg},
      {{"optim", "{T}"}, "--seed", neg},
      {{"optim", "{T}"}, "--table1-step", {"nan", "18446744073709551616", ""}},
      {{"analyze", "{T}"}, "--threads", neg},
      {{"analyze", "{T}"}, "--step", {"nan", "18446744073709551616", ""}},
      {{"info", "{T}"}, "--step", {"nan", "18446744073709551616", ""}},
      {{"info", "{T}"}, "--layer", {"nan", "18446744073709551616", ""}},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}"}, "--threads", neg},
      {{"cast", "--in", "{RAW}", "--out", "{D}/o"}, "--seed", {"-1", "nan", "18446744073709551616", ""}},
      {{"cast", "--in", "{RAW}", "--out", "{D}/o"}, "--chunk-elements", all},
      {{"compare", "{T}"}, "--max-tensors", neg},
      {{"compare", "{T}"}, "--step", {"nan", "18446744073709551616", ""}},
      {{"bench"}, "--reps", {"-1", "0", "nan", ""}},
      {{"bench"}, "--warmup", neg},
      {{"bench"}, "--gemm-search", neg},
      {{"bench"}, "--gemm-cooldown", {"-1", "nan", "inf", "61", ""}},
      {{"bench"}, "--launch-lead", {"-1", "nan", "inf", "100001", ""}},
  };
  std::vector<Case> v;
  for (const auto& o : opts)
    for (const auto& value : o.bad) {
      Case c{o.prefix, 2};
      c.args.push_back(o.option);
      c.args.push_back(value);
      v.push_back(c);
    }
  // Values, not options.
  v.push_back({{"cast", ""}, 2, "not a number"});
  v.push_back({{"cast", "1.0x"}, 2, "not a number"});
  v.push_back({{"cast", "--decode", "256"}, 2, "not an e4m3 code"});
  v.push_back({{"cast", "--decode", "-1"}, 2, "not an e4m3 code"});
  v.push_back({{"cast", "--decode", "0x1FF"}, 2, "not an e4m3 code"});
  v.push_back({{"speed", "--batch", "bf16=2,coat=-1"}, 2, "--batch"});
  v.push_back({{"speed", "--batch", "bf16=2,bf16=4"}, 2, "twice"});
  v.push_back({{"speed", "--batch", "bf16="}, 2, "--batch"});
  v.push_back({{"speed", "--seq", "5"}, 2, "16"});
  return v;
}

// Empty strings where a name or a path belongs.
std::vector<Case> empty_string_cases() {
  return {
      {{"info", ""}, 2},
      {{"analyze", ""}, 2},
      {{"optim", ""}, 2},
      {{"compare", ""}, 2},
      {{"report", "", "--no-plots", "--out", "{D}/r"}, 2},
      {{"report", "--no-plots", "--out", ""}, 2, "--out"},
      {{"report", "--no-plots", "--out", "{D}/r", "--recipes", ""}, 2},
      {{"report", "--no-plots", "--out", "{D}/r", "--model", ""}, 2},
      {{"memory", "--model", ""}, 2},
      {{"memory", "--model", "llama2-7b", "--recipe", ""}, 2},
      {{"memory", "--validate", ""}, 2},
      {{"speed", "--model", ""}, 2},
      {{"speed", "--recipes", ""}, 2},
      {{"speed", "--calibration", ""}, 2},
      {{"speed", "--torch-times", ""}, 2},
      {{"speed", "--fsdp-comm", ""}, 2},
      {{"analyze", "{T}", "--recipe", ""}, 2},
      {{"optim", "{T}", "--recipe", ""}, 2},
      {{"optim", "{T}", "--update", ""}, 2},
      {{"optim", "{T}", "--rounding", ""}, 2},
      {{"info", "{T}", "--role", ""}, 2},
      {{"info", "{T}", "--op", ""}, 2},
      {{"info", "{T}", "--name", ""}, 2},
      {{"quantize", "--spec", ""}, 2},
      {{"quantize", "--spec", "e4m3:g128", "--in", ""}, 2},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--dtype", ""}, 2},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--codes", ""}, 2},
      {{"cast", "--format", "", "1"}, 2},
      {{"cast", "--rounding", "", "1"}, 2},
      {{"cast", "--in", "", "--out", "{D}/o"}, 2},
      {{"cast", "--in", "{RAW}", "--out", ""}, 2},
      {{"cast", "--in", "{RAW}", "--out", "{D}/o", "--input-dtype", ""}, 2},
      {{"compare", "{T}", "--ops", ""}, 2},
      {{"bench", "--from", ""}, 2},
      {{"bench", "--peers", ""}, 2},
      {{"bench", "--ops", "", "--write-plan", "{D}/p.json"}, 2},
      {{"bench", "--flush", ""}, 2},
      // Every output option given an empty path.
      {{"info", "{T}", "--json", ""}, 2, "empty"},
      {{"analyze", "{T}", "--md", ""}, 2, "empty"},
      {{"optim", "{T}", "--json", ""}, 2, "empty"},
      {{"memory", "--model", "llama2-7b", "--json", ""}, 2, "empty"},
      {{"speed", "--markdown", ""}, 2, "empty"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--out", ""}, 2, "empty"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--json", ""}, 2, "empty"},
      {{"compare", "{T}", "--md", ""}, 2, "empty"},
      {{"bench", "--write-plan", ""}, 2, "empty"},
  };
}

// Words that are not what the option takes.
std::vector<Case> bad_word_cases() {
  return {
      {{"memory", "--model", "nope"}, 2, "unknown model"},
      {{"memory", "--model", "llama2-7b", "--recipe", "fp4"}, 2},
      {{"speed", "--model", "nope"}, 2, "unknown model"},
      {{"speed", "--recipes", "bf16,fp4"}, 2},
      {{"speed", "--recipes", "bf16,bf16"}, 2, "twice"},
      {{"speed", "--fsdp-comm", "maybe"}, 2},
      {{"report", "--no-plots", "--out", "{D}/r", "--model", "nope"}, 2, "unknown model"},
      {{"report", "--no-plots", "--out", "{D}/r", "--recipes", "fp4"}, 2},
      {{"report", "--no-plots", "--out", "{D}/r", "--recipes", "bf16,,coat"}, 2},
      {{"analyze", "{T}", "--recipe", "nope"}, 2, "unknown recipe"},
      {{"memory", "--model", "llama2-7b", "--recipe", "mxfp8"}, 2, "no memory model"},
      {{"speed", "--recipes", "{NOPLAN}"}, 2, "no speed plan"},
      {{"speed", "--batch", "{NOPLAN}=2"}, 2, "no speed plan"},
      {{"recipes", "nope"}, 2, "unknown recipe"},
      {{"optim", "{T}", "--recipe", "nope"}, 2},
      {{"optim", "{T}", "--recipe", "m=e4m3:g128"}, 2},
      {{"optim", "{T}", "--recipe", "m=e4m3:tensor:delayed=4,v=fp32"}, 2, "delayed"},
      {{"optim", "{T}", "--update", "sgd"}, 2},
      {{"optim", "{T}", "--rounding", "up"}, 2},
      {{"info", "{T}", "--role", "gradient"}, 2, "--role"},
      {{"quantize", "--spec", "e4m3:g12x", "--in", "{N}"}, 2},
      {{"quantize", "--spec", "e9m9:g128", "--in", "{N}"}, 2},
      {{"quantize", "--spec", "e4m3:g0", "--in", "{N}"}, 2},
      {{"quantize", "--spec", "e4m3:g18446744073709551616", "--in", "{N}"}, 2},
      {{"quantize", "--spec", "e4m3:g128:seed=-1:round=stochastic", "--in", "{N}"}, 2},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--dtype", "int8"}, 2},
      {{"cast", "--format", "e3m4", "1"}, 2},
      {{"cast", "--rounding", "down", "1"}, 2},
      {{"cast", "--in", "{RAW}", "--out", "{D}/o", "--input-dtype", "f64"}, 2},
      {{"compare", "{T}", "--ops", "frobnicate"}, 2},
      {{"bench", "--ops", "frobnicate"}, 2},
      {{"bench", "--flush", "sideways"}, 2},
  };
}

// Inputs that are missing, of the wrong kind, too large or malformed.
std::vector<Case> input_cases() {
  std::vector<Case> v = {
      // Traces.
      {{"info", "{D}/missing.h5"}, 1, "no such file"},
      {{"info", "{FOLDER}"}, 1, "a folder without .npy files"},
      {{"info", "{FIFO}"}, 1, "not a regular file"},
      {{"info", "/dev/zero"}, 1, "not a regular file"},
      {{"info", "{TEXT}"}, 1, "not an HDF5 file"},
      {{"info", "{JSON_EMPTY}"}, 1, "empty"},
      {{"analyze", "{TEXT}"}, 1},
      {{"optim", "{TEXT}"}, 1},
      {{"compare", "{TEXT}"}, 1},
      {{"report", "{TEXT}", "--no-plots", "--out", "{D}/r"}, 1},
      {{"report", "{FIFO}", "--no-plots", "--out", "{D}/r"}, 1},
      // A step, op or layer the trace does not hold.
      {{"info", "{T}", "--step", "1"}, 1, "295"},
      {{"info", "{T}", "--op", "nope"}, 1, "linear"},
      {{"analyze", "{T}", "--step", "1"}, 1, "295"},
      {{"optim", "{T}", "--table1-step", "1"}, 1, "no step 1"},
      // .npy files.
      {{"quantize", "--spec", "e4m3:g128", "--in", "{D}/missing.npy"}, 1, "no such file"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{FOLDER}"}, 1, "regular file"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{FIFO}"}, 1, "regular file"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{TEXT}"}, 1, "magic"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "-"}, 1, "standard input", "not a npy at all"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "-"}, 1, "truncated", "\x93NUMPY\x01"},
      // Bulk cast inputs.
      {{"cast", "--in", "{D}/missing", "--out", "{D}/o"}, 1, "no such file"},
      {{"cast", "--in", "{FIFO}", "--out", "{D}/o"}, 1, "regular file"},
      {{"cast", "--in", "{RAW3}", "--out", "{D}/o"}, 1, "whole number"},
      {{"cast", "--in", "-", "--out", "{D}/o"}, 1, "standard input", "abc"},
      // JSON inputs: FIFOs and devices are refused before they are read, large files by size.
      {{"analyze", "{T}", "--recipe", "{FIFO}"}, 1, "regular file"},
      {{"analyze", "{T}", "--recipe", "/dev/zero"}, 1, "regular file"},
      {{"analyze", "{T}", "--recipe", "{FOLDER}"}, 1, "regular file"},
      {{"analyze", "{T}", "--recipe", "{HUGE}"}, 1, "MiB"},
      {{"analyze", "{T}", "--recipe", "{JSON_BAD}"}, 1},
      {{"analyze", "{T}", "--recipe", "{JSON_ARRAY}"}, 1},
      {{"analyze", "{T}", "--recipe", "{JSON_EMPTY}"}, 1},
      {{"analyze", "{T}", "--recipe", "{RECIPE_BADBASE}"}, 1, "nope"},
      {{"analyze", "{T}", "--recipe", "{RECIPE_BADSPEC}"}, 1},
      {{"memory", "--model", "llama2-7b", "--recipe", "{RECIPE_BADBASE}"}, 1, "nope"},
      {{"memory", "--model", "llama2-7b", "--recipe", "{JSON_ARRAY}"}, 1},
      {{"speed", "--recipes", "bf16,{RECIPE_BADSPEC}"}, 1, "e9m9"},
      {{"report", "--no-plots", "--out", "{D}/r", "--recipes", "{RECIPE_BADBASE}"}, 1, "nope"},
      {{"recipes", "{JSON_BAD}"}, 1},
      {{"recipes", "{FIFO}"}, 1, "regular file"},
      {{"recipes", "{RECIPE_BADBASE}", "--json", "{D}/r.json"}, 1, "nope"},
      {{"speed", "--calibration", "{FIFO}"}, 1, "regular file"},
      {{"speed", "--calibration", "/dev/zero"}, 1, "regular file"},
      {{"speed", "--calibration", "{HUGE}"}, 1, "MiB"},
      {{"speed", "--calibration", "{JSON_BAD}"}, 1},
      {{"speed", "--calibration", "{JSON_ARRAY}"}, 1},
      {{"speed", "--calibration", "{D}/missing.json"}, 1},
      {{"memory", "--validate", "{FIFO}"}, 1, "regular file"},
      {{"memory", "--validate", "/dev/zero"}, 1, "regular file"},
      {{"memory", "--validate", "{HUGE}"}, 1, "MiB"},
      {{"memory", "--validate", "{JSON_BAD}"}, 1},
      {{"memory", "--validate", "{JSON_ARRAY}"}, 1},
      {{"memory", "--model", "{FIFO}.json"}, 1},
      {{"memory", "--model", "{MODEL_BAD}"}, 1},
      {{"memory", "--model", "{HUGE}"}, 1, "MiB"},
      {{"memory", "--model", "{D}/missing.json"}, 1, "no such file"},
      {{"bench", "--from", "{FIFO}", "--json", "{D}/b.json"}, 1, "regular file"},
      {{"bench", "--from", "/dev/zero", "--json", "{D}/b.json"}, 1, "regular file"},
      {{"bench", "--from", "{HUGE}", "--json", "{D}/b.json"}, 1, "MiB"},
      {{"bench", "--from", "{JSON_ARRAY}", "--json", "{D}/b.json"}, 1},
      {{"bench", "--from", "{JSON_EMPTY}", "--md", "{D}/b.md"}, 1},
      {{"bench", "--peers", "{FIFO}"}, 1, "regular file"},
      {{"bench", "--peers", "{JSON_ARRAY}"}, 1},
  };
  for (const std::string key :
       {"{NPY_MAGIC}", "{NPY_VERSION}", "{NPY_DICT}", "{NPY_NOSHAPE}", "{NPY_EXTRAKEY}", "{NPY_F8}", "{NPY_BE}",
        "{NPY_I4}", "{NPY_OBJ}", "{NPY_FORTRAN}", "{NPY_ZERO}", "{NPY_U8}", "{NPY_HUGE}", "{NPY_OVERFLOW}",
        "{NPY_NEGATIVE}", "{NPY_TRUNCATED}", "{NPY_TRAILING}", "{NPY_SHORT}", "{NPY_LONGHEADER}"}) {
    v.push_back({{"quantize", "--spec", "e4m3:g128", "--in", key, "--out", "{D}/y.npy"}, 1});
    v.push_back({{"quantize", "--spec", "e4m3:g128", "--in", "-", "--json", "{D}/y.json"}, 1, "", ""});
    v.back().stdin_data = test::file_content(inputs().at.at(key));
  }
  // Raw uint16 data needs to be told how to read it.
  v.push_back({{"quantize", "--spec", "e4m3:g128", "--in", "{NPY_U16}"}, 1, "--dtype"});
  return v;
}

// Outputs that cannot be written, or must not be.
std::vector<Case> output_cases() {
  return {
      // Onto a folder, through a file, into /proc (no new files there), a loop of links.
      {{"memory", "--model", "llama2-7b", "--json", "{FOLDER}"}, 1, "folder"},
      {{"memory", "--model", "llama2-7b", "--json", "."}, 1, "folder"},
      {{"memory", "--model", "llama2-7b", "--json", "{TEXT}/x.json"}, 1, "not a folder"},
      {{"memory", "--model", "llama2-7b", "--json", "/proc/fp8sim-no/x.json"}, 1},
      {{"memory", "--model", "llama2-7b", "--json", "/proc/fp8sim-x.json"}, 1},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--out", "{FOLDER}"}, 1, "folder"},
      {{"cast", "--in", "{RAW}", "--out", "{FOLDER}"}, 1, "folder"},
      {{"bench", "--write-plan", "{FOLDER}"}, 1, "folder"},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "{TEXT}"}, 1, "not a folder"},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "{TEXT}/r"}, 1},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "/proc/fp8sim-r"}, 1},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "{FOLDER}/.."}, 2, "trace"},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "."}, 2, "current folder"},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "/"}, 1, "root"},
      {{"report", "{T}", "--no-plots", "--recipes", "bf16", "--out", "-"}, 2, "folder"},
      // A failing run whose output would go into a folder that does not exist yet: no folder is left.
      {{"quantize", "--spec", "e4m3:g128", "--in", "{TEXT}", "--out", "{D}/new/deeper/y.npy"}, 1},
      {{"analyze", "{TEXT}", "--json", "{D}/new/a.json"}, 1},
      {{"report", "{TEXT}", "--no-plots", "--out", "{D}/new/r"}, 1},
      // Onto the run's own input, or onto another output of the run.
      {{"info", "{T}", "--json", "{T}"}, 2, "input"},
      {{"analyze", "{T}", "--json", "{T}"}, 2, "input"},
      {{"optim", "{T}", "--json", "{T}"}, 2, "input"},
      {{"compare", "{T}", "--md", "{T}"}, 2, "input"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--out", "{N}"}, 2, "input"},
      {{"cast", "--in", "{RAW}", "--out", "{RAW}"}, 2, "input"},
      {{"memory", "--validate", "{JSON_BAD}", "--json", "{JSON_BAD}"}, 2, "input"},
      {{"speed", "--calibration", "{JSON_BAD}", "--json", "{JSON_BAD}"}, 2, "input"},
      {{"analyze", "{T}", "--recipe", "{RECIPE_BADBASE}", "--md", "{RECIPE_BADBASE}"}, 2, "input"},
      {{"bench", "--from", "{BENCHDOC}", "--json", "{BENCHDOC}"}, 2, "input"},
      {{"speed", "--json", "{D}/a", "--markdown", "{D}/a"}, 2, "same file"},
      {{"speed", "--json", "-", "--markdown", "-"}, 2, "standard output"},
      {{"analyze", "{T}", "--json", "{D}/a", "--md", "{D}/./a"}, 2, "same file"},
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--out", "{D}/a", "--json", "{D}/a"}, 2, "same file"},
      // One output fails: none appears.
      {{"quantize", "--spec", "e4m3:g128", "--in", "{N}", "--out", "{D}/q.npy", "--json", "/proc/fp8sim.json"}, 1},
      {{"speed", "--json", "{D}/s.json", "--markdown", "/proc/fp8sim.md"}, 1},
      {{"analyze", "{T}", "--recipe", "bf16", "--no-gemm", "--json", "{D}/a.json", "--md", "/proc/fp8sim.md"}, 1},
      {{"bench", "--from", "{BENCHDOC}", "--json", "{D}/b.json", "--md", "/proc/fp8sim.md"}, 1},
  };
}

// One test per table, each case checked by check(): a failure names its command line.
TEST(CliCatalogue, MissingAndUnknownOptions) {
  for (const auto& c : option_cases()) check(c);
}
TEST(CliCatalogue, BadNumbers) {
  for (const auto& c : number_cases()) check(c);
}
TEST(CliCatalogue, EmptyStrings) {
  for (const auto& c : empty_string_cases()) check(c);
}
TEST(CliCatalogue, BadWords) {
  for (const auto& c : bad_word_cases()) check(c);
}
TEST(CliCatalogue, BadInputs) {
  for (const auto& c : input_cases()) check(c);
}
TEST(CliCatalogue, BadOutputs) {
  for (const auto& c : output_cases()) check(c);
}

// ---- mutated traces ------------------------------------------------------------------------------

// Seeded mutations of the sample trace, in shards that ctest runs side by side. Each mutated file
// must give a valid result (exit 0) or one line and exit 1, within the time limit: never a
// signal, a hang or a second line. One in eight also goes through analyze (which reads
// every tensor) and a few through optim.
constexpr int kMutations = 256;
constexpr int kShards = 8;

class CliTraceMutations : public ::testing::TestWithParam<int> {};

std::string mutate(const std::string& original, uint64_t seed, std::string* how) {
  std::string b = original;
  uint64_t s = seed;
  auto next = [&] { return s = test::splitmix64(s); };
  const size_t n = b.size();
  const int kind = static_cast<int>(next() % 100);
  if (kind < 35) {  // a few bytes anywhere
    const int k = 1 + static_cast<int>(next() % 8);
    for (int i = 0; i < k; ++i) b[next() % n] ^= static_cast<char>(1 + next() % 255);
    *how = fmt::format("flip {} bytes anywhere", k);
  } else if (kind < 70) {  // a few bytes in the first 256 KiB (superblock, root group, headers)
    const int k = 1 + static_cast<int>(next() % 4);
    for (int i = 0; i < k; ++i) b[next() % std::min<size_t>(n, 256 * 1024)] ^= static_cast<char>(1 + next() % 255);
    *how = fmt::format("flip {} bytes in the first 256 KiB", k);
  } else if (kind < 85) {  // truncated
    b.resize(next() % n);
    *how = fmt::format("truncate to {} bytes", b.size());
  } else if (kind < 95) {  // a zeroed range
    const size_t at = next() % n, len = std::min<size_t>(n - at, 1 + next() % 8192);
    std::fill(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + len), '\0');
    *how = fmt::format("zero {} bytes at {}", len, at);
  } else {  // a copied range
    const size_t from = next() % n, to = next() % n, len = std::min({n - from, n - to, size_t{1} + next() % 4096});
    std::copy(original.begin() + static_cast<long>(from), original.begin() + static_cast<long>(from + len),
              b.begin() + static_cast<long>(to));
    *how = fmt::format("copy {} bytes from {} to {}", len, from, to);
  }
  return b;
}

TEST_P(CliTraceMutations, EveryMutationGivesAResultOrOneLine) {
  const std::string original = test::file_content(test::sample_trace());
  ASSERT_FALSE(original.empty());
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/m.h5";
  RunOptions o;
  o.timeout_s = 60;
  // A few mutations make HDF5 loop: the probe gives up after this long (one line, exit 1).
  o.env["FP8SIM_TRACE_PROBE_TIMEOUT"] = "5";
  o.rlimit_as_mib = 4096;
  for (int i = GetParam(); i < kMutations; i += kShards) {
    std::string how;
    const std::string bytes = mutate(original, 0x5EED0000u + static_cast<uint64_t>(i), &how);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    std::vector<std::vector<std::string>> runs = {{"info", path, "--summary"}};
    if (i % 8 == 0) runs.push_back({"analyze", path, "--recipe", "bf16", "--no-gemm", "--tensors"});
    if (i % 32 == 0) runs.push_back({"optim", path, "--no-table1"});
    for (const auto& args : runs) {
      const RunResult r = test::run(args, o);
      const std::string what = fmt::format("mutation {} ({}): {}", i, how, args[0]);
      EXPECT_FALSE(r.timed_out) << what;
      EXPECT_EQ(r.signal, 0) << what << ": killed by " << strsignal(r.signal);
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << what << ": exit " << r.exit_code << "\n" << r.err;
      if (r.exit_code == 1) {
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\n" << r.err;
        EXPECT_EQ(r.err.rfind("fp8sim " + args[0] + ": error: ", 0), 0u) << what << "\n" << r.err;
      }
      EXPECT_EQ(r.err.find("internal check"), std::string::npos) << what << "\n" << r.err;
    }
    EXPECT_EQ(test::listing(dir), std::vector<std::string>{"m.h5"}) << "mutation " << i << " left files";
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, CliTraceMutations, ::testing::Range(0, kShards));

}  // namespace
}  // namespace fp8sim
