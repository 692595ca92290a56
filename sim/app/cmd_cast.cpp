// fp8sim cast: values or a raw file through an FP8 format.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <unistd.h>

#include "sim/app/cli.hpp"
#include "sim/common/check.hpp"
#include "sim/common/io.hpp"
#include "sim/formats/cast.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim {
namespace {

namespace po = boost::program_options;

float parse_value(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const float v = std::strtof(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') throw UsageError(fmt::format("'{}' is not a number", s));
  // strtof sets ERANGE on overflow (giving inf) and underflow (giving a subnormal or 0): both
  // are the correctly rounded fp32 value of the decimal, which is what we want to convert.
  return v;
}

// The largest code of a cast format: 255, or 15 / 63 for the 4- and 6-bit ones.
unsigned max_code(Format f) { return (1u << format_info(f).bits) - 1u; }

uint8_t parse_code(const std::string& s, Format f) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(s.c_str(), &end, 0);
  if (end == s.c_str() || *end != '\0' || errno || v > max_code(f))
    throw UsageError(fmt::format("'{}' is not an {} code (0..{}, decimal or 0x hex)", s, format_name(f), max_code(f)));
  return static_cast<uint8_t>(v);
}

std::string show_float(float v) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  return fmt::format("{}", v);
}

// Boost treats "-0.5" as an option. Every token that is neither an option nor an option's
// value is a VALUE: put them all, in order, behind "--".
std::vector<std::string> protect_negative_values(const std::vector<std::string>& args) {
  static const char* kTakesValue[] = {
      "--format", "-f", "--rounding", "-r", "--seed", "--in", "--out", "--input-dtype", "--chunk-elements"};
  auto looks_negative_number = [](const std::string& a) {
    return a.size() > 1 && a[0] == '-' &&
           (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.' || a == "-inf" || a == "-nan" ||
            a == "-infinity");
  };
  std::vector<std::string> opts, values;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      values.insert(values.end(), args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (a.size() > 1 && a[0] == '-' && !looks_negative_number(a)) {
      opts.push_back(a);
      const bool takes = std::find(std::begin(kTakesValue), std::end(kTakesValue), a) != std::end(kTakesValue);
      if (takes && i + 1 < args.size()) opts.push_back(args[++i]);
    } else {
      values.push_back(a);
    }
  }
  if (!values.empty()) {
    opts.push_back("--");
    opts.insert(opts.end(), values.begin(), values.end());
  }
  return opts;
}

size_t file_size_checked(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  FP8SIM_REQUIRE(!ec && std::filesystem::exists(st), "cannot open '{}': no such file", path);
  FP8SIM_REQUIRE(std::filesystem::is_regular_file(st), "'{}' is not a regular file (- reads standard input)", path);
  return static_cast<size_t>(std::filesystem::file_size(path));
}

int run_bulk(const std::string& in_path, const std::string& out_path, bool decode, const CastOptions& opts,
             const std::string& in_dtype, size_t chunk_elements) {
  const size_t in_elem = decode ? 1 : (in_dtype == "f32" ? 4 : 2);
  const bool from_stdin = in_path == "-";
  const std::string in_name = from_stdin ? std::string("standard input") : in_path;
  RunFiles files;
  files.input("--in", in_path);
  const int out_id = files.output("--out", out_path);
  // Standard input's length is known only at its end; a file's is checked before any work.
  const size_t bytes = from_stdin ? 0 : file_size_checked(in_path);
  FP8SIM_REQUIRE(bytes % in_elem == 0, "'{}' has {} bytes, not a whole number of {}-byte {} values", in_path, bytes,
                 in_elem, decode ? "code" : in_dtype);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(
      from_stdin ? ::fdopen(::dup(STDIN_FILENO), "rb") : std::fopen(in_path.c_str(), "rb"), &std::fclose);
  FP8SIM_REQUIRE(in != nullptr, "cannot open '{}': {}", in_name, std::strerror(errno));
  AtomicFile& out = files.stream(out_id);

  const size_t n_total = bytes / in_elem;
  const size_t kBuf = chunk_elements;  // bounded memory for any file size
  std::vector<unsigned char> ibuf(kBuf * in_elem);
  std::vector<unsigned char> obuf(kBuf * (decode ? 4 : 1));
  Progress progress(decode ? "decoding" : "casting", static_cast<double>(n_total));
  size_t done = 0;
  for (;;) {
    size_t n = 0;
    if (from_stdin) {
      const size_t got = std::fread(ibuf.data(), 1, kBuf * in_elem, in.get());
      FP8SIM_REQUIRE(!std::ferror(in.get()), "read from standard input failed: {}", std::strerror(errno));
      FP8SIM_REQUIRE(got % in_elem == 0, "standard input ended inside a {}-byte {} value", in_elem,
                     decode ? "code" : in_dtype);
      n = got / in_elem;
    } else {
      n = std::min(kBuf, n_total - done);
      FP8SIM_REQUIRE(std::fread(ibuf.data(), in_elem, n, in.get()) == n, "read from '{}' failed (file changed?)",
                     in_path);
    }
    if (n == 0) break;
    if (decode) {
      for (size_t i = 0; i < n; ++i)
        FP8SIM_REQUIRE(ibuf[i] <= max_code(opts.format), "'{}': byte {} is 0x{:02X}, not an {} code (0..{})", in_name,
                       done + i, ibuf[i], format_name(opts.format), max_code(opts.format));
      cast_fp8_to_f32(ibuf.data(), reinterpret_cast<float*>(obuf.data()), n, opts.format);
    } else {
      CastOptions o = opts;
      o.index_offset = done;  // stochastic rounding stays keyed on the global element index
      if (in_dtype == "f32") cast_f32_to_fp8(reinterpret_cast<const float*>(ibuf.data()), obuf.data(), n, o);
      else if (in_dtype == "bf16") cast_bf16_to_fp8(reinterpret_cast<const uint16_t*>(ibuf.data()), obuf.data(), n, o);
      else cast_fp16_to_fp8(reinterpret_cast<const uint16_t*>(ibuf.data()), obuf.data(), n, o);
    }
    out.write(obuf.data(), n * (decode ? 4 : 1));
    done += n;
    progress.update(static_cast<double>(done));
    if (!from_stdin && done == n_total) break;
  }
  progress.finish();
  files.commit();
  cli::note(fmt::format("{} {} values from '{}' to '{}'", decode ? "decoded" : "cast", done, in_name,
                        out_path == "-" ? std::string("standard output") : out_path));
  return 0;
}

int run_cast(const std::vector<std::string>& raw_args) {
  po::options_description opts("options");
  std::string format = "e4m3", rounding = "nearest", in_path, out_path, in_dtype = "f32";
  std::string seed_text = "0", chunk_text = std::to_string(size_t{1} << 24);
  std::vector<std::string> values;
  opts.add_options()("format,f", po::value(&format)->default_value("e4m3"),
                     "target format: e4m3 (OCP E4M3FN) or e5m2; the OCP MX 4- and 6-bit e2m1 (alias fp4), e2m3, "
                     "e3m2 (one code per byte, in its low bits)")(
      "no-saturate",
      "overflow to NaN (e4m3) / Inf (e5m2) instead of clamping to +-max (SATFINITE, the default; the 4- and "
      "6-bit formats have no Inf or NaN and always saturate)")(
      "rounding,r", po::value(&rounding)->default_value("nearest"), "nearest (ties to even) or stochastic")(
      "seed", po::value(&seed_text)->default_value("0"),
      "Philox seed for stochastic rounding (element i draws word i)")(
      "decode",
      "inputs are codes (0..255 or 0x..; 0..15 for e2m1, 0..63 for e2m3/e3m2): print / write their fp32 values")(
      "in", po::value(&in_path), "bulk mode: raw little-endian input file (float32, or --input-dtype); - : stdin")(
      "out", po::value(&out_path), "bulk mode: output file (uint8 codes, or float32 with --decode); - : stdout")(
      "input-dtype", po::value(&in_dtype)->default_value("f32"),
      "bulk input element type: f32, bf16 or fp16 (16-bit inputs are widened exactly: one rounding)")(
      "chunk-elements", po::value(&chunk_text)->default_value(std::to_string(size_t{1} << 24)),
      "bulk mode: elements per streamed chunk (memory is about 5 bytes x this; results do not depend on it)")(
      "value", po::value(&values), "values to convert (positional)");
  po::positional_options_description pos;
  pos.add("value", -1);
  po::variables_map vm;
  if (!cli::parse("cast", protect_negative_values(raw_args), opts, pos, vm,
                  "[--format e4m3|e5m2|e2m1|e2m3|e3m2] [--no-saturate] [--rounding nearest|stochastic --seed N] "
                  "VALUE...\n"
                  "       fp8sim cast --format F --in IN.f32 --out OUT.u8     (bulk, streaming)\n"
                  "       fp8sim cast --format F --decode CODE...  |  --decode --in IN.u8 --out OUT.f32",
                  "Converts fp32 values to FP8 codes with round-to-nearest-even (or stochastic rounding) and the\n"
                  "chosen overflow rule, and prints each input, its fp32 bits, the code and the code's value.\n"
                  "NaN inputs become the positive canonical NaN 0x7F (as cuda_fp8.h and the hardware do); in the\n"
                  "4- and 6-bit formats, which have no NaN, they become +max (as cuda_fp4.h / cuda_fp6.h do).\n"
                  "Examples:\n"
                  "  fp8sim cast --format e4m3 448 464 465 -0.0 0x1p-10\n"
                  "  fp8sim cast --format e5m2 --no-saturate 61439 61440 inf\n"
                  "  fp8sim cast --format e4m3 --rounding stochastic --seed 7 1.1 1.1 1.1\n"
                  "  fp8sim cast --format e4m3 --decode 0x7e 0x01 0xff\n"
                  "  fp8sim cast --format e2m1 0.25 0.75 5 7 -inf nan"))
    return 0;

  CastOptions co;
  try {
    co.format = parse_format(format);
  } catch (const UsageError&) {  // its list names every format, some of which cast does not take
    throw UsageError(fmt::format("unknown format '{}' (cast takes e4m3, e5m2, e2m1, e2m3 or e3m2)", format));
  }
  if (!is_small_float(co.format))
    throw UsageError(fmt::format("--format must be e4m3, e5m2, e2m1, e2m3 or e3m2, not '{}'", format));
  co.saturation = vm.count("no-saturate") ? Saturation::None : Saturation::Finite;
  validate_cast_options(co);
  co.rounding = parse_rounding(rounding);
  co.seed = parse_seed(seed_text, "--seed");
  const bool decode = vm.count("decode") > 0;
  if (in_dtype != "f32" && in_dtype != "bf16" && in_dtype != "fp16")
    throw UsageError(fmt::format("unknown --input-dtype '{}' (valid: f32, bf16, fp16)", in_dtype));

  if (vm.count("in") || vm.count("out")) {
    if (in_path.empty() || out_path.empty()) throw UsageError("bulk mode needs both --in and --out (non-empty)");
    if (!values.empty()) throw UsageError("give either VALUEs or --in/--out, not both");
    const uint64_t chunk = cli::parse_u64("--chunk-elements", chunk_text);
    if (chunk == 0 || chunk > (size_t{1} << 30)) throw UsageError("--chunk-elements must be in 1..2^30");
    return run_bulk(in_path, out_path, decode, co, in_dtype, chunk);
  }
  if (values.empty()) throw UsageError("no values given (see 'fp8sim cast --help')");

  auto value_of = [&](uint8_t c) {
    float v = 0;
    cast_fp8_to_f32(&c, &v, 1, co.format);
    return show_float(v);
  };
  std::vector<std::vector<std::string>> rows;
  if (decode) {
    for (const auto& s : values) {
      const uint8_t c = parse_code(s, co.format);
      rows.push_back({fmt::format("0x{:02X}", c), value_of(c)});
    }
    cli::print_table({"code", format}, rows);
    return 0;
  }
  std::vector<float> xs;
  for (const auto& s : values) xs.push_back(parse_value(s));
  std::vector<uint8_t> codes(xs.size());
  cast_f32_to_fp8_scalar(xs.data(), codes.data(), xs.size(), co);
  for (size_t i = 0; i < xs.size(); ++i) {
    rows.push_back(
        {values[i], fmt::format("0x{:08X}", f32_bits(xs[i])), fmt::format("0x{:02X}", codes[i]), value_of(codes[i])});
  }
  cli::print_table({"input", "fp32 bits", "code", format + " value"}, rows);
  return 0;
}

}  // namespace
}  // namespace fp8sim

FP8SIM_COMMAND("cast", "convert values or a raw file between fp32 and e4m3/e5m2/e2m1/e2m3/e3m2 (RNE, SR)",
               fp8sim::run_cast);
