#include "sim/gemm/tc_study.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/gemm/tc_gemm.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::gemm {

const std::vector<std::string>& accum_data_kinds() {
  static const std::vector<std::string> k = {"normal", "positive", "lognormal"};
  return k;
}

namespace {

std::vector<float> draw(const std::string& kind, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) {
    const double g = nd(rng);
    if (kind == "normal") x = static_cast<float>(g);
    if (kind == "positive") x = static_cast<float>(std::fabs(g));
    if (kind == "lognormal") x = static_cast<float>(std::pow(10.0, nd(rng)) * (g < 0 ? -1.0 : 1.0));
  }
  return v;
}

// Errors of y against the exact product e (m x n).
void score(const std::vector<float>& y, const std::vector<double>& e, AccumSeries& s) {
  double err2 = 0, ref2 = 0, worst = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    const double d = static_cast<double>(y[i]) - e[i];
    err2 += d * d;
    ref2 += e[i] * e[i];
    worst = std::max(worst, std::fabs(d));
  }
  s.rel_l2.push_back(ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0);
  s.max_over_rms.push_back(ref2 > 0 ? worst / std::sqrt(ref2 / static_cast<double>(e.size())) : 0.0);
}

std::vector<double> exact_product(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t n,
                                  int64_t k) {
  std::vector<double> e(static_cast<size_t>(m * n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double s = 0;  // FP8 and BF16 products are exact in double; the sum in long double
      for (int64_t t = 0; t < k; ++t) s += static_cast<double>(x[i * k + t]) * w[j * k + t];
      e[i * n + j] = static_cast<double>(s);
    }
  return e;
}

}  // namespace

AccumStudy run_accum_study(const AccumStudyOptions& o) {
  for (const auto& d : o.data)
    if (std::find(accum_data_kinds().begin(), accum_data_kinds().end(), d) == accum_data_kinds().end())
      throw UsageError(fmt::format("unknown data kind '{}' (valid: normal, positive, lognormal)", d));
  for (const int64_t k : o.ks) FP8SIM_REQUIRE(k >= 1, "K must be positive, got {}", k);
  for (const int iv : o.intervals)
    if (iv != 0 && (iv < 32 || iv % 32 != 0))
      throw UsageError(fmt::format("promotion interval {} is not 0 (never) or a positive multiple of 32", iv));
  FP8SIM_REQUIRE(o.m >= 1 && o.n >= 1, "the study needs m, n >= 1");
  AccumStudy st;
  st.options = o;
  for (size_t di = 0; di < o.data.size(); ++di) {
    const std::string& kind = o.data[di];
    std::vector<AccumSeries> series;
    for (const int iv : o.intervals) series.push_back({iv == 0 ? "tc fast" : fmt::format("tc promote {}", iv), {}, {}});
    series.push_back({"fp32 fma", {}, {}});
    series.push_back({"bf16 tc", {}, {}});
    for (size_t ki = 0; ki < o.ks.size(); ++ki) {
      const int64_t k = o.ks[ki], m = o.m, n = o.n;
      const uint64_t seed = o.seed * 1000003u + di * 7919u + ki;
      const std::vector<float> xr = draw(kind, m * k, seed), wr = draw(kind, n * k, seed + 1);
      // FP8: per-tensor E4M3 codes; the exact product of their dequantized values.
      const QuantizedTensor qx = quantize(xr.data(), std::vector<int64_t>{m, k}, QuantSpec::parse("e4m3:tensor"));
      const QuantizedTensor qw = quantize(wr.data(), std::vector<int64_t>{n, k}, QuantSpec::parse("e4m3:tensor"));
      const std::vector<float> dx = dequantize(qx), dw = dequantize(qw);
      // The exact product of codes times the product of the scales: the tensor cores' target.
      const std::vector<double> exact = exact_product(dx, dw, m, n, k);
      std::vector<float> y(static_cast<size_t>(m * n));
      for (size_t s = 0; s < o.intervals.size(); ++s) {
        TcGemmConfig c;
        c.scaling = 1;
        c.fast_accum = o.intervals[s] == 0;
        if (!c.fast_accum) c.promote_interval = o.intervals[s];
        tc_gemm(qx.codes.data(), qw.codes.data(), qx.scales.data(), qw.scales.data(), y.data(), m, n, k, c);
        score(y, exact, series[s]);
      }
      // A CUDA-core loop: one fp32 fused multiply-add per element, in K order.
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float acc = 0.0f;
          for (int64_t t = 0; t < k; ++t) acc = std::fma(dx[i * k + t], dw[j * k + t], acc);
          y[i * n + j] = acc;
        }
      score(y, exact, series[o.intervals.size()]);
      // BF16 tensor cores on the bf16-rounded operands, against their own exact product.
      std::vector<uint16_t> bx(static_cast<size_t>(m * k)), bw(static_cast<size_t>(n * k));
      std::vector<float> fx(bx.size()), fw(bw.size());
      for (size_t i = 0; i < bx.size(); ++i) fx[i] = bf16_to_f32(bx[i] = f32_to_bf16_rne(xr[i]));
      for (size_t i = 0; i < bw.size(); ++i) fw[i] = bf16_to_f32(bw[i] = f32_to_bf16_rne(wr[i]));
      TcGemmConfig b;
      b.x_format = b.w_format = Format::BF16;
      b.scaling = 0;
      tc_gemm(reinterpret_cast<const uint8_t*>(bx.data()), reinterpret_cast<const uint8_t*>(bw.data()), nullptr,
              nullptr, y.data(), m, n, k, b);
      score(y, exact_product(fx, fw, m, n, k), series[o.intervals.size() + 1]);
    }
    st.results.emplace_back(kind, std::move(series));
  }
  return st;
}

Json AccumStudy::to_json() const {
  Json j = Json::object();
  Json ks = Json::array();
  for (const int64_t k : options.ks) ks.push_back(k);
  j["ks"] = ks;
  j["m"] = options.m;
  j["n"] = options.n;
  j["seed"] = static_cast<double>(options.seed);
  Json data = Json::object();
  for (const auto& [kind, series] : results) {
    Json arr = Json::array();
    for (const AccumSeries& s : series) {
      Json e = Json::object();
      e["config"] = s.config;
      Json a = Json::array(), b = Json::array();
      for (const double v : s.rel_l2) a.push_back(v);
      for (const double v : s.max_over_rms) b.push_back(v);
      e["rel_l2"] = a;
      e["max_over_rms"] = b;
      arr.push_back(e);
    }
    data[kind] = arr;
  }
  j["data"] = data;
  return j;
}

}  // namespace fp8sim::gemm
