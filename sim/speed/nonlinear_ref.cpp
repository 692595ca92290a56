#include "sim/speed/nonlinear_ref.hpp"

#include <algorithm>
#include <cmath>

#include "sim/common/check.hpp"
#include "sim/formats/fp8.hpp"
#include "sim/speed/group16.hpp"

namespace fp8sim::speed::ref {

float bf16f(uint16_t h) { return bf16_to_f32(h); }
uint16_t to_bf16(float x) { return f32_to_bf16_rne(x); }

namespace {
uint8_t encode(float x, bool e5m2) {
  return e5m2 ? encode_fp8_rne<E5M2Traits>(x, true) : encode_fp8_rne<E4M3Traits>(x, true);
}
float decode(uint8_t c, bool e5m2) { return e5m2 ? decode_fp8<E5M2Traits>(c) : decode_fp8<E4M3Traits>(c); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void quantize_g16(const float* x, int64_t n, bool e5m2, uint8_t* codes, uint16_t* scales) {
  FP8SIM_CHECK(n % 16 == 0, "n = {} is not a whole number of 1x16 groups", n);
  for (int64_t g = 0; g < n / 16; ++g) {
    float m = 0.f;
    for (int e = 0; e < 16; ++e) m = std::max(m, std::fabs(x[g * 16 + e]));
    const uint16_t s = g16_scale(m, e5m2 ? kE5M2Max : kE4M3Max);
    const float inv = g16_inverse(s);
    for (int e = 0; e < 16; ++e) codes[g * 16 + e] = encode(mul_rn(x[g * 16 + e], inv), e5m2);
    scales[g] = s;
  }
}

std::vector<float> dequantize_g16(const uint8_t* codes, const uint16_t* scales, int64_t n, bool e5m2) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = mul_rn(decode(codes[i], e5m2), bf16f(scales[i / 16]));
  return out;
}

void rmsnorm_fwd(const std::vector<float>& x, const Bf16& w, int64_t rows, int64_t cols, float eps, Bf16& y,
                 std::vector<float>& rstd, std::vector<float>& row_amax) {
  y.assign(static_cast<size_t>(rows * cols), 0);
  rstd.assign(static_cast<size_t>(rows), 0.f);
  row_amax.assign(static_cast<size_t>(rows), 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(cols) + eps));
    rstd[r] = rs;
    float m = 0.f;
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t v = to_bf16((x[r * cols + c] * rs) * bf16f(w[c]));
      y[r * cols + c] = v;
      m = std::max(m, std::fabs(bf16f(v)));
    }
    row_amax[r] = m;
  }
}

void rmsnorm_bwd(const std::vector<float>& x, const Bf16& w, const std::vector<float>& rstd, const Bf16& dy,
                 int64_t rows, int64_t cols, Bf16& dx, std::vector<float>& dw) {
  dx.assign(static_cast<size_t>(rows * cols), 0);
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float rs = rstd[r];
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c)
      dot += static_cast<double>(x[r * cols + c] * rs) * (bf16f(w[c]) * bf16f(dy[r * cols + c]));
    const float c1 = static_cast<float>(dot / static_cast<double>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = x[r * cols + c] * rs, g = bf16f(dy[r * cols + c]);
      dx[r * cols + c] = to_bf16((bf16f(w[c]) * g - xhat * c1) * rs);
      acc[c] += static_cast<double>(g) * xhat;
    }
  }
  dw.assign(static_cast<size_t>(cols), 0.f);
  for (int64_t c = 0; c < cols; ++c) dw[c] = static_cast<float>(acc[c]);
}

void silu_mul_fwd(const std::vector<float>& g, const std::vector<float>& u, Bf16& m, std::vector<float>& silu) {
  m.resize(g.size());
  silu.resize(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    silu[i] = g[i] * sigmoid(g[i]);
    m[i] = to_bf16(silu[i] * u[i]);
  }
}

void silu_mul_bwd(const std::vector<float>& g, const std::vector<float>& u, const Bf16& dm, Bf16& dg, Bf16& du) {
  dg.resize(g.size());
  du.resize(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const float s = sigmoid(g[i]), d = bf16f(dm[i]);
    dg[i] = to_bf16((d * u[i]) * (s * (1.0f + g[i] * (1.0f - s))));
    du[i] = to_bf16(d * (g[i] * s));
  }
}

std::vector<uint16_t> group_max(const Bf16& x) {
  std::vector<uint16_t> out(x.size() / 16);
  for (size_t gidx = 0; gidx < out.size(); ++gidx) {
    float m = 0.f;
    for (int e = 0; e < 16; ++e) m = std::max(m, std::fabs(bf16f(x[gidx * 16 + e])));
    out[gidx] = bf16_round_up(m);
  }
  return out;
}

void cast(const Bf16& x, int64_t rows, int64_t cols, float amax, bool e5m2, std::vector<uint8_t>& out,
          std::vector<uint8_t>& out_t) {
  const float inv = tensor_inverse(amax, e5m2 ? kE5M2Max : kE4M3Max);
  out.assign(static_cast<size_t>(rows * cols), 0);
  out_t.assign(static_cast<size_t>(rows * cols), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t q = encode(mul_rn(bf16f(x[r * cols + c]), inv), e5m2);
      out[r * cols + c] = q;
      out_t[c * rows + r] = q;
    }
}

void rope(Bf16& x, int64_t tokens, int64_t heads, int64_t d, int64_t seq, const std::vector<float>& cos_sin,
          bool backward) {
  const int64_t half = d / 2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      uint16_t* row = x.data() + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos_sin[2 * ((t % seq) * half + i)], sn = cos_sin[2 * ((t % seq) * half + i) + 1];
        const float s = (backward ? -1.0f : 1.0f) * sn;
        const float x1 = bf16f(row[i]), x2 = bf16f(row[i + half]);
        row[i] = to_bf16(x1 * c - x2 * s);
        row[i + half] = to_bf16(x2 * c + x1 * s);
      }
    }
}

void cross_entropy(const Bf16& logits, const std::vector<int32_t>& labels, int64_t tokens, int64_t vocab,
                   std::vector<float>& loss, Bf16& dlogits) {
  loss.assign(static_cast<size_t>(tokens), 0.f);
  dlogits.assign(static_cast<size_t>(tokens * vocab), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const uint16_t* x = logits.data() + t * vocab;
    float m = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, bf16f(x[v]));
    double s = 0;
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(static_cast<double>(bf16f(x[v]) - m));
    loss[t] = static_cast<float>(m + std::log(s) - bf16f(x[labels[t]]));
    for (int64_t v = 0; v < vocab; ++v) {
      double p = std::exp(static_cast<double>(bf16f(x[v]) - m)) / s;
      if (v == labels[t]) p -= 1.0;
      dlogits[t * vocab + v] = to_bf16(static_cast<float>(p / static_cast<double>(tokens)));
    }
  }
}

}  // namespace fp8sim::speed::ref
