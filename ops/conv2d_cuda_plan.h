// conv2d's per-shape cuDNN plans (private to ops/conv2d_cuda*.cpp): the descriptors of one pass
// at one chunk of samples, in the tensors' layout or staged in the other, with the algorithm
// chosen by measurement
// (Note [conv algorithm choice], Note [staged NHWC convolutions] in conv2d_cuda_plan.cpp) and
// the workspace it needs. CUDA builds only.
#pragma once
#ifdef REMAT_HAVE_CUDA
#include <cstdint>

#include "ops/conv2d_cuda.h"
#include "ops/cudnn_util.h"

namespace remat {

const char* conv_pass_name(ConvPass p);

// x [N, C, H, W], w [K, C/g, R, S], y [N, K, Ho, Wo] of a pass and their data (null at sizing
// time): forward [x, w] -> y; backward data [dy, w] -> dx (x is dx, y is dy); backward filter
// [dy, x] -> dw (w is dw).
struct ConvTensors {
  const TensorDesc* x;
  const TensorDesc* w;
  const TensorDesc* y;
  void* x_data;
  void* w_data;
  void* y_data;
};
ConvTensors conv_tensors(ConvPass pass, const ExecContext& ctx);

struct ConvPlan {
  bool gemm = false;     // one cuBLAS GEMM call instead (Note [1x1 convolutions as GEMMs])
  CudnnTensorDesc x, y;  // of one chunk of `chunk` samples (NHWC when nhwc)
  CudnnFilterDesc w;     // KRSC when nhwc
  CudnnConvDesc conv;
  bool chosen = false;
  bool nhwc = false;      // NHWC descriptors and a KRSC weight copy
  // The calls' layout is not the tensors': NHWC calls on NCHW tensors (Note [staged NHWC
  // convolutions]) or NCHW calls on channels-last ones (Note [channels-last convolutions]).
  bool staged = false;
  int algo = 0;
  float time_ms = 0;      // Find's (or the GEMM's measured) time of one call of `chunk` samples
  int64_t workspace = 0;  // cuDNN's
  int64_t chunk = 0;      // samples per cuDNN call (Note [conv algorithm choice])
  int64_t x_per_sample = 0, y_per_sample = 0;  // elements
  DType dtype = DType::F32;  // the data's (x, y); BF16: Note [bf16 convolutions]
  // Workspace pieces, in this order: the weight copy (NCHW: the bf16 rounding of the weight or
  // gradient; NHWC: the KRSC weight or gradient in the data's dtype), the chunk's x and y in
  // the calls' layout (staged), cuDNN's workspace. Offsets are alloc_bytes-aligned.
  int64_t weight_copy = 0, stage_x = 0, stage_y = 0;
  int64_t stage_x_at() const { return alloc_bytes(weight_copy); }
  int64_t stage_y_at() const { return stage_x_at() + alloc_bytes(stage_x); }
  int64_t cudnn_at() const { return stage_y_at() + alloc_bytes(stage_y); }
  int64_t total_workspace() const { return workspace > 0 ? cudnn_at() + workspace : cudnn_at(); }
};

// The cached plan of this pass and shapes, its layout, algorithm and chunk chosen.
ConvPlan& ready_plan(ConvPass pass, const ConvCudaParams& p, const ExecContext& ctx);

// Note [1x1 convolutions as GEMMs] (ops/conv2d_cuda_gemm.cpp). Whether the pass is a GEMM (per
// sample in NCHW, over the batch in NHWC): a 1 x 1 kernel, stride 1, no padding, one group.
bool conv_gemm_applies(ConvPass pass, const ConvCudaParams& p, const ConvTensors& t);
// Its plan: the whole batch at once, no workspace but the bf16 weight copy (forward and data).
ConvPlan conv_gemm_plan(ConvPass pass, const ConvTensors& t);
// Milliseconds of the GEMM form over the whole batch (the best of three timed calls), on the
// op's own tensors (writing only its output) or on the search scratch; negative when neither
// is at hand.
double conv_gemm_time_ms(ConvPass pass, const ConvTensors& t, bool channels_last,
                         const CudaContext& cc);
// The pass as GEMMs: forward (in x, w the weight as the GEMM reads it: F32, or the bf16
// copy) -> out y; data (in dy, w likewise) -> out dx; filter (in dy, w = x) -> out dw (F32,
// bf16-valued for bf16 data); `channels_last`: the tensors are NHWC.
void conv_gemm_run(ConvPass pass, const ConvTensors& t, bool channels_last, const void* in,
                   const void* w, void* out, const CudaContext& cc);

}  // namespace remat
#endif  // REMAT_HAVE_CUDA
