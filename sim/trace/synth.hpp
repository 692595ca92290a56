#pragma once
// A synthetic trace of a Llama-family model (RMSNorm, SwiGLU): one "full" step with every
// parameter's weight, grad and AdamW moments and every layer's activations and output gradients
// (optionally the first step of a grad window whose later steps hold every parameter's grad),
// named and tagged as the recorder tags a real capture (traces/FORMAT.md). The values are random
// with the shapes of real training tensors (below), so it sizes the work of analyze and report
// (and their MPI runs) on a model of any size without training one. It is no substitute for a
// real trace's numerics.
//
// Distributions (all from a counter-based generator keyed on (seed, tensor name, element index):
// the same options give the same values, whatever the thread count):
//   linear weights  N(0, 1/sqrt(in)) times a per-row lognormal(0, 0.25) factor; norms 1 + N(0, 0.05);
//                   embedding N(0, 0.02)
//   grads           N(0, 1e-4) times lognormal(0, 1) per element (heavy tails)
//   exp_avg         N(0, 3e-5) times lognormal(0, 1); exp_avg_sq 1e-8 x lognormal(0, 2): a wide
//                   dynamic range, as real second moments have
//   activations     N(0, 1) per op with outlier channels (1 in 256 channels x 20 in the residual
//                   stream, x 8 at linear inputs), the SiLU input N(-0.5, 1.5), the SwiGLU operands
//                   silu(N) and N, the down-projection input their product; bf16
//   output grads    N(0, 1e-5) times lognormal(0, 1); bf16
#include <cstdint>
#include <filesystem>
#include <string>

namespace fp8sim::trace {

struct SynthOptions {
  std::string model;      // a models/ name or a config file (load_model)
  int64_t layers = 0;     // decoder layers to write (0: the model's)
  int64_t tokens = 2048;  // tokens of the activations' micro-batch
  uint64_t seed = 0;
  int deflate_level = 0;  // random values barely compress; 0 writes fastest
  // Steps of a grad window (0: none): the full step is the window's first (grad_window = [100,
  // 100 + window - 1]) and every later step holds a fresh grad of every parameter, so `optim`
  // has work of the model's size (no end-of-window weights: its fp32 replay is skipped).
  int64_t window = 0;
  std::filesystem::path out;
  std::string command;  // recorded in the root attribute `command`
};

struct SynthSummary {
  int64_t tensors = 0;
  uint64_t bytes = 0;  // tensor bytes as stored (before compression)
};

// The tensors and bytes `opts` would write (nothing is written).
SynthSummary synth_plan(const SynthOptions& opts);
// Writes the trace (atomically: a temporary renamed into place). Throws UsageError for a model
// outside the Llama family (RMSNorm, SwiGLU) or a bad option.
SynthSummary write_synthetic_trace(const SynthOptions& opts);

}  // namespace fp8sim::trace
