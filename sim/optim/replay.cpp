#include "sim/optim/replay.hpp"
#include "sim/common/paths.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>

#include "sim/common/check.hpp"
#include "sim/common/dist.hpp"
#include "sim/formats/avx2_fp8.hpp"
#include "sim/optim/direction.hpp"
#include "sim/optim/lowp_adamw.hpp"
#include "sim/quant/quantize.hpp"

namespace fp8sim::optim {

std::vector<StateRecipe> default_state_recipes() {
  std::vector<StateRecipe> out;
  // NOT-RECIPES: optimizer-state presets, not training recipes.
  for (const char* n : {"coat", "coat-noexpand", "te-fp8", "fp8lm", "bf16"}) out.push_back(StateRecipe::parse(n));
  return out;
}

const std::vector<Table1Format>& table1_formats() {
  static const std::vector<Table1Format> f = {
      {"E4M3", "e4m3:g128"},
      {"E4M3+Expand", "e4m3:g128:de=coat"},
      {"E5M2", "e5m2:g128"},
      {"E5M2+Expand", "e5m2:g128:de=coat"},
  };
  return f;
}

const std::vector<LowBitFormat>& table1_lowbit_formats() {
  static const std::vector<LowBitFormat> f = {
      {"E2M1", "e2m1:g128"}, {"E2M1+Expand", "e2m1:g128:de=coat"},
      {"E2M3", "e2m3:g128"}, {"E2M3+Expand", "e2m3:g128:de=coat"},
      {"E3M2", "e3m2:g128"}, {"E3M2+Expand", "e3m2:g128:de=coat"},
  };
  return f;
}

namespace {

// {label[a]: v[a]} and {label[a]: {label[b]: m[a][b]}} over a format list (Table 1's or the
// 4- and 6-bit one), for arrays and vectors alike.
template <class Formats, class Row>
Json labelled(const Formats& f, const Row& v) {
  Json j = Json::object();
  for (size_t a = 0; a < std::size(v); ++a) j[f[a].label] = v[a];
  return j;
}

template <class Formats, class Matrix>
Json labelled_matrix(const Formats& f, const Matrix& m) {
  Json t = Json::object();
  for (size_t a = 0; a < std::size(m); ++a) t[f[a].label] = labelled(f, m[a]);
  return t;
}

}  // namespace

Json table1_json(const Table1Matrix& m) { return labelled_matrix(table1_formats(), m); }

Table1Matrix paper_table1() {
  // COAT (arXiv 2410.19313) Table 1, rows = first moment, columns = second moment.
  return {{{20.10, 18.08, 25.65, 18.16},
           {15.13, 12.31, 21.96, 12.43},
           {37.02, 35.96, 40.30, 36.00},
           {17.79, 15.48, 23.84, 15.57}}};
}

namespace {

constexpr int64_t kChunk = kDriftChunk;  // every sum of this file, the drift's included

int resolve_threads(int t) { return t > 0 ? t : omp_get_max_threads(); }

// Sums of K doubles over [0, n): f(i, acc) adds element i's terms into acc[0..K). Per-chunk
// partial sums are computed in parallel, each chunk in element order, then combined in chunk
// order, so the result does not depend on the thread count.
// `four`, where given, computes four whole chunks at once (chunks c..c+3 into part[c K ...]) with
// each chunk's additions in element order, as f would: it takes groups of four whole chunks, f
// the rest.
struct NoFour {
  void operator()(int64_t, double*) const {}
};
template <class F, class Four = NoFour>
std::vector<double> det_sums(int64_t n, int threads, size_t K, const F& f, const Four* four = nullptr) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks) * K, 0.0);
  const int64_t groups = four ? n / kChunk / 4 : 0;
  const int64_t units = groups + (chunks - 4 * groups);
#pragma omp parallel for schedule(static) num_threads(threads) if (units > 1)
  for (int64_t u = 0; u < units; ++u) {
    if (u < groups) {
      (*four)(4 * u, part.data() + 4 * u * static_cast<int64_t>(K));
      continue;
    }
    const int64_t c = 4 * groups + (u - groups);
    std::vector<double> acc(K, 0.0);  // the chunk's own sums (no cache line shared with another thread's)
    const int64_t i1 = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < i1; ++i) f(i, acc.data());
    std::copy(acc.begin(), acc.end(), part.begin() + c * static_cast<int64_t>(K));
  }
  std::vector<double> out(K, 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (size_t k = 0; k < K; ++k) out[k] += part[static_cast<size_t>(c) * K + k];
  return out;
}

double ratio(double num, double den) { return den > 0 ? num / den : std::numeric_limits<double>::quiet_NaN(); }

void require_finite(std::span<const float> x, const std::string& what, const std::string& name) {
  for (size_t i = 0; i < x.size(); ++i)
    FP8SIM_REQUIRE(std::isfinite(x[i]), "parameter '{}': {} has a non-finite value ({}) at flat index {}", name, what,
                   x[i], i);
}

}  // namespace

// The inputs of one parameter's direction sums (DirectionSums::sums).
struct DirectionInputs {
  const float* m;
  const float* v;
  const float* mq[kMaxDirectionFormats];
  const float* vq[kMaxDirectionFormats];
  size_t F;
  double bc1, bc2, eps;
};

// Element i of the four chunks from b0 on, one per lane, widened to double.
__attribute__((target("avx2"), always_inline)) inline __m256d lanes4(const float* x, int64_t b0, int64_t i) {
  return _mm256_cvtps_pd(_mm_set_ps(x[b0 + 3 * kChunk + i], x[b0 + 2 * kChunk + i], x[b0 + kChunk + i], x[b0 + i]));
}

// DirectionSums::sums' per-element terms for four whole chunks at once, chunk k in lane k of each
// AVX2 vector: the same double operations in the same order per lane (divisions and square roots
// are correctly rounded in both), a term the scalar code adds conditionally added as +0.0
// otherwise (every sum here starts at +0.0 and stays >= +0.0). Writes the four chunks' K sums.
__attribute__((target("avx2"))) void direction_sums4(const DirectionInputs& in, int64_t c0, double* out) {
  const size_t F = in.F;
  const DirectionLayout L(F);
  const size_t kPer = L.per, kFmt = L.fmt, kRef = L.ref, kX = L.x, K = L.K;
  __m256d acc[DirectionLayout(kMaxDirectionFormats).K];
  for (size_t k = 0; k < K; ++k) acc[k] = _mm256_setzero_pd();
  const __m256d bc1 = _mm256_set1_pd(in.bc1), bc2 = _mm256_set1_pd(in.bc2), eps = _mm256_set1_pd(in.eps);
  const __m256d zero = _mm256_setzero_pd(), one = _mm256_set1_pd(1.0);
  const int64_t b0 = c0 * kChunk;
  __m256d num[kMaxDirectionFormats], den[kMaxDirectionFormats], vzero_b[kMaxDirectionFormats];
  for (int64_t i = 0; i < kChunk; ++i) {
    const __m256d m = lanes4(in.m, b0, i), v = lanes4(in.v, b0, i);
    const __m256d r = _mm256_div_pd(_mm256_div_pd(m, bc1), _mm256_add_pd(_mm256_sqrt_pd(_mm256_div_pd(v, bc2)), eps));
    const __m256d m_nz = _mm256_cmp_pd(m, zero, _CMP_NEQ_UQ), v_nz = _mm256_cmp_pd(v, zero, _CMP_NEQ_UQ);
    for (size_t a = 0; a < F; ++a) {
      const __m256d mqa = lanes4(in.mq[a], b0, i), vqa = lanes4(in.vq[a], b0, i);
      num[a] = _mm256_div_pd(mqa, bc1);
      den[a] = _mm256_add_pd(_mm256_sqrt_pd(_mm256_div_pd(vqa, bc2)), eps);
      const __m256d dm = _mm256_sub_pd(mqa, m), dv = _mm256_sub_pd(vqa, v);
      acc[kFmt + a] = _mm256_add_pd(acc[kFmt + a], _mm256_mul_pd(dm, dm));
      acc[kFmt + F + a] = _mm256_add_pd(acc[kFmt + F + a], _mm256_mul_pd(dv, dv));
      const __m256d m_flush = _mm256_and_pd(m_nz, _mm256_cmp_pd(mqa, zero, _CMP_EQ_OQ));
      vzero_b[a] = _mm256_and_pd(v_nz, _mm256_cmp_pd(vqa, zero, _CMP_EQ_OQ));
      acc[kFmt + 2 * F + a] = _mm256_add_pd(acc[kFmt + 2 * F + a], _mm256_and_pd(m_flush, one));
      acc[kFmt + 3 * F + a] = _mm256_add_pd(acc[kFmt + 3 * F + a], _mm256_and_pd(vzero_b[a], one));
    }
    for (size_t a = 0; a < F; ++a)
      for (size_t b = 0; b < F; ++b) {
        const __m256d d = _mm256_sub_pd(_mm256_div_pd(num[a], den[b]), r);
        const __m256d d2 = _mm256_mul_pd(d, d);
        acc[a * F + b] = _mm256_add_pd(acc[a * F + b], d2);
        acc[kX + a * F + b] = _mm256_add_pd(acc[kX + a * F + b], _mm256_andnot_pd(vzero_b[b], d2));
        acc[kX + kPer + a * F + b] = _mm256_add_pd(acc[kX + kPer + a * F + b], _mm256_andnot_pd(vzero_b[b], one));
      }
    acc[kRef] = _mm256_add_pd(acc[kRef], _mm256_mul_pd(m, m));
    acc[kRef + 1] = _mm256_add_pd(acc[kRef + 1], _mm256_mul_pd(v, v));
    acc[kRef + 2] = _mm256_add_pd(acc[kRef + 2], _mm256_and_pd(m_nz, one));
    acc[kRef + 3] = _mm256_add_pd(acc[kRef + 3], _mm256_and_pd(v_nz, one));
    acc[kRef + 4] = _mm256_add_pd(acc[kRef + 4], _mm256_mul_pd(r, r));
  }
  alignas(32) double lane[4];
  for (size_t k = 0; k < K; ++k) {
    _mm256_store_pd(lane, acc[k]);
    for (int l = 0; l < 4; ++l) out[static_cast<size_t>(l) * K + k] = lane[l];
  }
}

std::vector<double> direction_cpu(const DirectionRequest& rq) {
  const size_t F = rq.specs.size();
  FP8SIM_CHECK(F >= 1 && F <= kMaxDirectionFormats, "a direction matrix of {} formats", F);
  const int64_t n = rq.n;
  const int nt = rq.threads > 0 ? rq.threads : omp_get_max_threads();
  const Shape shape{n};
  QuantizeOptions qo;
  qo.threads = nt;
  std::vector<std::vector<float>> mq(F), vq(F);
  for (size_t a = 0; a < F; ++a) {
    mq[a] = dequantize(quantize(rq.m, shape, rq.specs[a], qo), nt);
    vq[a] = dequantize(quantize(rq.v, shape, rq.specs[a], qo), nt);
  }
  const size_t K = DirectionLayout(F).K;
  DirectionInputs in{rq.m, rq.v, {}, {}, F, rq.bc1, rq.bc2, rq.eps};
  for (size_t a = 0; a < F; ++a) {
    in.mq[a] = mq[a].data();
    in.vq[a] = vq[a].data();
  }
  const auto four = [&in](int64_t c0, double* out) { direction_sums4(in, c0, out); };
  const bool simd = avx2::available() && quant_simd();  // the CPU loops' vector switch (quantize.hpp)
  return det_sums(
      n, nt, K,
      [&](int64_t i, double* acc) {
        float mqi[kMaxDirectionFormats], vqi[kMaxDirectionFormats];
        for (size_t a = 0; a < F; ++a) {
          mqi[a] = in.mq[a][i];
          vqi[a] = in.vq[a][i];
        }
        DirectionElement e;
        direction_element(rq.m[i], rq.v[i], mqi, vqi, F, rq.bc1, rq.bc2, rq.eps, e);
        for (size_t q = 0; q < K; ++q) acc[q] += direction_term(e, F, q);
      },
      simd ? &four : nullptr);
}

// The sums behind a direction-MSE matrix over F formats (Table 1's measure): per cell (m in
// format a, v in format b) the squared error of r, and the same over the elements whose nonzero
// v did not flush; per format the moments' squared errors and flush counts; the references.
struct DirectionSums {
  static constexpr size_t kMaxFormats = kMaxDirectionFormats;
  std::vector<QuantSpec> specs;
  std::vector<double> sse, sse_nf, cnt_nf;               // F x F, row-major
  std::vector<double> m_err2, v_err2, m_flush, v_flush;  // F
  double m_ref2 = 0, v_ref2 = 0, m_nonzero = 0, v_nonzero = 0, ref2 = 0;

  DirectionSums() = default;
  // The specs of a format list (table1_formats(), table1_lowbit_formats()).
  template <class Formats>
  explicit DirectionSums(const Formats& formats) {
    for (const auto& f : formats) specs.push_back(QuantSpec::parse(f.spec));
    const size_t F = specs.size();
    FP8SIM_REQUIRE(F <= kMaxFormats, "a direction matrix holds at most {} formats, not {}", kMaxFormats, F);
    sse.assign(F * F, 0.0);
    sse_nf.assign(F * F, 0.0);
    cnt_nf.assign(F * F, 0.0);
    m_err2.assign(F, 0.0);
    v_err2.assign(F, 0.0);
    m_flush.assign(F, 0.0);
    v_flush.assign(F, 0.0);
  }
  size_t formats() const { return specs.size(); }

  // One parameter's request (direction_cpu, OptimOptions::direction_device) from its moments after
  // `step` AdamW updates.
  DirectionRequest request(std::span<const float> m0, std::span<const float> v0, const AdamwHyper& h, int64_t step,
                           int nt) const {
    DirectionRequest rq;
    rq.n = static_cast<int64_t>(m0.size());
    rq.m = m0.data();
    rq.v = v0.data();
    rq.specs = specs;
    // The direction AdamW applies with moments after t updates (their bias corrections).
    const double t = static_cast<double>(step);
    rq.bc1 = 1.0 - std::pow(h.beta1, t);
    rq.bc2 = 1.0 - std::pow(h.beta2, t);
    rq.eps = h.eps;
    rq.threads = nt;
    return rq;
  }

  // Adds one parameter's sums (parameters in order: the same additions whatever computed them).
  void add_sums(const std::vector<double>& s) {
    const size_t F = formats();
    const DirectionLayout L(F);
    const size_t kPer = L.per, kFmt = L.fmt, kRef = L.ref, kX = L.x, K = L.K;
    FP8SIM_CHECK(s.size() == K, "direction sums of {} values, expected {}", s.size(), K);
    for (size_t i = 0; i < kPer; ++i) {
      sse[i] += s[i];
      sse_nf[i] += s[kX + i];
      cnt_nf[i] += s[kX + kPer + i];
    }
    for (size_t a = 0; a < F; ++a) {
      m_err2[a] += s[kFmt + a];
      v_err2[a] += s[kFmt + F + a];
      m_flush[a] += s[kFmt + 2 * F + a];
      v_flush[a] += s[kFmt + 3 * F + a];
    }
    m_ref2 += s[kRef];
    v_ref2 += s[kRef + 1];
    m_nonzero += s[kRef + 2];
    v_nonzero += s[kRef + 3];
    ref2 += s[kRef + 4];
  }
};

struct OptimReplay::Impl {
  WindowMeta meta;
  OptimOptions opts;
  std::vector<StateRecipe> recipes;  // drift runs (rounding applied)
  std::vector<StateRecipe> memory_recipes;
  int threads = 1;
  // Small tensors run single-threaded: an OpenMP region costs more than their work, and on a
  // busy machine every barrier waits for a descheduled thread.
  int threads_for(int64_t n) const { return n < (int64_t{1} << 18) ? 1 : threads; }
  int drift_steps = 0;
  uint64_t param_index = 0;
  int64_t elements = 0;
  std::vector<std::string> names;

  // Table 1 (add_state)
  int64_t t1_elements = 0;
  int64_t t1_params = 0;
  std::vector<int64_t> t1_steps;  // distinct adamw_step values seen
  DirectionSums t1, t1_lowbit;    // Table 1's four FP8 formats; the 4- and 6-bit ones

  // fp32 replay
  bool replay_possible = true;  // every parameter had end weights
  int64_t replay_params = 0;
  double rp_max_rel = 0, rp_max_abs = 0, rp_max_ulp = 0, rp_coat_max_rel = 0, rp_max_move = 0;
  int64_t rp_mismatch = 0, rp_compared = 0;

  // drift: [recipe][step]
  std::vector<std::vector<DriftSums>> drift;
  // memory: [recipe] -> m bytes, v bytes; over the add_state parameters, else the window's
  std::vector<std::array<double, 2>> mem_state, mem_window;
  int64_t mem_state_elements = 0;

  void add_memory(std::vector<std::array<double, 2>>& mem, int64_t n) {
    for (size_t r = 0; r < memory_recipes.size(); ++r) {
      mem[r][0] += static_cast<double>(moment_bytes(memory_recipes[r].m, n));
      mem[r][1] += static_cast<double>(moment_bytes(memory_recipes[r].v, n));
    }
  }

  // One parameter's contribution, computed without touching the totals and added to them in
  // parameter order by apply() (a distributed run computes each on the rank that owns it).
  struct StatePart {
    std::string name;
    int64_t n = 0, adamw_step = 0;
    std::vector<double> t1, t1_lowbit;  // DirectionSums::sums (empty when not computed)
  };
  struct ParamPart {
    std::string name;
    int64_t n = 0;
    bool has_end = false;  // the fp32 replay's fields below are set
    double max_rel = 0, max_abs = 0, max_ulp = 0, coat_max_rel = 0, max_move = 0;
    int64_t mismatch = 0, compared = 0;
    std::vector<DriftSums> drift;  // [recipe * drift_steps + step]; empty without drift
  };
  StatePart state_part(const std::string& name, std::span<const float> m, std::span<const float> v,
                       const AdamwHyper& hyper, int64_t adamw_step) const;
  ParamPart param_part(const ParamWindow& w, uint64_t index) const;
  void apply(const StatePart& p);
  void apply(const ParamPart& p);
  void replay_into(ParamPart& part, const ParamWindow& w) const;
  void drift_into(ParamPart& part, const ParamWindow& w, uint64_t index) const;

  // The moments' AdamW step count, when every add_state call had the same one.
  std::optional<int64_t> t1_step() const {
    return t1_steps.size() == 1 ? std::optional<int64_t>(t1_steps[0]) : std::nullopt;
  }
  Table1 table1() const;
  Table1LowBit table1_lowbit_result() const;
  Fp32Replay fp32_replay() const;
  std::vector<StateMemory> memory() const;
  std::vector<DriftRun> drift_runs() const;
};

OptimReplay::OptimReplay(const WindowMeta& meta, const OptimOptions& opts) : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.meta = meta;
  I.opts = opts;
  I.threads = resolve_threads(opts.threads);
  // meta.steps == 0: no grad window (Table 1 and memory only).
  FP8SIM_REQUIRE(meta.steps >= 0, "negative grad window length {}", meta.steps);
  FP8SIM_REQUIRE(meta.step0 >= 0, "negative optimizer step count {} at the window start", meta.step0);
  FP8SIM_REQUIRE(opts.steps >= 0, "--steps must be >= 0 (0 = the whole window), got {}", opts.steps);
  FP8SIM_REQUIRE(opts.steps <= meta.steps || meta.steps == 0,
                 "--steps {} exceeds the {} steps of the trace's grad window", opts.steps, meta.steps);
  I.drift_steps = opts.steps > 0 ? opts.steps : static_cast<int>(meta.steps);
  const auto base = opts.recipes.empty() ? default_state_recipes() : opts.recipes;
  for (const auto& r : base) I.recipes.push_back(r.with_rounding(opts.rounding, opts.seed));
  I.memory_recipes.push_back(StateRecipe::parse("fp32"));
  for (size_t i = 0; i < I.recipes.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (I.recipes[i].name == I.recipes[j].name)
        throw UsageError(fmt::format("state recipe '{}' given twice", I.recipes[i].name));
    if (!I.recipes[i].is_fp32()) I.memory_recipes.push_back(I.recipes[i]);
  }
  I.mem_state.assign(I.memory_recipes.size(), {0.0, 0.0});
  I.mem_window.assign(I.memory_recipes.size(), {0.0, 0.0});
  I.drift.assign(I.recipes.size(), std::vector<DriftSums>(static_cast<size_t>(I.drift_steps), DriftSums{}));
  I.t1 = DirectionSums(table1_formats());
  if (opts.table1_lowbit) I.t1_lowbit = DirectionSums(table1_lowbit_formats());
}

OptimReplay::~OptimReplay() = default;

void OptimReplay::add_param(const ParamWindow& w) { impl_->apply(impl_->param_part(w, impl_->param_index)); }

void OptimReplay::add_state(const std::string& name, std::span<const float> m, std::span<const float> v,
                            const AdamwHyper& hyper, int64_t adamw_step) {
  impl_->apply(impl_->state_part(name, m, v, hyper, adamw_step));
}

std::string OptimReplay::state_part(const std::string& name, std::span<const float> m, std::span<const float> v,
                                    const AdamwHyper& hyper, int64_t adamw_step) const {
  const Impl::StatePart p = impl_->state_part(name, m, v, hyper, adamw_step);
  dist::ByteWriter w;
  w.pod(uint8_t{0});
  w.str(p.name);
  w.pod(p.n);
  w.pod(p.adamw_step);
  w.pods(p.t1);
  w.pods(p.t1_lowbit);
  return w.take();
}

std::string OptimReplay::param_part(const ParamWindow& pw, uint64_t index) const {
  const Impl::ParamPart p = impl_->param_part(pw, index);
  dist::ByteWriter w;
  w.pod(uint8_t{1});
  w.str(p.name);
  w.pod(p.n);
  w.pod(p.has_end);
  for (double d : {p.max_rel, p.max_abs, p.max_ulp, p.coat_max_rel, p.max_move}) w.pod(d);
  w.pod(p.mismatch);
  w.pod(p.compared);
  w.pods(p.drift);
  return w.take();
}

void OptimReplay::apply_part(const std::string& bytes) {
  dist::ByteReader r(bytes);
  if (r.pod<uint8_t>() == 0) {
    Impl::StatePart p;
    p.name = r.str();
    p.n = r.pod<int64_t>();
    p.adamw_step = r.pod<int64_t>();
    p.t1 = r.pods<double>();
    p.t1_lowbit = r.pods<double>();
    impl_->apply(p);
  } else {
    Impl::ParamPart p;
    p.name = r.str();
    p.n = r.pod<int64_t>();
    p.has_end = r.pod<bool>();
    for (double* d : {&p.max_rel, &p.max_abs, &p.max_ulp, &p.coat_max_rel, &p.max_move}) *d = r.pod<double>();
    p.mismatch = r.pod<int64_t>();
    p.compared = r.pod<int64_t>();
    p.drift = r.pods<DriftSums>();
    impl_->apply(p);
  }
  FP8SIM_CHECK(r.done(), "an optimizer part has {} bytes too many", bytes.size());
}

OptimReplay::Impl::ParamPart OptimReplay::Impl::param_part(const ParamWindow& w, uint64_t index) const {
  FP8SIM_REQUIRE(meta.steps > 0, "parameter '{}': no grad window was declared (WindowMeta::steps == 0)", w.name);
  const int64_t n = w.numel();
  FP8SIM_REQUIRE(n > 0, "parameter '{}' has no elements", w.name);
  int64_t shape_n = 1;
  for (int64_t d : w.shape) shape_n *= d;
  FP8SIM_REQUIRE(w.shape.empty() || shape_n == n, "parameter '{}': shape has {} elements but the weights have {}",
                 w.name, shape_n, n);
  FP8SIM_REQUIRE(static_cast<int64_t>(w.m0.size()) == n && static_cast<int64_t>(w.v0.size()) == n,
                 "parameter '{}': exp_avg / exp_avg_sq have {} / {} elements, the weights {}", w.name, w.m0.size(),
                 w.v0.size(), n);
  FP8SIM_REQUIRE(static_cast<int64_t>(w.grads.size()) == meta.steps,
                 "parameter '{}': {} grads in the window, expected {}", w.name, w.grads.size(), meta.steps);
  FP8SIM_REQUIRE(w.lr.size() == w.grads.size(), "parameter '{}': {} learning rates for {} steps", w.name, w.lr.size(),
                 w.grads.size());
  for (size_t k = 0; k < w.grads.size(); ++k) {
    FP8SIM_REQUIRE(static_cast<int64_t>(w.grads[k].size()) == n,
                   "parameter '{}': grad of window step {} has {} elements, expected {}", w.name, k, w.grads[k].size(),
                   n);
    require_finite(w.grads[k], fmt::format("the grad of window step {}", k), w.name);
    AdamwHyper h = w.hyper;
    h.lr = w.lr[k];
    try {
      validate_hyper(h);
    } catch (const Error& e) {
      throw Error(fmt::format("parameter '{}', window step {}: {}", w.name, k, e.what()));
    }
  }
  FP8SIM_REQUIRE(w.p_end.empty() || static_cast<int64_t>(w.p_end.size()) == n,
                 "parameter '{}': end-of-window weights have {} elements, expected {}", w.name, w.p_end.size(), n);
  require_finite(w.p0, "the window-start weights", w.name);
  require_finite(w.m0, "exp_avg", w.name);
  require_finite(w.v0, "exp_avg_sq", w.name);
  require_finite(w.p_end, "the end-of-window weights", w.name);
  for (size_t i = 0; i < w.v0.size(); ++i)
    FP8SIM_REQUIRE(w.v0[i] >= 0.0f, "parameter '{}': exp_avg_sq is negative ({}) at flat index {}", w.name, w.v0[i], i);

  ParamPart part;
  part.name = w.name;
  part.n = n;
  replay_into(part, w);
  if (opts.drift) drift_into(part, w, index);
  return part;
}

void OptimReplay::Impl::apply(const ParamPart& p) {
  if (p.has_end) {
    rp_max_rel = std::max(rp_max_rel, p.max_rel);
    rp_max_abs = std::max(rp_max_abs, p.max_abs);
    rp_max_ulp = std::max(rp_max_ulp, p.max_ulp);
    rp_coat_max_rel = std::max(rp_coat_max_rel, p.coat_max_rel);
    rp_max_move = std::max(rp_max_move, p.max_move);
    rp_mismatch += p.mismatch;
    rp_compared += p.compared;
    ++replay_params;
  } else {
    replay_possible = false;
  }
  if (!p.drift.empty()) {
    FP8SIM_CHECK(p.drift.size() == recipes.size() * static_cast<size_t>(drift_steps), "drift sums of {} runs",
                 p.drift.size());
    for (size_t r = 0; r < recipes.size(); ++r)
      for (size_t k = 0; k < static_cast<size_t>(drift_steps); ++k) {
        DriftSums& dst = drift[r][k];
        const DriftSums& src = p.drift[r * static_cast<size_t>(drift_steps) + k];
        for (size_t q = 0; q < kDriftSums; ++q) dst[q] += src[q];
      }
  }
  add_memory(mem_window, p.n);
  elements += p.n;
  names.push_back(p.name);
  ++param_index;
}

OptimReplay::Impl::StatePart OptimReplay::Impl::state_part(const std::string& name, std::span<const float> m,
                                                           std::span<const float> v, const AdamwHyper& hyper,
                                                           int64_t adamw_step) const {
  const int64_t n = static_cast<int64_t>(m.size());
  FP8SIM_REQUIRE(n > 0, "parameter '{}' has no elements", name);
  FP8SIM_REQUIRE(static_cast<int64_t>(v.size()) == n, "parameter '{}': exp_avg has {} elements, exp_avg_sq {}", name, n,
                 v.size());
  FP8SIM_REQUIRE(adamw_step >= 1, "parameter '{}': moments after {} AdamW steps carry no information (need >= 1)", name,
                 adamw_step);
  AdamwHyper h = hyper;
  h.lr = 0;
  validate_hyper(h);
  require_finite(m, "exp_avg", name);
  require_finite(v, "exp_avg_sq", name);
  for (size_t i = 0; i < v.size(); ++i)
    FP8SIM_REQUIRE(v[i] >= 0.0f, "parameter '{}': exp_avg_sq is negative ({}) at flat index {}", name, v[i], i);
  StatePart part;
  part.name = name;
  part.n = n;
  part.adamw_step = adamw_step;
  if (opts.table1) {
    const int nt = threads_for(n);
    auto sums = [&](const DirectionSums& d) {
      const DirectionRequest rq = d.request(m, v, h, adamw_step, nt);
      if (opts.direction_device) {
        try {
          std::vector<double> s = opts.direction_device(rq);
          FP8SIM_CHECK(s.size() == DirectionLayout(d.formats()).K, "the device returned {} direction sums", s.size());
          return s;
        } catch (const UsageError&) {
          // The device does not take these formats or this size (OptimOptions::direction_device).
        }
      }
      return direction_cpu(rq);
    };
    part.t1 = sums(t1);
    if (t1_lowbit.formats() > 0) part.t1_lowbit = sums(t1_lowbit);
  }
  return part;
}

void OptimReplay::Impl::apply(const StatePart& p) {
  if (!p.t1.empty()) t1.add_sums(p.t1);
  if (!p.t1_lowbit.empty()) t1_lowbit.add_sums(p.t1_lowbit);
  add_memory(mem_state, p.n);
  mem_state_elements += p.n;
  t1_elements += p.n;
  ++t1_params;
  if (std::find(t1_steps.begin(), t1_steps.end(), p.adamw_step) == t1_steps.end()) t1_steps.push_back(p.adamw_step);
}

void OptimReplay::Impl::replay_into(ParamPart& part, const ParamWindow& w) const {
  const int nt = threads_for(w.numel());
  if (w.p_end.empty()) return;
  part.has_end = true;
  const int64_t n = w.numel();
  for (UpdateRule rule : {UpdateRule::Torch, UpdateRule::Coat}) {
    std::vector<float> p(w.p0.begin(), w.p0.end()), m(w.m0.begin(), w.m0.end()), v(w.v0.begin(), w.v0.end());
    AdamwHyper h = w.hyper;
    for (size_t k = 0; k < w.grads.size(); ++k) {
      h.lr = w.lr[k];
      const auto c = make_step_consts(h, meta.step0 + static_cast<int64_t>(k) + 1, rule);
      adamw_step_fp32(p.data(), w.grads[k].data(), m.data(), v.data(), static_cast<size_t>(n), c, nt);
    }
    for (int64_t i = 0; i < n; ++i) {
      const float want = w.p_end[static_cast<size_t>(i)], got = p[static_cast<size_t>(i)];
      const double err = std::fabs(static_cast<double>(got) - want);
      const double rel = want != 0 ? err / std::fabs(static_cast<double>(want)) : (err > 0 ? INFINITY : 0.0);
      if (rule == UpdateRule::Coat) {
        part.coat_max_rel = std::max(part.coat_max_rel, rel);
        continue;
      }
      const float aw = std::fabs(want);
      const double ulp = static_cast<double>(std::nextafter(aw, INFINITY) - aw);
      part.max_rel = std::max(part.max_rel, rel);
      part.max_move = std::max(part.max_move, std::fabs(static_cast<double>(want) - w.p0[static_cast<size_t>(i)]));
      part.max_abs = std::max(part.max_abs, err);
      part.max_ulp = std::max(part.max_ulp, err / ulp);
      part.mismatch += got != want ? 1 : 0;
      ++part.compared;
    }
  }
}

DriftResult drift_cpu(const DriftRequest& rq) {
  const int64_t n = rq.n;
  const size_t un = static_cast<size_t>(n);
  const int nt = rq.threads > 0 ? rq.threads : omp_get_max_threads();
  const int steps = rq.steps;
  FP8SIM_CHECK(n > 0 && steps >= 0 && rq.grads.size() >= static_cast<size_t>(steps) &&
                   rq.lr.size() >= static_cast<size_t>(steps),
               "drift request of {} elements, {} steps, {} grads, {} lrs", n, steps, rq.grads.size(), rq.lr.size());
  struct Run {
    ParamOptimState st;
    std::vector<float> p, p_prev, m_new, v_new, m_stored, v_stored;
    LowpScratch scratch;
  };
  DriftResult out(rq.recipes.size() * static_cast<size_t>(steps), DriftSums{});
  std::vector<Run> runs(rq.recipes.size());
  for (size_t r = 0; r < rq.recipes.size(); ++r) {
    Run& run = runs[r];
    run.st = make_param_state(rq.recipes[r], rq.m0, rq.v0, n, rq.index, static_cast<uint64_t>(rq.step0), nt);
    run.p.assign(rq.p0, rq.p0 + n);
    run.p_prev.resize(un);
    run.m_new.resize(un);
    run.v_new.resize(un);
    run.m_stored.resize(un);
    run.v_stored.resize(un);
  }
  std::vector<float> pb(rq.p0, rq.p0 + n), mb(rq.m0, rq.m0 + n), vb(rq.v0, rq.v0 + n), pb_prev(un);
  AdamwHyper h = rq.hyper;
  for (int k = 0; k < steps; ++k) {
    h.lr = rq.lr[static_cast<size_t>(k)];
    const int64_t t = rq.step0 + k + 1;
    const auto c = make_step_consts(h, t, rq.rule);
    const float* g = rq.grads[static_cast<size_t>(k)];
    pb_prev = pb;
    adamw_step_fp32(pb.data(), g, mb.data(), vb.data(), un, c, nt);
    for (size_t r = 0; r < runs.size(); ++r) {
      Run& run = runs[r];
      run.p_prev = run.p;
      lowp_adamw_step(run.p.data(), g, run.st, c, rq.index, static_cast<uint64_t>(t), run.scratch, nt, run.m_new.data(),
                      run.v_new.data());
      load_moment(run.st.m, run.m_stored.data(), nt);
      load_moment(run.st.v, run.v_stored.data(), nt);
      const auto s = det_sums(n, nt, kDriftSums, [&](int64_t i, double* acc) {
        const size_t j = static_cast<size_t>(i);
        double terms[kDriftSums];
        drift_terms(run.p[j], run.p_prev[j], pb[j], pb_prev[j], rq.p0[j], run.m_stored[j], run.v_stored[j],
                    run.m_new[j], run.v_new[j], mb[j], vb[j], terms);
        for (size_t q = 0; q < kDriftSums; ++q) acc[q] += terms[q];
      });
      DriftSums& dst = out[r * static_cast<size_t>(steps) + static_cast<size_t>(k)];
      for (size_t q = 0; q < kDriftSums; ++q) dst[q] = s[q];
    }
  }
  return out;
}

void OptimReplay::Impl::drift_into(ParamPart& part, const ParamWindow& w, uint64_t index) const {
  DriftRequest rq;
  rq.n = w.numel();
  rq.p0 = w.p0.data();
  rq.m0 = w.m0.data();
  rq.v0 = w.v0.data();
  for (int k = 0; k < drift_steps; ++k) rq.grads.push_back(w.grads[static_cast<size_t>(k)].data());
  rq.lr = w.lr;
  rq.hyper = w.hyper;
  rq.recipes = recipes;
  rq.steps = drift_steps;
  rq.step0 = meta.step0;
  rq.rule = opts.rule;
  rq.index = index;
  rq.threads = threads_for(w.numel());
  if (opts.drift_device) {
    try {
      part.drift = opts.drift_device(rq);
      FP8SIM_CHECK(part.drift.size() == recipes.size() * static_cast<size_t>(drift_steps),
                   "the device returned {} drift sums for {} runs of {} steps", part.drift.size(), recipes.size(),
                   drift_steps);
      return;
    } catch (const UsageError&) {
      // The device does not take this parameter (OptimOptions::drift_device): the CPU runs it.
    }
  }
  part.drift = drift_cpu(rq);
}

Table1 OptimReplay::Impl::table1() const {
  const double N = static_cast<double>(t1_elements);
  Table1 t;
  const Table1Matrix paper = paper_table1();
  Table1Details& det = t.details;
  const auto cell = [](const std::vector<double>& v, size_t a, size_t b) { return v[a * 4 + b]; };
  for (size_t a = 0; a < 4; ++a) {
    for (size_t b = 0; b < 4; ++b) {
      t.mse[a][b] = cell(t1.sse, a, b) / N;
      t.ratio_to_e4m3[a][b] = ratio(cell(t1.sse, a, b), t1.sse[0]);
      t.paper_ratio_to_e4m3[a][b] = paper[a][b] / paper[0][0];
      det.mse_without_flushed_v[a][b] = ratio(cell(t1.sse_nf, a, b), cell(t1.cnt_nf, a, b));
      det.mse_without_flushed_v_ratio_to_e4m3[a][b] =
          ratio(ratio(cell(t1.sse_nf, a, b), cell(t1.cnt_nf, a, b)), ratio(t1.sse_nf[0], t1.cnt_nf[0]));
    }
    det.specs[a] = t1.specs[a].to_string();
    det.m_nmse[a] = ratio(t1.m_err2[a], t1.m_ref2);
    det.v_nmse[a] = ratio(t1.v_err2[a], t1.v_ref2);
    det.m_flushed_frac[a] = ratio(t1.m_flush[a], t1.m_nonzero);
    det.v_flushed_frac[a] = ratio(t1.v_flush[a], t1.v_nonzero);
  }
  t.paper = paper;
  det.adamw_step = t1_step();
  det.params = t1_params;
  det.elements = t1_elements;
  det.mean_r2 = t1.ref2 / N;
  return t;
}

Table1LowBit OptimReplay::Impl::table1_lowbit_result() const {
  const double N = static_cast<double>(t1_elements);
  const DirectionSums& d = t1_lowbit;
  const size_t F = d.formats();
  Table1LowBit t;
  t.mse.assign(F, std::vector<double>(F));
  t.ratio_to_e4m3.assign(F, std::vector<double>(F));
  for (size_t a = 0; a < F; ++a) {
    for (size_t b = 0; b < F; ++b) {
      t.mse[a][b] = d.sse[a * F + b] / N;
      t.ratio_to_e4m3[a][b] = ratio(d.sse[a * F + b], t1.sse[0]);
    }
    t.m_nmse.push_back(ratio(d.m_err2[a], d.m_ref2));
    t.v_nmse.push_back(ratio(d.v_err2[a], d.v_ref2));
    t.m_flushed_frac.push_back(ratio(d.m_flush[a], d.m_nonzero));
    t.v_flushed_frac.push_back(ratio(d.v_flush[a], d.v_nonzero));
  }
  return t;
}

Fp32Replay OptimReplay::Impl::fp32_replay() const {
  Fp32Replay rp;
  rp.steps = meta.steps;
  rp.max_rel_err = rp_max_rel;
  rp.max_abs_err = rp_max_abs;
  rp.max_ulp = rp_max_ulp;
  rp.max_abs_err_over_max_move = ratio(rp_max_abs, rp_max_move);
  rp.mismatch_frac = ratio(static_cast<double>(rp_mismatch), static_cast<double>(rp_compared));
  rp.coat_rule_max_rel_err = rp_coat_max_rel;
  return rp;
}

// Over the moments snapshot (normally the whole model), else over the window's parameters.
std::vector<StateMemory> OptimReplay::Impl::memory() const {
  const bool on_state = mem_state_elements > 0;
  const auto& bytes = on_state ? mem_state : mem_window;
  const double n = static_cast<double>(on_state ? mem_state_elements : elements);
  std::vector<StateMemory> out;
  for (size_t r = 0; r < memory_recipes.size(); ++r) {
    const double total = bytes[r][0] + bytes[r][1];
    out.push_back({.recipe = memory_recipes[r].name,
                   .spec = memory_recipes[r].to_string(),
                   .m_bytes = bytes[r][0],
                   .v_bytes = bytes[r][1],
                   .state_bytes = total,
                   .bytes_per_param = total / n});
  }
  return out;
}

std::vector<DriftRun> OptimReplay::Impl::drift_runs() const {
  std::vector<DriftRun> out;
  for (size_t r = 0; r < recipes.size(); ++r) {
    const StateRecipe& rc = recipes[r];
    DriftRun run;
    run.name = rc.name;
    run.spec = rc.to_string();
    if (!rc.note.empty()) run.note = rc.note;
    for (int k = 0; k < drift_steps; ++k) {
      const DriftSums& s = drift[r][static_cast<size_t>(k)];
      run.steps.push_back({.step = meta.step0 + k + 1,
                           .param_rel_l2 = ratio(std::sqrt(s[kDiff2]), std::sqrt(s[kBase2])),
                           .displacement_rel_err = ratio(std::sqrt(s[kDiff2]), std::sqrt(s[kDisp2])),
                           .update_cosine = ratio(s[kDot], std::sqrt(s[kUr2]) * std::sqrt(s[kUb2])),
                           .m_nmse = ratio(s[kEm2], s[kMb2]),
                           .v_nmse = ratio(s[kEv2], s[kVb2]),
                           .m_quant_nmse = ratio(s[kMq2], s[kMn2]),
                           .v_quant_nmse = ratio(s[kVq2], s[kVn2])});
    }
    out.push_back(std::move(run));
  }
  return out;
}

OptimResult OptimReplay::finish() const {
  const Impl& I = *impl_;
  FP8SIM_REQUIRE(I.elements > 0 || I.t1_elements > 0, "no parameters were given (neither moments nor a grad window)");
  OptimResult doc;
  doc.source = source_relative(I.meta.source);
  const bool have_window = I.elements > 0;
  WindowSummary& win = doc.window;
  win.step0 = I.meta.step0;
  win.steps = have_window ? I.meta.steps : 0;
  win.drift_steps = have_window ? I.drift_steps : 0;
  win.params = static_cast<int64_t>(I.names.size());
  win.elements = I.elements;
  win.implementation = I.meta.implementation;
  doc.moments = {.params = I.t1_params, .elements = I.t1_elements, .adamw_step = I.t1_step()};
  doc.update_rule = std::string(update_rule_name(I.opts.rule));
  doc.rounding = std::string(rounding_name(I.opts.rounding));
  doc.seed = I.opts.seed;

  if (I.opts.table1 && I.t1_elements > 0) {
    doc.table1 = I.table1();
    if (I.opts.table1_lowbit) doc.table1_lowbit = I.table1_lowbit_result();
  } else
    doc.table1_skipped =
        I.opts.table1 ? "the trace holds no AdamW moments (exp_avg / exp_avg_sq)" : "disabled (--no-table1)";
  if (have_window && I.replay_possible && I.replay_params > 0) doc.fp32_replay = I.fp32_replay();
  else
    doc.fp32_replay_skipped =
        have_window ? "the trace does not store the end-of-window weights" : "the trace has no grad window";
  doc.memory = I.memory();
  doc.memory_params =
      I.mem_state_elements > 0 ? "every parameter with captured moments" : "the grad window's parameters";
  if (I.opts.drift && have_window) doc.drift = I.drift_runs();
  else doc.drift_skipped = I.opts.drift ? "the trace has no grad window" : "disabled (--no-drift)";
  return doc;
}

Json Table1LowBit::to_json() const {
  const auto& f = table1_lowbit_formats();
  Json j = Json::object();
  Json specs = Json::object();
  for (const auto& x : f) specs[x.label] = QuantSpec::parse(x.spec).to_string();
  j["specs"] = std::move(specs);
  j["mse"] = labelled_matrix(f, mse);
  j["ratio_to_e4m3"] = labelled_matrix(f, ratio_to_e4m3);
  j["m_nmse"] = labelled(f, m_nmse);
  j["v_nmse"] = labelled(f, v_nmse);
  j["m_flushed_frac"] = labelled(f, m_flushed_frac);
  j["v_flushed_frac"] = labelled(f, v_flushed_frac);
  return j;
}

Json DroppedParam::to_json() const {
  Json d = Json::object();
  d["name"] = name;
  d["missing_grad_step"] = missing_grad_step;
  return d;
}

Json WindowSummary::to_json() const {
  Json win = Json::object();
  win["step0"] = step0;
  win["steps"] = steps;
  win["drift_steps"] = drift_steps;
  win["params"] = params;
  win["elements"] = elements;
  win["implementation"] = implementation;
  if (dropped_params) {
    Json d = Json::array();
    for (const auto& p : *dropped_params) d.push_back(p.to_json());
    win["dropped_params"] = std::move(d);
  }
  return win;
}

Json MomentsSummary::to_json() const {
  Json snap = Json::object();
  snap["params"] = params;
  snap["elements"] = elements;
  snap["adamw_step"] = json_or_null(adamw_step);
  return snap;
}

Json OptimDefinitions::to_json() const {
  Json defs = Json::object();
  defs["table1"] = table1;
  defs["param_rel_l2"] = param_rel_l2;
  defs["displacement_rel_err"] = displacement_rel_err;
  defs["update_cosine"] = update_cosine;
  defs["m_nmse"] = m_nmse;
  defs["v_nmse"] = v_nmse;
  defs["m_quant_nmse"] = m_quant_nmse;
  defs["v_quant_nmse"] = v_quant_nmse;
  defs["fp32_replay_max_rel_err"] = fp32_replay_max_rel_err;
  defs["bytes_per_param"] = bytes_per_param;
  return defs;
}

Json Table1Details::to_json() const {
  Json det = Json::object();
  det["adamw_step"] = json_or_null(adamw_step);
  det["params"] = params;
  det["elements"] = elements;
  det["mean_r2"] = mean_r2;
  det["specs"] = labelled(table1_formats(), specs);
  det["m_nmse"] = labelled(table1_formats(), m_nmse);
  det["v_nmse"] = labelled(table1_formats(), v_nmse);
  det["m_flushed_frac"] = labelled(table1_formats(), m_flushed_frac);
  det["v_flushed_frac"] = labelled(table1_formats(), v_flushed_frac);
  det["mse_without_flushed_v"] = table1_json(mse_without_flushed_v);
  det["mse_without_flushed_v_ratio_to_e4m3"] = table1_json(mse_without_flushed_v_ratio_to_e4m3);
  return det;
}

Json Fp32Replay::to_json() const {
  Json rp = Json::object();
  rp["rule"] = rule;
  rp["steps"] = steps;
  rp["max_rel_err"] = max_rel_err;
  rp["max_abs_err"] = max_abs_err;
  rp["max_ulp"] = max_ulp;
  rp["max_abs_err_over_max_move"] = max_abs_err_over_max_move;
  rp["mismatch_frac"] = mismatch_frac;
  rp["coat_rule_max_rel_err"] = coat_rule_max_rel_err;
  rp["note"] = note;
  return rp;
}

Json StateMemory::to_json() const {
  Json e = Json::object();
  e["recipe"] = recipe;
  e["spec"] = spec;
  e["m_bytes"] = m_bytes;
  e["v_bytes"] = v_bytes;
  e["state_bytes"] = state_bytes;
  e["bytes_per_param"] = bytes_per_param;
  return e;
}

Json DriftStep::to_json() const {
  Json st = Json::object();
  st["step"] = step;
  st["param_rel_l2"] = param_rel_l2;
  st["displacement_rel_err"] = displacement_rel_err;
  st["update_cosine"] = update_cosine;
  st["m_nmse"] = m_nmse;
  st["v_nmse"] = v_nmse;
  st["m_quant_nmse"] = m_quant_nmse;
  st["v_quant_nmse"] = v_quant_nmse;
  return st;
}

Json DriftRun::to_json() const {
  Json e = Json::object();
  e["spec"] = spec;
  if (note) e["note"] = *note;
  Json st = Json::array();
  for (const auto& s : steps) st.push_back(s.to_json());
  e["steps"] = std::move(st);
  return e;
}

Json OptimResult::to_json() const {
  Json doc = Json::object();
  doc["source"] = source;
  doc["window"] = window.to_json();
  doc["moments"] = moments.to_json();
  doc["update_rule"] = update_rule;
  doc["rounding"] = rounding;
  doc["seed"] = seed;
  doc["definitions"] = definitions.to_json();
  if (table1) {
    doc["table1"] = table1_json(table1->mse);
    doc["table1_ratio_to_e4m3"] = table1_json(table1->ratio_to_e4m3);
    doc["table1_paper"] = table1_json(table1->paper);
    doc["table1_paper_ratio_to_e4m3"] = table1_json(table1->paper_ratio_to_e4m3);
    doc["table1_details"] = table1->details.to_json();
    if (table1_lowbit) doc["table1_lowbit"] = table1_lowbit->to_json();
  } else {
    doc["table1"] = nullptr;
    doc["table1_skipped"] = table1_skipped;
  }
  if (fp32_replay) {
    doc["fp32_replay_max_rel_err"] = fp32_replay->max_rel_err;
    doc["fp32_replay"] = fp32_replay->to_json();
  } else {
    doc["fp32_replay_max_rel_err"] = nullptr;
    doc["fp32_replay"] = Json::object();
    doc["fp32_replay"]["skipped"] = fp32_replay_skipped;
  }
  Json mem = Json::array();
  for (const auto& e : memory) mem.push_back(e.to_json());
  doc["memory"] = std::move(mem);
  doc["memory_params"] = memory_params;
  if (drift) {
    Json d = Json::object();
    for (const auto& run : *drift) d[run.name] = run.to_json();
    doc["drift"] = std::move(d);
  } else {
    doc["drift"] = nullptr;
    doc["drift_skipped"] = drift_skipped;
  }
  return doc;
}

}  // namespace fp8sim::optim
