// What every optimizer op reads besides its own attributes: the learning-rate schedule (linear
// warm-up, then constant or cosine decay, as llm.c and nanoGPT train GPT-2) and global-norm
// gradient clipping (Note [gradient clipping] in runtime/graph/autodiff.cpp).
#pragma once

#include <cstdint>

#include "runtime/core/attrs.h"

namespace remat {

// Keys: lr, warmup_steps (default 0), schedule (constant | cosine, default constant),
// decay_steps (cosine: the step at which lr reaches min_lr; > warmup_steps), min_lr (default 0),
// clip_norm (default 0: no clipping). Steps count from 0.
struct LrSchedule {
  double lr = 0.01;
  int64_t warmup_steps = 0;
  bool cosine = false;
  int64_t decay_steps = 0;
  double min_lr = 0;
  double clip_norm = 0;
};

// Reads the keys above (errors at their positions).
LrSchedule parse_lr_schedule(AttrReader& r, double default_lr);

// The learning rate of 0-based step s:
//   s <  warmup_steps:               lr * (s + 1) / warmup_steps
//   constant, or cosine past decay:  lr (constant) / min_lr (cosine, s >= decay_steps)
//   cosine in between:               min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2,
//                                    r = (s - warmup_steps) / (decay_steps - warmup_steps)
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace remat
