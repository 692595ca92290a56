// fp8sim bench: kernel throughput on the GPU against the same-run copy ceiling and peers.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "sim/app/cli.hpp"
#include "sim/app/gpu_api.hpp"
#include "sim/bench/bench.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& s : items) {
    std::stringstream ss(s);
    std::string tok;
    while (std::getline(ss, tok, ','))
      if (!tok.empty()) out.push_back(tok);
  }
  return out;
}

// The command line's raw values, checked and defaulted by options_of.
struct BenchArgs {
  std::vector<std::string> ops;
  std::string json_out, md_out, peers, plan_out, coat_states, flush = "read", from;
  int warmup = -1, reps = -1, gemm_search = -1;
  double gemm_cooldown = -1, launch_lead = -1;
};

// The run's options (UsageError naming a bad value); defaults as docs/benchmarks.md describes.
bench::BenchOptions options_of(const BenchArgs& a, const po::variables_map& vm, const std::vector<std::string>& args) {
  bench::BenchOptions o;
  o.ops = split_list(a.ops);
  if (vm.count("ops") && o.ops.empty()) throw UsageError("--ops is empty (leave it out for every op)");
  bench::validate_ops(o.ops);
  o.smoke = vm.count("smoke") > 0;
  if (vm.count("warmup") && a.warmup < 0) throw UsageError("--warmup must be 0 or more");
  if (vm.count("reps") && a.reps < 1) throw UsageError("--reps must be at least 1");
  o.warmup = a.warmup >= 0 ? a.warmup : (o.smoke ? 2 : 5);
  o.reps = a.reps >= 0 ? a.reps : (o.smoke ? 5 : 20);
  if (o.reps < 1) throw UsageError("--reps must be at least 1");
  if (vm.count("gemm-search") && a.gemm_search < 0) throw UsageError("--gemm-search must be 0 or more");
  o.gemm_search = a.gemm_search >= 0 ? a.gemm_search : 0;
  if (vm.count("gemm-cooldown") && !(a.gemm_cooldown >= 0 && a.gemm_cooldown <= 60))
    throw UsageError("--gemm-cooldown must be between 0 and 60 seconds");
  o.gemm_cooldown_s = a.gemm_cooldown >= 0 ? a.gemm_cooldown : (o.smoke ? 0.0 : 2.0);
  if (vm.count("launch-lead") && !(a.launch_lead >= 0 && a.launch_lead <= 100000))
    throw UsageError("--launch-lead must be between 0 and 100000 microseconds");
  o.launch_lead_us = a.launch_lead >= 0 ? a.launch_lead : bench::kLaunchLeadUs;
  if (a.flush != "read" && a.flush != "write") throw UsageError("--flush must be read or write, not '" + a.flush + "'");
  o.flush_write = a.flush == "write";
  o.peers_path = a.peers;
  o.coat_states_dir = a.coat_states;
  {
    std::string cmdline = "fp8sim bench";
    for (const auto& arg : args) cmdline += " " + arg;
    o.command_line = cmdline;
  }
  return o;
}

// Reads the peers file into o.peers before any timing (a bad file fails first) and returns the
// warnings for settings the peers were timed with that differ from this run's.
std::string load_peers(bench::BenchOptions& o) {
  const std::string& peers = o.peers_path;
  std::string peer_warnings;
  if (!peers.empty()) {
    // Validate early: a bad peers file should fail before minutes of timing.
    const Json pj = Json::parse(read_text_file(peers), fmt::format("--peers '{}'", peers));
    FP8SIM_REQUIRE(pj.find("entries"), "'{}' has no 'entries' list (not written by scripts/bench_peers.py?)", peers);
    o.peers = bench::Peers::from_json(pj);
    // bench_peers.py writes its file at the start and after every entry, complete: false until the end.
    if (const Json* c = pj.find("complete"); c && c->is_bool() && !c->as_bool())
      peer_warnings += fmt::format(
          "fp8sim bench: warning: '{}' is incomplete (its run stopped before the end of its plan): kernels "
          "without a peer there show it as absent\n",
          peers);
    // The peers' timing settings the plan carried: the value they recorded with its unit, when it
    // differs from this run's ("" when it is the same).
    auto differs = [](const std::optional<double>& v, double ours, const char* unit) -> std::string {
      if (v && *v == ours) return "";
      return v ? Json(*v).dump(-1) + " " + unit : std::string("not recorded");
    };
    // The GEMM ratios compare like with like only if the peers idled as long before each GEMM.
    const bool gemm = o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), "gemm") != o.ops.end();
    if (const std::string p = differs(o.peers.gemm_cooldown_s, o.gemm_cooldown_s, "s"); gemm && !p.empty())
      peer_warnings += fmt::format(
          "fp8sim bench: warning: the peers' idle before each GEMM: {}, this run's {} s: the GEMM ratios "
          "compare different thermal states\n",
          p, o.gemm_cooldown_s);
    // Likewise the lead before each timed launch (without it, host-side launch work can be timed).
    if (const std::string p = differs(o.peers.launch_lead_us, o.launch_lead_us, "us"); !p.empty())
      peer_warnings += fmt::format(
          "fp8sim bench: warning: the peers' launch lead: {}, this run's {} us: "
          "a peer's host-side launch work may be in its times\n",
          p, o.launch_lead_us);
  }
  return peer_warnings;
}

int run_bench_cmd(const std::vector<std::string>& args) {
  po::options_description opts("options");
  BenchArgs a;
  opts.add_options()(
      "ops", po::value(&a.ops)->multitoken(),
      "ops to time (comma or space separated): copy, cast, quantize, cast-transpose, dequantize, amax, adamw, "
      "gemm (default: all)")("smoke",
                             "tiny sizes and few repeats: checks that every kernel runs, in well under a minute")(
      "warmup", po::value(&a.warmup), "untimed launches before timing (default 5; smoke 2)")(
      "reps", po::value(&a.reps), "timed launches per kernel, each after an L2 flush (default 20; smoke 5)")(
      "gemm-search", po::value(&a.gemm_search),
      "GEMM algorithm selection: besides timing cuBLASLt's 8 heuristic candidates, time up to N more "
      "configurations that cuBLASLt accepts (algorithm x tile x stages x cluster x swizzle; the "
      "enumeration and quick timings stop after ~6 s per GEMM) and keep the fastest (default 0: the heuristic's "
      "candidates only; on the H200 "
      "the search found nothing faster, and its minutes of GEMMs heat the GPU and slow what follows)")(
      "gemm-cooldown", po::value(&a.gemm_cooldown),
      "idle seconds before timing each GEMM, here and in bench_peers.py (through the plan): a GEMM's "
      "clock depends on the heat left by what ran before it (default 2; smoke 0)")(
      "peers", po::value(&a.peers), "JSON written by scripts/bench_peers.py: merged as each kernel's peers")(
      "coat-states", po::value(&a.coat_states),
      "COAT's optimizer states written by bench_peers.py --coat-dump: "
      "report the fraction of codes equal to COAT's kernel")(
      "write-plan", po::value(&a.plan_out),
      "write the plan (kernels, shapes, keys) for bench_peers.py and exit; "
      "needs no GPU")("from", po::value(&a.from),
                      "no timing: re-evaluate the targets of a bench document written by an "
                      "earlier run (its --json output) and write it again with --json / --md; "
                      "with --peers, those peers are merged first (timed in the same session as "
                      "the document); needs no GPU")(
      "json", po::value(&a.json_out), "write the bench document (reports/h200/bench.json) here (- : stdout)")(
      "md", po::value(&a.md_out), "write the Markdown report (reports/h200/bench.md) here (- : stdout)");
  // Settings that reproduce how a document was measured, for comparing with it; the defaults are
  // the method docs/benchmarks.md describes.
  po::options_description expert("expert options (to compare with a document measured another way)");
  expert.add_options()("flush", po::value(&a.flush),
                       "how the L2 is flushed before each timed launch: read (default: a 256 MiB "
                       "read, leaving clean lines) or write (a 256 MiB write, whose dirty lines are "
                       "written back during the timed launch)")(
      "launch-lead", po::value(&a.launch_lead),
      "microseconds of GPU work before each timed launch, here and in bench_peers.py (through the plan): "
      "the L2 flush is repeated until it lasts this long, and the host enqueues the launch meanwhile, so "
      "host-side launch work (Python, torch.compile's guards) is never timed (default 500; 0: one flush only)");
  opts.add(expert);
  po::positional_options_description pos;
  po::variables_map vm;
  if (!cli::parse(
          "bench", args, opts, pos, vm, "[--ops OP,...] [--smoke] [--peers PEERS.json] [--json OUT] [--md OUT]",
          "Times every fp8sim GPU kernel (casts, quantizers for every granularity and scale mode, the\n"
          "per-tensor amax of COAT Fig. 4(b), the AdamW steps with fp32 / FP8 / BF16 states, and the\n"
          "cuBLASLt GEMMs) on sizes of several hundred MB and on Llama-2-7B shapes: median / min / max\n"
          "over warm, L2-flushed repeats timed with CUDA events, GB/s (each input byte read once, each\n"
          "output byte written once) or TFLOP/s, the fraction of the device-to-device copy bandwidth\n"
          "measured in the same run, and the speedup over the best peer (PyTorch eager / torch.compile,\n"
          "torch.optim.AdamW(fused=True), torch._scaled_mm, COAT's kernel) timed by\n"
          "scripts/bench_peers.py on the same plan. The kernel targets (docs/benchmarks.md) are evaluated.\n"
          "Needs a CUDA build and a GPU (except --write-plan).\n"
          "Examples:\n"
          "  fp8sim bench --write-plan plan.json && python3 scripts/bench_peers.py --plan plan.json --json peers.json\n"
          "  fp8sim bench --peers peers.json --json bench.json --md bench.md\n"
          "  fp8sim bench --ops quantize,gemm --smoke\n"
          "  fp8sim bench --from reports/h200/bench.json --md bench.md   # re-evaluate targets, no GPU"))
    return 0;
  bench::BenchOptions o = options_of(a, vm, args);
  for (const char* opt : {"from", "peers", "coat-states"})
    if (vm.count(opt) && vm[opt].as<std::string>().empty())
      throw UsageError(fmt::format("--{} is empty (give a file name)", opt));
  RunFiles files;
  files.input("--peers", a.peers);
  files.input("--from", a.from);
  files.input("--coat-states", a.coat_states);
  const int plan_id = vm.count("write-plan") ? files.output("--write-plan", a.plan_out) : -1;
  const int json_id = vm.count("json") ? files.output("--json", a.json_out) : -1;
  const int md_id = vm.count("md") ? files.output("--md", a.md_out) : -1;
  if (plan_id >= 0) {
    files.write(plan_id, bench::plan_json(o).dump(2) + "\n");
    files.commit();
    if (a.plan_out != "-")
      cli::note(fmt::format("wrote the bench plan ({} kernels) to '{}'", bench::make_plan(o).size(), a.plan_out));
    return 0;
  }
  // The end of both paths: the targets line, then the document to --json and its Markdown to --md
  // (rendered by the caller first, so a document that cannot be rendered writes nothing).
  auto render = [&](const bench::BenchDoc& doc) { return md_id < 0 ? std::string() : bench::render_markdown(doc); };
  auto emit = [&](const bench::BenchDoc& doc, const std::string& md) {
    if (const auto& t = doc.targets_summary)
      fmt::print("targets: {} met, {} missed, {} unmeasured\n", t->met, t->missed, t->unmeasured);
    if (json_id >= 0) files.write(json_id, doc.to_json().dump(2) + "\n");
    if (md_id >= 0) files.write(md_id, md);
    std::fflush(stdout);
    files.commit();
  };
  if (!a.from.empty()) {
    if (json_id < 0 && md_id < 0) throw UsageError("--from needs --json or --md (where to write the result)");
    if (!a.coat_states.empty())
      throw UsageError("--coat-states needs a timed run (COAT's agreement is measured with the kernels), not --from");
    const Json j = Json::parse(read_text_file(a.from), fmt::format("--from '{}'", a.from));
    FP8SIM_REQUIRE(j.is_object() && j.find("kernels") && j.at("kernels").is_array(),
                   "'{}' is not a bench document (no 'kernels' list; written by fp8sim bench --json?)", a.from);
    bench::BenchDoc doc;
    try {
      doc = bench::BenchDoc::from_json(j);
    } catch (const Error& e) {
      throw Error(fmt::format("'{}' is not a usable bench document: {}", a.from, e.what()));
    }
    // The peers' settings are compared with the document's run, not with this command's defaults.
    if (doc.gemm_cooldown_s) o.gemm_cooldown_s = *doc.gemm_cooldown_s;
    if (doc.launch_lead_us) o.launch_lead_us = *doc.launch_lead_us;
    o.ops.clear();
    for (const auto& k : doc.kernels)
      if (std::find(o.ops.begin(), o.ops.end(), k.op) == o.ops.end()) o.ops.push_back(k.op);
    fp8sim::eprint("{}", load_peers(o));
    std::string md;
    try {
      doc.rerendered = o.command_line;  // the timing and its command stay the original run's
      if (!o.peers_path.empty()) bench::attach_peers(doc, o.peers, o.peers_path);  // over the document's
      bench::evaluate_targets(doc);
      md = render(doc);
    } catch (const Error& e) {
      throw Error(fmt::format("'{}' is not a usable bench document: {}", a.from, e.what()));
    }
    emit(doc, md);
    return 0;
  }
  const std::string peer_warnings = load_peers(o);  // printed once the GPU is known to be there
  gpu::Backend& gpu = gpu_api::backend();
  gpu.require("bench times CUDA kernels and needs a GPU");
  fp8sim::eprint("{}", peer_warnings);
  const bench::BenchDoc doc = gpu.run_bench(o);
  const auto rows = bench::table_rows(doc);
  cli::print_table(bench::table_header(), rows);
  if (doc.ceiling) fmt::print("ceiling: device-to-device copy {:.0f} GB/s\n", doc.ceiling->gbps);
  if (doc.coat_agreement && doc.coat_agreement->target)
    fmt::print("codes equal to COAT's kernel (non-degenerate groups, worst moment and step): {:.5f}\n",
               doc.coat_agreement->target->value);
  emit(doc, render(doc));
  int failed = 0;
  for (const auto& k : doc.kernels)
    if (k.status && k.status->rfind("error", 0) == 0) ++failed;
  if (failed) fp8sim::eprint("fp8sim bench: {} kernel(s) failed (see their status)\n", failed);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("bench", "time the GPU kernels against the copy-bandwidth ceiling and PyTorch / COAT peers",
               fp8sim::run_bench_cmd);
