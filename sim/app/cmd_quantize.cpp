// fp8sim quantize: a .npy tensor through a QuantSpec; writes the dequantized tensor, prints the
// error metrics, optionally writes them (and the codes / scales) for machines.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/common/npy.hpp"
#include "sim/quant/quantize_report.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

InputDtype resolve_dtype(const NpyArray& a, const std::string& dtype_opt, const std::string& path) {
  const std::string d = dtype_opt;
  if (d != "auto" && d != "f32" && d != "float32" && d != "bf16" && d != "bfloat16" && d != "fp16" && d != "float16")
    throw UsageError(fmt::format("unknown --dtype '{}' (valid: auto, f32, bf16, fp16)", d));
  const bool want_f32 = d == "f32" || d == "float32";
  const bool want_bf16 = d == "bf16" || d == "bfloat16";
  const bool want_fp16 = d == "fp16" || d == "float16";
  switch (a.dtype) {
    case NpyDtype::F32:
      FP8SIM_REQUIRE(d == "auto" || want_f32, "'{}' holds float32 data, not {}", path, d);
      return InputDtype::F32;
    case NpyDtype::F16:
      FP8SIM_REQUIRE(d == "auto" || want_fp16, "'{}' holds float16 data, not {}", path, d);
      return InputDtype::FP16;
    case NpyDtype::V2:  // ml_dtypes' bfloat16
      FP8SIM_REQUIRE(d == "auto" || want_bf16 || want_fp16, "'{}' holds 16-bit data, not {}", path, d);
      return want_fp16 ? InputDtype::FP16 : InputDtype::BF16;
    case NpyDtype::U16:
      FP8SIM_REQUIRE(want_bf16 || want_fp16,
                     "'{}' holds raw uint16 data: say how to read it with --dtype bf16 or --dtype fp16", path);
      return want_bf16 ? InputDtype::BF16 : InputDtype::FP16;
    case NpyDtype::U8:
      break;
  }
  throw Error(fmt::format("'{}' holds uint8 data; quantize reads float32, float16 or bfloat16 (raw uint16)", path));
}

int run_quantize_cmd(const std::vector<std::string>& args) {
  po::options_description opts("options");
  std::string spec_text, in_path, out_path, json_path, codes_prefix, dtype = "auto";
  int threads = 0;
  opts.add_options()("spec,s", po::value(&spec_text),
                     "quantization spec FORMAT:GRANULARITY[:KEY=VALUE...] or an alias (required)")(
      "in,i", po::value(&in_path),
      "input .npy (float32; float16; bfloat16 as ml_dtypes '<V2' or raw uint16 + --dtype); "
      "- : standard input")("out,o", po::value(&out_path),
                            "output .npy: the dequantized tensor, float32, same shape (- : stdout); "
                            "without --out only the metrics are printed")(
      "json", po::value(&json_path), "write the metrics (and DE histogram / per-group k) as JSON (- : stdout)")(
      "codes", po::value(&codes_prefix),
      "also write PREFIX.codes.npy (uint8 codes, or uint16 for bf16/fp16), PREFIX.scales.npy (float32 value of each "
      "stored scale, shape = group grid) and with DE PREFIX.k.npy, PREFIX.c.npy")(
      "dtype", po::value(&dtype)->default_value("auto"), "how to read the input: auto, f32, bf16 or fp16")(
      "threads", po::value(&threads)->default_value(0), "worker threads (0: all cores)");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!cli::parse(
          "quantize", args, opts, pos, vm, "--spec SPEC --in X.npy [--out Y.npy] [--json STATS.json] [--codes PREFIX]",
          "Quantizes a tensor through a spec (format, granularity, scale mode, dynamic range expansion,\n"
          "delayed scaling, rounding, saturation), writes the dequantized tensor (--out) and prints the error:\n"
          "mse, nmse (relative L2), snr_db, max_abs_err, max_rel_err, cosine, underflow_frac (nonzeros\n"
          "flushed to zero), saturated_frac (|x/s| above the format's max).\n"
          "Spec: FORMAT:GRANULARITY[:KEY=VALUE...]  FORMAT e4m3|e5m2|e2m1|e2m3|e3m2|bf16|fp16, GRANULARITY\n"
          "tensor|row|col|gN (1xN groups along the last dim)|bRxC (blocks); keys scale=fp32|pow2|e8m0|\n"
          "bf16|none|e4m3 (e4m3: NVFP4's E4M3 group scales under an fp32 tensor scale), eps=E,\n"
          "eps_add=fp32|fp64, de=coat|robust, de_target=e4m3|e5m2|e2m1|e2m3|e3m2,\n"
          "delayed=H[,max|recent][,margin=M] (a single tensor sees one step of it),\n"
          "round=nearest|stochastic, seed=N, sat=finite|none;\n"
          "how a peer computes: amax_floor=F, scale_div=ieee|rcp|fdiv (amax/fmax as an IEEE division,\n"
          "times RN(1/fmax), or the GPU's div.full), apply=div|rcp|fdiv|mul (x/s, x*RN(1/s), div.full,\n"
          "TE's x*fmax/amax), mx=rceil|floor|ceil|even (E8M0 rounding), de_min=nonzero|kernel.\n"
          // NOT-RECIPES: formats and spec aliases.
          "Aliases named after a peer reproduce its kernel bit for bit on finite inputs (docs/numerics.md):\n"
          "deepseek-act, deepseek-w (+ -ue8m0), te-current, te-current-pow2, te-delayed, te-mxfp8,\n"
          "torchao-mxfp8 (FLOOR), torchao-mxfp8-rceil, coat-act, coat-w, coat-opt, coat-opt-noexpand;\n"
          "mxfp8 and mxfp8-e5m2 are OCP MXFP8 as TE rounds it; mxfp4, mxfp6-e2m3 and mxfp6-e3m2 are OCP MX\n"
          "v1.0's 4- and 6-bit formats (E8M0 floor scales over 32 elements; scale=e8m0|fp32|pow2|e4m3, de=coat,\n"
          "no delayed; --codes writes one code per byte, the byte counts are packed);\n"
          "nvfp4 and nvfp4-w are NVFP4 as TransformerEngine's reference quantizer computes it (1x16 and\n"
          "16x16 groups). rht=N (N = 4, 16, 64 or 256) first applies a random Hadamard transform to each\n"
          "row's N-element blocks, as NVFP4 training does for weight-gradient operands (TE's signs for N = 16,\n"
          "rht_seed=S for Philox signs): codes and scales are the transformed tensor's, --out and the\n"
          "error are back in the input's domain.\n"
          "bf16/fp16 store 16-bit values, unscaled unless scale=fp32|pow2.\n"
          "NaN inputs give NaN codes, +-Inf saturate; scales use the finite elements only.\n"
          "Examples:\n"
          "  fp8sim quantize --spec e4m3:g128 --in x.npy --out xq.npy\n"
          "  fp8sim quantize --spec e4m3:g128:de=coat --in m.npy --out mq.npy --json m.json\n"
          "  fp8sim quantize --spec mxfp8 --in w.npy --out wq.npy --codes w_mx\n"
          "  fp8sim quantize --spec mxfp4 --in w.npy --json w_fp4.json\n"
          "  fp8sim quantize --spec nvfp4:rht=16 --in grad_t.npy --json g.json\n"
          "  fp8sim quantize --spec e4m3:g16:scale=bf16 --in act_bf16.npy --dtype bf16 --out a.npy"))
    return 0;
  if (spec_text.empty()) throw UsageError("--spec is required (see 'fp8sim quantize --help')");
  if (in_path.empty()) throw UsageError("--in is required (a .npy file, or - for standard input)");
  cli::check_threads(threads);
  std::error_code ec;
  if (vm.count("codes") && (codes_prefix.empty() || codes_prefix == "-" || codes_prefix.ends_with('/') ||
                            std::filesystem::is_directory(codes_prefix, ec)))
    throw UsageError("--codes takes a file name prefix such as out/w (it writes out/w.codes.npy and more), not '" +
                     codes_prefix + "'");
  // Without --out the run computes and prints the metrics only.
  RunFiles files;
  files.input("--in", in_path);
  const int out_id = vm.count("out") ? files.output("--out", out_path) : -1;
  const int json_id = vm.count("json") ? files.output("--json", json_path) : -1;
  auto stage_npy = [&](const std::string& path, NpyDtype dt, std::vector<int64_t> shape, const void* data,
                       size_t bytes) {
    files.write(files.output("--codes", path), [=](AtomicFile& f) { write_npy_to(f, dt, shape, data, bytes); });
  };

  const QuantSpec spec = QuantSpec::parse(spec_text);
  const NpyArray in = read_npy(in_path);
  const InputDtype idt = resolve_dtype(in, dtype, in_path);
  FP8SIM_REQUIRE(in.numel() > 0, "'{}' is empty (shape has a zero dimension)", in_path);

  QuantizeOptions qo;
  qo.threads = threads;
  std::unique_ptr<DelayedScaler> scaler;
  if (spec.delayed.enabled()) {
    scaler = std::make_unique<DelayedScaler>(spec);
    qo.delayed = scaler.get();
  }
  Progress progress("quantizing", 1.0);
  QuantizeResult r = run_quantize(in.data.data(), idt, in.shape, spec, qo);
  progress.finish();
  r.json["input"] = in_path;
  r.json["input_dtype"] = idt == InputDtype::F32 ? "float32" : (idt == InputDtype::BF16 ? "bfloat16" : "float16");

  // Every output is computed before the first is staged; they are moved into place together.
  if (out_id >= 0)
    files.write(out_id, [&](AtomicFile& f) {
      write_npy_to(f, NpyDtype::F32, in.shape, r.dequantized.data(), r.dequantized.size() * 4);
    });
  if (!codes_prefix.empty()) {
    const QuantizedTensor& q = r.q;
    stage_npy(codes_prefix + ".codes.npy", q.spec.is_16bit() ? NpyDtype::U16 : NpyDtype::U8, in.shape, q.codes.data(),
              q.codes.size());
    if (!q.spec.is_passthrough()) {
      const std::vector<int64_t> grid{q.geometry.grid_rows, q.geometry.grid_cols};
      stage_npy(codes_prefix + ".scales.npy", NpyDtype::F32, grid, q.scales.data(), q.scales.size() * 4);
      if (q.spec.has_expand()) {
        stage_npy(codes_prefix + ".k.npy", NpyDtype::F32, grid, q.expand_k.data(), q.expand_k.size() * 4);
        stage_npy(codes_prefix + ".c.npy", NpyDtype::F32, grid, q.expand_c.data(), q.expand_c.size() * 4);
      }
    }
  }
  if (json_id >= 0) files.write(json_id, r.json.dump(2) + "\n");
  files.commit();

  const ErrorStats& s = r.stats;
  std::vector<std::vector<std::string>> rows = {
      {"spec", spec.to_string()},
      {"elements", fmt::format("{}", in.numel())},
      {"groups", fmt::format("{}", r.groups())},
      {"bits/element", num(r.bits_per_element())},
      {"mse", num(s.mse())},
      {"nmse", num(s.nmse())},
      {"snr_db", num(s.snr_db())},
      {"max_abs_err", num(s.max_abs_err)},
      {"max_rel_err", num(s.max_rel_err)},
      {"cosine", num(s.cosine())},
      {"underflow_frac", num(s.underflow_frac())},
      {"saturated_frac", num(s.saturated_frac())},
  };
  if (s.nonfinite) rows.push_back({"nonfinite inputs", fmt::format("{}", s.nonfinite)});
  if (const Json* ex = r.json.find("expand")) {
    rows.push_back({"k min/mean/max",
                    fmt::format("{} / {} / {}", num(ex->at("k_min").is_null() ? NAN : ex->at("k_min").as_number()),
                                num(ex->at("k_mean").is_null() ? NAN : ex->at("k_mean").as_number()),
                                num(ex->at("k_max").is_null() ? NAN : ex->at("k_max").as_number()))});
    if (spec.expand == ExpandMode::Robust)
      rows.push_back({"fallback groups", fmt::format("{}", ex->at("fallback_groups").as_int())});
  }
  cli::print_table({"metric", "value"}, rows);
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("quantize", "quantize a .npy tensor through a spec (granularity, scales, DE) and report the error",
               fp8sim::run_quantize_cmd);
