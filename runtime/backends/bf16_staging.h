// How a backend runs an op in bf16 when the op's kernel computes in FP32 only: the layout of
// the FP32 staging buffers inside the node's workspace, and the FP32 view the kernel sees.
// The backends do the conversions (CPU loops, CUDA kernels); this file only decides where.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/graph/op.h"

namespace remat {

// Note [bf16 execution]
// A node runs in bf16 when one of its inputs or its output is BF16. Its math is FP32 whatever
// runs it: BF16 inputs are widened exactly, the op's bf16_operands (F32 weights of GEMM-like
// ops) are rounded to bf16 first, and each stored result is rounded to nearest even once, into
// a BF16 output or, for ops with bf16_rounds_output, in place in an F32 output. Persistent
// values (parameters, gradients, optimizer state, running statistics) stay F32.
// An op whose kernel for a backend is not bf16-native gets this from the backend: its BF16
// inputs, rounded operands and BF16 output are staged as FP32 in the node's workspace, after
// the kernel's own workspace, so the plan counts the staging bytes and the measured peak still
// equals the predicted one. A native kernel (cuDNN and cuBLAS in bf16, the cast op) does the
// same arithmetic itself; where it rounds an intermediate too (a GEMM's output before the bias
// epilogue) the CUDA path differs from the CPU reference by at most one more rounding.
// Recomputation runs the same staging and kernels on the same inputs: bit-identical.

// True when one of ctx's inputs or its output is BF16.
bool node_runs_bf16(const ExecContext& ctx);

// Where the FP32 copies of one node live in its workspace. Offsets are bytes from the start of
// the workspace, each kAllocAlignment-aligned; -1 = not staged. A per-sample op
// (OpDef::bf16_batched_inputs) is staged and run one sample at a time: its batched inputs and
// output are then sliced, and their copies hold one sample.
struct Bf16Staging {
  int64_t kernel_workspace = 0;      // the kernel's own workspace, at offset 0
  std::vector<int64_t> input_offset;  // per input
  std::vector<char> input_rounded;    // per input: a bf16 operand (F32, rounded) vs widened
  std::vector<char> input_batched;    // per input: sliced along the batch with the output
  int64_t output_offset = -1;         // a BF16 output, computed in FP32 there
  bool round_output = false;          // an F32 output rounded in place after the kernel
  int64_t samples = 1;                // kernel runs: the batch when per sample, else 1
  std::vector<TensorDesc> descs;      // the FP32 descriptors the kernel sees: inputs, output
  int64_t total_bytes = 0;            // the node's workspace: kernel's + staging
};

// The staging of a node running in bf16 (node_runs_bf16(ctx)) whose kernel is FP32-only.
// `kernel_workspace` gives the kernel's own workspace for the FP32 view of ctx (data pointers
// may be null). Throws UserError when the op has no bf16 path.
Bf16Staging bf16_staging(const OpDef& op, const ExecContext& ctx,
                         const std::function<int64_t(const ExecContext&)>& kernel_workspace);

// ctx as the kernel sees it for run `sample` (0 .. s.samples - 1): staged inputs and output
// point into ctx.workspace (which must be at least s.total_bytes), the others at their data (a
// batched one at the sample's slice), descriptors are s.descs (owned by `s`, which must outlive
// the result), the workspace is the kernel's own part, and batch_offset counts the sample.
ExecContext bf16_staged_context(const Bf16Staging& s, const ExecContext& ctx, int64_t sample);

// The part of ctx's input i (or, with i = -1, of its output) that run `sample` reads or writes:
// its address and element count (the whole tensor when not batched).
struct Bf16Slice {
  void* data;
  int64_t count;
};
Bf16Slice bf16_slice(const Bf16Staging& s, const ExecContext& ctx, int input, int64_t sample);

// UserError "op 'x' (node 'n') has no bf16 path" unless op.bf16.
void require_bf16_path(const OpDef& op, const ExecContext& ctx);

}  // namespace remat
