// How far the flash attention kernels (bf16 tensor cores, Note [flash attention kernels] in
// kernels/attention_flash.cu) may be from the CPU reference of the attention op: the magnitudes
// and bound of Note [flash attention tolerance], and a host model of the kernels' rounding
// points that shows the bound is neither too tight for them nor too loose to see a wrong kernel.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace remat {

// An attention op's sizes and attributes as its kernels see them (Note [fused attention] in
// ops/attention.cpp): q, k, v, dO are [N, H, T, D]; masks numbered from `first` at `step`.
struct AttentionCase {
  int64_t n, heads, t, d;
  double scale;
  bool causal;
  double rate;
  uint64_t seed, step = 0, first = 0;
};

struct AttentionInputs {
  std::vector<float> q, k, v, dout;  // [N, H, T, D] each
};

// The op's output [N, H, T, D] and its gradient's packed output [N, 3H, T, D] (dq, dk, dv).
struct AttentionOutputs {
  std::vector<float> out, grads;
};

// M of Note [flash attention tolerance] for every element of out and grads.
AttentionOutputs attention_magnitudes(const AttentionCase& c, const AttentionInputs& x);

// Every element of `got` within Note [flash attention tolerance] of `want` (the CPU reference).
::testing::AssertionResult within_flash_bound(const AttentionCase& c, const AttentionInputs& x,
                                              const AttentionOutputs& want,
                                              const AttentionOutputs& got);

// The flash kernels' arithmetic without their tiles: FP32 scores, l and delta, p c and dS
// rounded to bf16 before their products, FP32 sums, bf16 results. `drop_mask_in_dv` leaves the
// dropout factor out of dv (a plausible kernel bug the bound must catch).
AttentionOutputs attention_flash_model(const AttentionCase& c, const AttentionInputs& x,
                                       bool drop_mask_in_dv = false);

}  // namespace remat
