// The CPU reference of dense's and matmul's bf16 nodes (Note [bf16 execution]): the FP32
// GEMMs of their F32 kernels, fed with bf16 operands widened a block at a time into the
// workspace (the FP32 weight rounded to bf16 first, OpDef::bf16_operands) and each result
// rounded once into bf16 (the weight gradient: rounded in its F32 output). Blocks partition the
// GEMMs' output rows or columns, never their reductions (each element's sum has the same terms,
// in OpenBLAS's order for a GEMM of that block's size, which can differ from the whole GEMM's in
// the last FP32 bits: tests/test_ops_bf16.cpp allows the neighbouring bf16 value for these ops).
// Every call gives the same bits (recomputation). Workspaces are what these functions use.
#pragma once

#include <cstdint>

#include "ops/fused_activation.h"

namespace remat {

enum class DensePass { Forward, GradInput, GradWeight };

// Workspace bytes of a bf16 dense pass over `rows` rows of F inputs and U units.
int64_t dense_bf16_workspace(DensePass pass, int64_t rows, int64_t f, int64_t u);

// y[rows, U] = act(x[rows, F] rne(W)[U, F]^T + b): x, y bf16; W, b FP32 (b may be null).
void dense_forward_bf16_cpu(const uint16_t* x, const float* w, const float* b, Activation act,
                            int64_t rows, int64_t f, int64_t u, uint16_t* y, void* ws);
// dx[rows, F] = dz[rows, U] rne(W)[U, F]: dz, dx bf16.
void dense_grad_input_bf16_cpu(const uint16_t* dz, const float* w, int64_t rows, int64_t u,
                               int64_t f, uint16_t* dx, void* ws);
// dW[U, F] = rne(dz[rows, U]^T x[rows, F]): dz, x bf16; dW FP32 holding bf16 values.
void dense_grad_weight_bf16_cpu(const uint16_t* dz, const uint16_t* x, int64_t rows, int64_t u,
                                int64_t f, float* dw, void* ws);

// matmul's one product of the batch: C[M, N] = scale op(A) op(B), A, B, C bf16, with the F32
// kernel's strides (lda, ldb row strides; C packed). ws: matmul_bf16_workspace bytes.
int64_t matmul_bf16_workspace(int64_t m, int64_t n, int64_t k);
void matmul_bf16_cpu(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float scale,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* c,
                     void* ws);

}  // namespace remat
