// The tolerances of the CUDA-vs-CPU op harness (tests/cuda_op_harness.h declares
// cuda_tolerance(op), the one table; this header the pieces compare_runs builds on).
#pragma once

#include <cstdint>

#include "runtime/graph/graph.h"
#include "tests/cuda_op_harness.h"

namespace remat {

constexpr CudaTolerance kCudaExact{0.0, 0.0};
constexpr CudaTolerance kCudaReduction{1e-6, 1e-5};
constexpr CudaTolerance kCudaOptimizer{1e-7, 1e-6};  // exact when both sides avoid FMA
constexpr CudaTolerance kCudaBatchNorm{1e-5, 1e-4};
// Products summed by cuDNN / cuBLAS (TF32 off): Note [GEMM tolerance] in cuda_tolerance.cpp.
constexpr CudaTolerance kCudaGemm{1e-6, 0.0, true};

// K of Note [GEMM tolerance]: the length of the sums behind one output of node n.
int64_t gemm_reduction_length(const Node& n, const Graph& g);

}  // namespace remat
