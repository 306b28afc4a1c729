// The scalars of one Adam / AdamW step: computed on the host by ops/adam.cpp (in double,
// rounded once to float, as PyTorch does with its hyperparameters), used by the CPU reference
// and by the adam_update kernel. Plain C++: CPU-only builds include it too.
#pragma once

namespace remat {

struct AdamStep {
  float step_size;        // lr_t / (1 - beta1^t)
  float bc2_sqrt;         // sqrt(1 - beta2^t)
  float lerp_weight;      // 1 - beta1
  float beta2, one_minus_beta2, eps;
  float l2;               // Adam: weight decay added to the gradient; AdamW: 0
  float decay_factor;     // AdamW: 1 - lr_t * weight_decay (decoupled); Adam: 1
};

}  // namespace remat
