// Native CUDA kernels as plain host-callable launchers (llm.c style): raw device pointers,
// sizes, a stream. They never allocate, never synchronize (except where noted), never see a
// framework type, and check every launch (throwing remat::Error through REMAT_CUDA_CHECK).
// Plain C++ declarations: ops/*.cpp include this with the host compiler under REMAT_HAVE_CUDA.
// The declarations live in one header per family of kernels, included below.
//
// Note [kernel determinism]: every launcher gives bit-identical results when rerun on the same
// inputs (a recomputed node must equal its first computation). No floating-point atomics; every
// reduction sums in an order fixed by the shapes alone (fixed grid, fixed tree).
// Note [kernel vs CPU rounding]: elementwise kernels use the CPU reference's operation order and
// the round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...) so that nvcc does not contract
// them into FMAs: relu*, add, copy, concat*, upsample*, dropout*, global_avgpool_backward, sgd,
// adam and the column-wise bias_grad reduce (plane == 1) are meant to equal the CPU bit for bit.
// Reductions that are parallel over a long axis (softmax_xent, global_avgpool_forward, bias_grad
// with plane > 1) sum in double in a different (tree) order than the CPU: equal within ~1 ulp.
//
// Note [bf16 launchers]
// The launchers of launchers_transformer.h (but the token embedding) and the per-channel
// reductions and reductions of launchers_reduction.h each have a bf16 overload of the same name:
// activation tensors are uint16_t* bf16 (__nv_bfloat16 inside the .cu files), parameters
// (layer-norm weight and bias, the position table) and everything they reduce into (losses,
// column sums, bias, weight and gamma gradients) stay float. The kernel is the F32 one templated
// on its storage type (kernels/common.cuh): it widens each bf16 value exactly, computes in FP32 /
// double in the F32 kernel's order, and rounds each bf16 output once from the FP32 value the F32
// kernel would store: it is meant to equal the F32 kernel run on widened copies with its output
// rounded (the backend's staging, Note [bf16 execution]) bit for bit, so a native bf16 node and
// a staged one agree, and it keeps Note [kernel determinism] (the grid and the order of every
// sum are those of the F32 kernel). Workspace sizes do not depend on the dtype.
#pragma once

#include "kernels/attention.h"  // the fused attention launchers
#include "kernels/launchers_elementwise.h"
#include "kernels/launchers_reduction.h"
#include "kernels/launchers_transformer.h"
#include "kernels/launchers_update.h"
