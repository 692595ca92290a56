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
  int64_t persistent_fwd_bwd = 0;        // persistent bytes alive in forward and backward
  int64_t persistent_all = 0;            // with every gradient
  int64_t outside_freed_after_head = 0;  // activations outside the layers freed by the LM head's backward
  int64_t ids = 0;                       // token ids kept from forward's start
  int64_t loss_saved = 0;                // what the loss saves, made after the LM head
  int64_t per_layer = 0;                 // what one layer keeps in forward
  int64_t working_set = 0;               // a layer's backward working set
  std::string working_set_what;
  // Further temporaries of a layer's backward: the recomputed layer's tensors under
  // checkpointing, eager attention's softmax backward.
  std::vector<Component> layer_backward_extra;
  // Gathering fp32: add autocast's casts of the gathered weights per phase.
  bool autocast_casts = true;
};

// Adds FSDP2's all-gather, unsharded-parameter, gradient and reduce-scatter buffers to f's phases
// (o.zero == 3, o.fsdp == 2), with the copy-out phases of forward and the final callback's.
void add_fsdp2_phases(Footprint& f, const model::ModelConfig& m, const MemoryOptions& o, const recipe::MemoryModel& r,
                      const Fsdp2Steps& st);

}  // namespace fp8sim::memory
