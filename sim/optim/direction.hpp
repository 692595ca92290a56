#pragma once
// Table 1's measure on one parameter's captured moments (`fp8sim optim`, replay.hpp): the moments
// quantized in each of F formats, and per element the AdamW direction r = (m / bc1) / (sqrt(v / bc2)
// + eps) with the fp32 moments and with every pair (m in format a, v in format b). This header is
// what the CPU (replay.cpp) and a device (gpu/optim/direction.hpp) share: the request, the layout
// of the K sums and the terms one element adds, so both give the same bits.
//
// Order of the sums: as the drift's (drift.hpp): chunks of kDriftChunk elements, each chunk's terms
// added in element order from 0.0, the chunks' sums added in chunk order. A term the layout marks
// conditional is added as +0.0 where its condition fails (every sum starts at +0.0 and its terms
// are >= 0 or NaN, so that equals not adding it).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/common/hd.hpp"
#include "sim/quant/spec.hpp"

namespace fp8sim::optim {

// Direction matrices hold at most this many formats (Table 1's FP8 list, the 4- and 6-bit one).
inline constexpr size_t kMaxDirectionFormats = 8;

// Where one parameter's sums over F formats lie in their vector of K: F*F cells (the squared error
// of r with m in format a and v in format b, at a * F + b), 4F per-format terms at `fmt` (m's and
// v's squared errors, m's and v's flush counts: a nonzero moment whose quantized value is 0), 5
// references at `ref` (sum m^2, sum v^2, nonzero m, nonzero v, sum r^2), then at `x` the F*F cells
// again over the elements whose nonzero v did not flush in format b, and their counts.
struct DirectionLayout {
  size_t per, fmt, ref, x, K;
  constexpr explicit DirectionLayout(size_t F)
      : per(F * F), fmt(F * F), ref(F * F + 4 * F), x(F * F + 4 * F + 5), K(3 * F * F + 4 * F + 5) {}
};

// One element's quantities: its fp32 moments and their values quantized in each format, widened
// to double, and what every term is made of.
struct DirectionElement {
  double m, v, r;
  double mq[kMaxDirectionFormats], vq[kMaxDirectionFormats];
  double num[kMaxDirectionFormats], den[kMaxDirectionFormats];  // mq / bc1, sqrt(vq / bc2) + eps
};

FP8SIM_HD void direction_element(float m, float v, const float* mq, const float* vq, size_t F, double bc1, double bc2,
                                 double eps, DirectionElement& e) {
  e.m = m;
  e.v = v;
  e.r = (e.m / bc1) / (sqrt(e.v / bc2) + eps);
  for (size_t a = 0; a < F; ++a) {
    e.mq[a] = mq[a];
    e.vq[a] = vq[a];
    e.num[a] = e.mq[a] / bc1;
    e.den[a] = sqrt(e.vq[a] / bc2) + eps;
  }
}

// Term q (0 <= q < DirectionLayout(F).K) of one element.
FP8SIM_HD double direction_term(const DirectionElement& e, size_t F, size_t q) {
  const size_t per = F * F, ref = F * F + 4 * F, x = ref + 5;
  if (q < per || q >= x) {
    const size_t cell = q < per ? q : (q - x) % per;
    const size_t a = cell / F, b = cell % F;
    const bool v_flushed = e.v != 0 && e.vq[b] == 0;
    if (q >= x + per) return v_flushed ? 0.0 : 1.0;
    if (q >= x && v_flushed) return 0.0;
    const double d = e.num[a] / e.den[b] - e.r;
    return d * d;
  }
  if (q < ref) {
    const size_t kind = (q - per) / F, a = (q - per) % F;
    switch (kind) {
      case 0:
        return (e.mq[a] - e.m) * (e.mq[a] - e.m);
      case 1:
        return (e.vq[a] - e.v) * (e.vq[a] - e.v);
      case 2:
        return (e.m != 0 && e.mq[a] == 0) ? 1.0 : 0.0;
      default:
        return (e.v != 0 && e.vq[a] == 0) ? 1.0 : 0.0;
    }
  }
  switch (q - ref) {
    case 0:
      return e.m * e.m;
    case 1:
      return e.v * e.v;
    case 2:
      return e.m != 0 ? 1.0 : 0.0;
    case 3:
      return e.v != 0 ? 1.0 : 0.0;
    default:
      return e.r * e.r;
  }
}

// One parameter's request: its moments (n each) after `step` AdamW updates, whose bias corrections
// bc1 = 1 - beta1^step, bc2 = 1 - beta2^step and eps define r; the formats' specs.
struct DirectionRequest {
  int64_t n = 0;
  const float* m = nullptr;
  const float* v = nullptr;
  std::span<const QuantSpec> specs;
  double bc1 = 1, bc2 = 1, eps = 0;
  int threads = 0;  // host threads, where the implementation uses any
};

// The K sums, in DirectionLayout(specs.size())'s order.
std::vector<double> direction_cpu(const DirectionRequest& rq);

}  // namespace fp8sim::optim
