#pragma once
// FSDP2's buffers added to a footprint's phases (sim/memory/memory.cpp): shared by the torch
// reference (compute_footprint) and transformers' profiles (framework.cpp), which differ in their
// phase names, where the loss is computed and what a layer's backward works in.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/memory/memory.hpp"

namespace fp8sim::memory {

struct Fsdp2Steps {
  std::string forward = "forward_end";       // the phase that ends forward
  std::string loss = "backward_loss";        // the loss's backward
  std::string backward = "backward_layers";  // replaced by FSDP2's layer phases and its final callback
  // The model computes the loss in its forward (transformers' model(labels=...)): the last layer's
  // all-gather output is held through the loss, and backward prefetches the last layer before the
  // loss's backward. Otherwise (a loop computing the loss on the returned logits) the output goes
  // once the logits are made, and the prefetch waits for the logits' gradient.
  bool loss_in_model = false;
  int64_t persistent_fwd_bwd = 0;  // persistent bytes alive in forward and backward
  int64_t persistent_all = 0;      // with every gradient
  Component working_set;           // a layer's backward working set
  // Further temporaries of a layer's backward: the recomputed layer's tensors under
  // checkpointing, eager attention's softmax backward.
  std::vector<Component> layer_backward_extra;
};

// Adds FSDP2's all-gather, unsharded-parameter, gradient and reduce-scatter buffers to f's phases
// (o.zero == 3, o.fsdp == 2), with the copy-out phases of forward and the final callback's. What
// forward keeps per layer, outside the layers and for the loss comes from f's activations.
void add_fsdp2_phases(Footprint& f, const model::ModelConfig& m, const MemoryOptions& o, const recipe::MemoryModel& r,
                      const Fsdp2Steps& st);

}  // namespace fp8sim::memory
