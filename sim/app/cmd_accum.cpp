// fp8sim accum: the accumulation study (sim/gemm/tc_study.hpp).
#include <fmt/format.h>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/output.hpp"
#include "sim/gemm/tc_study.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

int64_t parse_int(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) throw UsageError(fmt::format("{}: '{}' is not an integer", option, text));
  return v;
}

std::string pct(double v) { return fmt::format("{:.3g}%", 100.0 * v); }

std::string markdown(const gemm::AccumStudy& st, const std::string& command) {
  std::string md = "# fp8sim accum: tensor-core accumulation error against K\n\n";
  md += fmt::format("- command: `{}`\n- outputs per K: {} x {}; seed {}\n\n", command, st.options.m, st.options.n,
                    st.options.seed);
  md +=
      "Relative L2 error ||Y - Y_exact|| / ||Y_exact|| of a GEMM whose operands are per-tensor E4M3 codes\n"
      "(BF16: bf16-rounded values), against the exact product of those same operands: the accumulation's\n"
      "error alone. `tc promote I`: Hopper's FP8 tensor cores with the partial sum moved to fp32 every I\n"
      "elements of K (cuBLASLt's default is 128); `tc fast`: never (cuBLASLt's fast accumulation);\n"
      "`fp32 fma`: one fp32 fused multiply-add per element in K order; `bf16 tc`: BF16 tensor cores.\n"
      "In brackets: the largest elementwise error over the rms of Y.\n";
  for (const auto& [kind, series] : st.results) {
    md += fmt::format("\n## {}\n\n| K |", kind);
    for (const auto& s : series) md += " " + s.config + " |";
    md += "\n|---:|";
    for (size_t i = 0; i < series.size(); ++i) md += "---:|";
    md += "\n";
    for (size_t ki = 0; ki < st.options.ks.size(); ++ki) {
      md += fmt::format("| {} |", st.options.ks[ki]);
      for (const auto& s : series) md += fmt::format(" {} ({:.3g}) |", pct(s.rel_l2[ki]), s.max_over_rms[ki]);
      md += "\n";
    }
  }
  return md;
}

int run_accum_cmd(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string ks_raw, iv_raw, data_raw, json_out, md_out;
  int64_t m = 64, n = 64;
  std::string seed_text = "1";
  opts.add_options()("k", po::value(&ks_raw), "K values, comma separated (default 128,256,...,16384)")(
      "promote", po::value(&iv_raw),
      "promotion intervals of the FP8 tensor cores: multiples of 32, or 0 / never for fast accumulation "
      "(default 32,128,512,never)")("data", po::value(&data_raw),
                                    "normal, positive, lognormal (comma separated; default all three)")(
      "m", po::value(&m)->default_value(64), "rows of Y per K")(
      "n", po::value(&n)->default_value(64), "columns of Y per K")("seed", po::value(&seed_text)->default_value("1"),
                                                                   "seed of the operands")(
      "json", po::value(&json_out), "write the study (with the plot data scripts/plots.py draws) here (- : stdout)")(
      "md", po::value(&md_out), "write the Markdown tables here (- : stdout)");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!cli::parse("accum", args, opts, pos, vm, "[--k LIST] [--promote LIST] [--data LIST] [--json OUT] [--md OUT]",
                  "How much Hopper's FP8 tensor-core accumulation adds to a GEMM's error as K grows, and what\n"
                  "promoting the partial sum to fp32 every I elements of K buys back. The GEMMs run on the CPU\n"
                  "model of the tensor cores that reproduces cuBLASLt's outputs bit for bit (fp8sim compare checks\n"
                  "it on the GPU); the operands are per-tensor E4M3 codes of normal, positive or lognormal data,\n"
                  "and each error is against the exact product of those same operands, so quantization error is\n"
                  "excluded. An fp32 FMA chain and the BF16 tensor cores are shown beside.\n"
                  "Examples:\n"
                  "  fp8sim accum\n"
                  "  fp8sim accum --k 1024,4096,16384 --promote 128,never --data positive\n"
                  "  fp8sim accum --json accum.json --md accum.md && python3 scripts/plots.py accum.json ."))
    return 0;
  gemm::AccumStudyOptions o;
  if (vm.count("k")) {
    o.ks.clear();
    for (const auto& t : cli::comma_list("--k", ks_raw)) o.ks.push_back(parse_int("--k", t));
  }
  if (vm.count("promote")) {
    o.intervals.clear();
    for (const auto& t : cli::comma_list("--promote", iv_raw)) {
      const int64_t v = t == "never" ? 0 : parse_int("--promote", t);
      if (v < 0 || v > (int64_t{1} << 30)) throw UsageError(fmt::format("--promote: {} is out of range", t));
      o.intervals.push_back(static_cast<int>(v));
    }
  }
  if (vm.count("data")) o.data = cli::comma_list("--data", data_raw);
  for (const int64_t k : o.ks)
    if (k < 1 || k > (int64_t{1} << 20)) throw UsageError(fmt::format("--k: {} is outside 1 .. 1048576", k));
  if (m < 1 || n < 1 || m > 4096 || n > 4096) throw UsageError("--m and --n must be 1 .. 4096");
  o.m = m;
  o.n = n;
  o.seed = parse_seed(seed_text, "--seed");
  RunFiles files;
  const int json_id = vm.count("json") ? files.output("--json", json_out) : -1;
  const int md_id = vm.count("md") ? files.output("--md", md_out) : -1;
  std::string command = "fp8sim accum";
  for (const auto& a : args) command += " " + a;

  const gemm::AccumStudy st = gemm::run_accum_study(o);
  for (const auto& [kind, series] : st.results) {
    fmt::print("{} data: relative L2 error of Y against the exact product of the same operands\n", kind);
    std::vector<std::string> header = {"K"};
    for (const auto& s : series) header.push_back(s.config);
    std::vector<std::vector<std::string>> rows;
    for (size_t ki = 0; ki < o.ks.size(); ++ki) {
      std::vector<std::string> r = {fmt::format("{}", o.ks[ki])};
      for (const auto& s : series) r.push_back(pct(s.rel_l2[ki]));
      rows.push_back(r);
    }
    cli::print_table(header, rows);
    fmt::print("\n");
  }
  if (json_id >= 0) {
    Json doc = st.to_json();
    doc["command"] = command;
    // scripts/plots.py draws plot_data's entries (its "accum" drawer).
    Json plot = Json::object();
    plot["file"] = "accum.png";
    plot["ks"] = doc.at("ks");
    plot["data"] = doc.at("data");
    Json pd = Json::object();
    pd["accum"] = plot;
    doc["plot_data"] = pd;
    files.write(json_id, doc.dump(1) + "\n");
  }
  if (md_id >= 0) files.write(md_id, markdown(st, command));
  std::fflush(stdout);
  files.commit();
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("accum", "how much Hopper's FP8 tensor-core accumulation adds to a GEMM's error, by K and promotion",
               fp8sim::run_accum_cmd);
