// CUDA-vs-CPU op harness (ggml's test-backend-ops idea): runs the one-op graph of an OpHarness
// (forward node + the backward nodes its gradient rule emits) on the CPU backend (the oracle)
// and on the CUDA backend from the same initial values, and compares every value afterwards
// with the per-op tolerance table (cuda_tolerance.cpp, the ONE place CUDA tolerances live).
//
// What a run does (run_graph): one backend buffer per graph value (raw_alloc); forward inputs
// and params get the OpHarness's host values (set them through host() first), "dy" gets the
// harness's dy (random unless set_dy), every other value and every workspace is filled with
// NaN, so an element a kernel leaves unwritten (or workspace read before written) shows up.
// Nodes run in graph order (node 0, then the backward nodes) `steps` times with
// ExecContext::step = step + s; the workspace comes from backend.workspace_bytes. Then every
// value is downloaded. Update ops (sgd, adam) and batchnorm write inputs in place; comparing
// every value covers parameters, optimizer state and running statistics.
//
// Usage (a GPU test; skips cleanly without a device):
//   TEST_F(CudaOpTest, Relu) {   // CudaOpTest::SetUp GTEST_SKIPs when no device is usable
//     CudaOpHarness h(registry(), OpCase{"relu", {}, {f32({2, 3, 4, 4})}});
//     EXPECT_TRUE(h.compare_with_cpu(cuda()));
//     EXPECT_TRUE(h.check_rerun_identical(cuda()));
//   }
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "tests/op_harness.h"

namespace remat {

// An element passes when |gpu - cpu| <= abs + rel * |cpu| (both NaN also passes; one NaN
// fails). abs = rel = 0 demands equal floats (-0 == +0).
struct CudaTolerance {
  double abs;
  double rel;
  bool by_magnitude = false;  // abs grows with the reduction (Note [GEMM tolerance])
};

// THE table of CUDA-vs-CPU tolerances (cuda_tolerance.cpp), keyed by node op name. Throws
// for an op without an entry, so a new op must be given one.
//   exact:     data movement and elementwise kernels that follow the CPU's rounding
//              (Note [kernel vs CPU rounding] in kernels/kernels.h);
//   reduction: sums in a different (tree) order than the CPU: 1e-6 abs, 1e-5 rel;
//   gemm:      cuDNN / cuBLAS convolutions and GEMMs with TF32 off: derived per element from
//              the reduction length and the magnitude of the summed terms (Note [GEMM
//              tolerance] in cuda_tolerance.cpp);
//   batchnorm: cuDNN's statistics and our channel reductions: 1e-5 abs, 1e-4 rel.
// Note [bf16 CUDA tolerance]: a value whose writer runs in bf16 gets 3u relative more (u = 2^-8):
// the CPU and the GPU each round an FP32 result to bf16 once, and two FP32 results within the
// F32 tolerance can round to neighbouring bf16 values, so |gpu - cpu| <= F32 tolerance +
// 2u |cpu| (+ u |cpu| of slack). A convolution, transposed convolution or dense layer with a
// bias or activation rounds twice on the GPU: its GEMM's result y0 to bf16, then y0 + b after
// the epilogue kernel. The first rounding errs by up to u |y0|, which is not bounded by the
// result when the bias cancels y0 (seen on an H100: 0.1406 vs 0.1367 where y0 was about 1; on
// an H200, conv2d_transpose: 0.00708 vs 0.00775): those ops get u M more, M = the Note [GEMM
// tolerance]'s magnitude run (sum |x w| + |b| >= |y0|).
CudaTolerance cuda_tolerance(const std::string& op);

// Values of every graph value after a run: F32 and BF16 (widened) values in f, I32 values in i
// (index = ValueId).
struct GraphRun {
  std::vector<std::vector<float>> f;
  std::vector<std::vector<int32_t>> i;
};

class CudaOpHarness {
 public:
  // Builds the OpHarness; when the op has a gradient rule, emits its backward nodes (an
  // untimed CPU run of OpHarness::gradients). Throws what OpHarness throws.
  CudaOpHarness(const OpRegistry& ops, OpCase c);

  OpHarness& host() { return host_; }          // set inputs / params here before running
  const Graph& graph() const { return host_.graph(); }
  void set_dy(std::vector<float> dy);          // gradient of the output; random by default

  int64_t step = 0;           // ExecContext::step of the first run (run s uses step + s)
  bool first_compute = true;  // ExecContext::first_compute

  // Runs every node on `b` `steps` times (see the header comment) and downloads every value.
  // With `inputs_from` (one step only), each node first gets the values of `inputs_from` for
  // its inputs that an earlier node wrote, so it computes from the reference's inputs rather
  // than from its own backend's. Throws what the kernels throw (e.g. a bad label from
  // softmax_xent).
  GraphRun run_graph(Backend& b, int steps = 1, const GraphRun* inputs_from = nullptr);
  // CPU backend vs `cuda`: every value, with cuda_tolerance(op of the value's writer).
  ::testing::AssertionResult compare_with_cpu(Backend& cuda, int steps = 1);
  // The same comparison node by node (Note [node-wise comparison]): each CUDA node computes
  // from the CPU's values of its inputs. For graphs with a threshold (a relu epilogue, a max)
  // on values that a rounding can move across it.
  ::testing::AssertionResult compare_nodewise_with_cpu(Backend& cuda);
  // The CPU run on the absolute values of every input and of dy (Note [GEMM tolerance]).
  const GraphRun& magnitude_run(Backend& cpu, int steps = 1);
  // Two full runs on `b` give bit-identical values (recomputation must be bit-identical).
  ::testing::AssertionResult check_rerun_identical(Backend& b, int steps = 1);

 private:
  OpHarness host_;
  std::vector<float> dy_;
  GraphRun magnitude_;
};

// Compares two runs of the same graph value by value: bitwise, or with cuda_tolerance of each
// value's writer (the forward node's op for values no node produces). For tests that drive
// run_graph themselves; `magnitude` (CudaOpHarness::magnitude_run) is needed when a GEMM-like
// op writes a value.
::testing::AssertionResult compare_runs(const Graph& g, const GraphRun& want,
                                        const GraphRun& got, bool bitwise,
                                        const GraphRun* magnitude = nullptr);

// A CUDA backend with `opt` (a forced convolution layout, a small workspace limit) beside the
// fixture's; null, with a test failure, if it cannot start.
std::unique_ptr<Backend> cuda_backend_with(const CudaOptions& opt);
// One whose convolutions always run staged NHWC (Note [staged NHWC convolutions]) under the
// given workspace limit (which also caps the staged chunk).
std::unique_ptr<Backend> staged_nhwc_backend(int64_t workspace_limit);
// One whose 1 x 1 convolutions always run as cuBLAS GEMMs where the shape allows (Note [1x1
// convolutions as GEMMs]); every other convolution as the default backend's.
std::unique_ptr<Backend> gemm_conv_backend();
// One whose train-mode batch norm runs as `k` says on every plane (Note [batchnorm on the GPU]).
std::unique_ptr<Backend> bn_kernels_backend(BnKernels k);

// Fixture for CUDA op tests: SetUp skips the test when no CUDA device exists, so the suite
// passes on a machine without a GPU, and fails it when a device exists but the backend cannot
// start.
class CudaOpTest : public ::testing::Test {
 protected:
  void SetUp() override;
  Backend& cuda() { return *cuda_; }
  const OpRegistry& registry() const { return registry_; }

 private:
  std::unique_ptr<Backend> cuda_;
  OpRegistry registry_ = make_builtin_registry();
};

}  // namespace remat
