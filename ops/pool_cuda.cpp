// Pooling on the GPU. maxpool: CUDNN_POOLING_MAX_DETERMINISTIC (plain CUDNN_POOLING_MAX's
// backward is not reproducible); padding never wins a max, as on the CPU. avgpool:
// CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, the CPU's divisor kh * kw. cuDNN pads
// symmetrically: per-side padding (TensorFlow's 'same') and averages over the real elements go to
// kernels/pool.cu, which equals the CPU bit for bit. global_avgpool: the kernels/ launchers (sums
// in double, like the CPU). bf16: the tensors' descriptors say CUDNN_DATA_BFLOAT16 (cuDNN pools
// in FP32 and rounds the result once); kernels/pool.cu loads bf16 and rounds once too. A batch
// past cuDNN's element limit pools in calls over consecutive samples (Note [cuDNN's element
// limit] in cudnn_util.h).
#include "ops/pool_cuda.h"

#include <algorithm>
#include <sstream>

#include "kernels/kernels.h"
#include "ops/cpu_storage.h"
#include "ops/cudnn_util.h"
#include "ops/data_format.h"

namespace remat {
namespace {

struct PoolDescs {
  CudnnPoolDesc pool;
  CudnnTensorDesc x, y;  // x [N, C, H, W], y [N, C, Ho, Wo]
};

const PoolDescs& pool_descs(const PoolCudaParams& p, const ExecContext& ctx, const Shape& x,
                            const Shape& y, DType dtype) {
  std::ostringstream key;
  key << (p.max ? "maxpool:" : "avgpool:") << shape_key(x) << ":" << shape_key(y) << ":k" << p.kh
      << "," << p.kw << "s" << p.sh << "," << p.sw << "p" << p.top << "," << p.left
      << (dtype == DType::BF16 ? ":bf16" : "") << (p.channels_last ? ":nhwc" : "");
  return cuda_cache(ctx).get_or_create<PoolDescs>(key.str(), [&] {
    PoolDescs d;
    d.pool = cudnn_pool_desc();
    REMAT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
        d.pool.get(),
        p.max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        CUDNN_PROPAGATE_NAN, to_int(p.kh, "kernel_h"), to_int(p.kw, "kernel_w"),
        to_int(p.top, "pad_h"), to_int(p.left, "pad_w"), to_int(p.sh, "stride_h"),
        to_int(p.sw, "stride_w")));
    const ImageDims xd = image_dims(x, p.channels_last), yd = image_dims(y, p.channels_last);
    const cudnnTensorFormat_t format = p.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    d.x = cudnn_tensor_4d(xd.n, xd.c, xd.h, xd.w, dtype, format);
    d.y = cudnn_tensor_4d(yd.n, yd.c, yd.h, yd.w, dtype, format);
    int n = 0, c = 0, h = 0, w = 0;
    REMAT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(d.pool.get(), d.x.get(), &n, &c, &h, &w));
    REMAT_CHECK(yd.n == n && yd.c == c && yd.h == h && yd.w == w,
                "cuDNN pooling output [" << n << ", " << c << ", " << h << ", " << w
                                         << "] differs from the graph's " << shape_str(y));
    return d;
  });
}

// cuDNN serves symmetric padding with max pooling or an average counting the padding.
bool cudnn_pools(const PoolCudaParams& p) {
  return p.top == p.bottom && p.left == p.right && (p.max || p.count_pad);
}

PoolWindow window_of(const PoolCudaParams& p, const Shape& x, const Shape& y) {
  const ImageDims xd = image_dims(x, p.channels_last), yd = image_dims(y, p.channels_last);
  PoolWindow g{xd.n * xd.c, xd.h, xd.w, yd.h, yd.w, p.kh, p.kw, p.sh, p.sw, p.top, p.left};
  g.pixel = xd.pixel_stride();
  return g;
}

// kernels/pool.cu: [x] -> y, or the backward [dy (, x, y)] -> dx.
void pool_kernels(const PoolCudaParams& p, const ExecContext& ctx, bool backward) {
  const TensorView& x = backward ? ctx.output : ctx.inputs[0];
  const TensorView& y = backward ? ctx.inputs[0] : ctx.output;
  const PoolWindow g = window_of(p, x.shape(), y.shape());
  const cudaStream_t stream = cuda_context(ctx).stream;
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    if (!backward && p.max) pool_max_forward(storage<T>(ctx.output), storage<T>(x), g, stream);
    if (!backward && !p.max)
      pool_avg_forward(storage<T>(ctx.output), storage<T>(x), g, p.count_pad, stream);
    if (backward && p.max)
      pool_max_backward(storage<T>(ctx.output), storage<T>(y), storage<T>(ctx.inputs.at(1)), g,
                        stream);
    if (backward && !p.max)
      pool_avg_backward(storage<T>(ctx.output), storage<T>(y), g, p.count_pad, stream);
  });
}

// Calls f(descs, first sample) over the batch of x (input-sized) and y (output-sized)
// in as few calls as cuDNN's element limit allows.
template <typename F>
void for_each_pool_call(const PoolCudaParams& p, const ExecContext& ctx, const TensorView& x,
                        const TensorView& y, F f) {
  const Shape& xs = x.shape();
  const int64_t n = xs[0];
  const int64_t per = std::max(x.numel(), y.numel()) / n;
  const int64_t chunk = cudnn_samples_per_call(ctx, n, per);
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t count = std::min(chunk, n - first);
    Shape xc = xs, yc = y.shape();
    xc[0] = yc[0] = count;
    f(pool_descs(p, ctx, xc, yc, x.desc->dtype), first);
  }
}

// The address of sample `first` of `t` (NCHW and NHWC samples are contiguous).
template <typename P>
P* sample_at(P* base, const TensorView& t, int64_t first) {
  return at_byte(base, first * (t.desc->bytes() / t.shape()[0]));
}

}  // namespace

void pool_forward_cuda(const PoolCudaParams& p, const ExecContext& ctx) {
  if (!cudnn_pools(p)) return pool_kernels(p, ctx, false);
  const TensorView& x = ctx.inputs[0];
  const TensorView& y = ctx.output;
  const float one = 1.0f, zero = 0.0f;
  for_each_pool_call(p, ctx, x, y, [&](const PoolDescs& d, int64_t first) {
    REMAT_CUDNN_CHECK(cudnnPoolingForward(cuda_context(ctx).cudnn, d.pool.get(), &one, d.x.get(),
                                          sample_at(x.data, x, first), &zero, d.y.get(),
                                          sample_at(y.data, y, first)));
  });
}

void pool_backward_cuda(const PoolCudaParams& p, const ExecContext& ctx) {
  if (!cudnn_pools(p)) return pool_kernels(p, ctx, true);
  const TensorView& dy = ctx.inputs[0];
  const TensorView& dx = ctx.output;
  // Average pooling's gradient does not depend on x or y, but cuDNN's API takes them: y is
  // given dy's memory and x dx's (same shapes; values unused in average mode).
  const void* x = p.max ? ctx.inputs.at(1).data : dx.data;
  const void* y = p.max ? ctx.inputs.at(2).data : dy.data;
  const float one = 1.0f, zero = 0.0f;
  for_each_pool_call(p, ctx, dx, dy, [&](const PoolDescs& d, int64_t first) {
    REMAT_CUDNN_CHECK(cudnnPoolingBackward(
        cuda_context(ctx).cudnn, d.pool.get(), &one, d.y.get(), sample_at(y, dy, first), d.y.get(),
        sample_at(dy.data, dy, first), d.x.get(), sample_at(x, dx, first), &zero, d.x.get(),
        sample_at(dx.data, dx, first)));
  });
}

void global_avgpool_forward_cuda(const ExecContext& ctx, bool channels_last) {
  const TensorView& x = ctx.inputs[0];
  const ImageDims d = image_dims(x.shape(), channels_last);
  with_storage(x.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_forward(storage<T>(ctx.output), storage<T>(x), d.n * d.c, d.plane(),
                           d.pixel_stride(), cuda_context(ctx).stream);
  });
}

void global_avgpool_backward_cuda(const ExecContext& ctx, bool channels_last) {
  const TensorView& dx = ctx.output;
  const ImageDims d = image_dims(dx.shape(), channels_last);
  with_storage(dx.desc->dtype, [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_backward(storage<T>(dx), storage<T>(ctx.inputs[0]), d.n * d.c, d.plane(),
                            d.pixel_stride(), cuda_context(ctx).stream);
  });
}

}  // namespace remat
