// Max and average pooling over windows with per-side padding (TensorFlow's 'same' pads the
// bottom and right more) and average pooling that divides by the window's real elements
// (count_include_pad false): the cases cuDNN's symmetric pooling cannot express
// (ops/pool_cuda.cpp uses cuDNN for the others). Gather kernels: one thread per output
// (forward) or per input element (backward, over the outputs whose windows cover it, in
// row-major order), the CPU reference's order and rounding (ops/pool.cpp): bit-identical to it
// and deterministic (Note [kernel determinism]). F32 or bf16 storage, FP32 arithmetic. NCHW
// planes, or channels-last ones (PoolWindow::pixel = C): element i of a tensor is channel
// i % pixel of pixel i / pixel, so consecutive threads read consecutive channels.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// The window of output (oh, ow) clipped to the input: rows [h0, h1), columns [w0, w1).
struct Win {
  int64_t h0, h1, w0, w1;
};

__device__ __forceinline__ Win window_of(const PoolWindow& g, int64_t oh, int64_t ow) {
  const int64_t hs = oh * g.sh - g.top, ws = ow * g.sw - g.left;
  Win w;
  w.h0 = hs > 0 ? hs : 0;
  w.h1 = hs + g.kh < g.H ? hs + g.kh : g.H;
  w.w0 = ws > 0 ? ws : 0;
  w.w1 = ws + g.kw < g.W ? ws + g.kw : g.W;
  return w;
}

// Pixel index (h * W + w) within the plane of the window's first maximum in row-major scan
// order; the plane's elements are `pixel` apart.
template <typename T>
__device__ int64_t argmax_of(const T* plane, const Win& win, int64_t W, int64_t pixel) {
  int64_t best = win.h0 * W + win.w0;
  float best_v = ld(plane[best * pixel]);
  for (int64_t h = win.h0; h < win.h1; ++h)
    for (int64_t w = win.w0; w < win.w1; ++w) {
      const float v = ld(plane[(h * W + w) * pixel]);
      if (v > best_v) best = h * W + w, best_v = v;
    }
  return best;
}

// 1 / the divisor of output (oh, ow)'s average: kh * kw, or its real elements.
__device__ __forceinline__ float avg_scale(const PoolWindow& g, const Win& win, bool count_pad) {
  const int64_t n = count_pad ? g.kh * g.kw : (win.h1 - win.h0) * (win.w1 - win.w0);
  return 1.0f / static_cast<float>(n);
}

// The outputs along one axis whose windows cover input index i: [lo, hi).
__device__ __forceinline__ void covering(int64_t i, int64_t pad, int64_t k, int64_t s,
                                         int64_t out_n, int64_t* lo, int64_t* hi) {
  const int64_t a = i + pad - k + 1;  // oh * s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  const int64_t b = (i + pad) / s + 1;  // oh * s <= i + pad
  *hi = b < out_n ? b : out_n;
}

template <typename T>
__global__ void max_forward_kernel(T* out, const T* inp, PoolWindow g) {
  const int64_t total = g.planes * g.Ho * g.Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt o = pixel_at(i, g.Ho, g.Wo, g.pixel);
    const T* plane = inp + plane_start(o, g.H, g.W, g.pixel);
    out[i] = plane[argmax_of(plane, window_of(g, o.row, o.col), g.W, g.pixel) * g.pixel];
  }
}

template <typename T>
__global__ void max_backward_kernel(T* dinp, const T* dout, const T* inp, PoolWindow g) {
  const int64_t total = g.planes * g.H * g.W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt x = pixel_at(i, g.H, g.W, g.pixel);
    const int64_t h = x.row, w = x.col;
    const T* plane = inp + plane_start(x, g.H, g.W, g.pixel);
    const T* dy = dout + plane_start(x, g.Ho, g.Wo, g.pixel);
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.top, g.kh, g.sh, g.Ho, &oh0, &oh1);
    covering(w, g.left, g.kw, g.sw, g.Wo, &ow0, &ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        if (argmax_of(plane, window_of(g, oh, ow), g.W, g.pixel) == h * g.W + w)
          s = __fadd_rn(s, ld(dy[(oh * g.Wo + ow) * g.pixel]));
    dinp[i] = st<T>(s);
  }
}

template <typename T>
__global__ void avg_forward_kernel(T* out, const T* inp, PoolWindow g, bool count_pad) {
  const int64_t total = g.planes * g.Ho * g.Wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt o = pixel_at(i, g.Ho, g.Wo, g.pixel);
    const T* plane = inp + plane_start(o, g.H, g.W, g.pixel);
    const Win win = window_of(g, o.row, o.col);
    float s = 0.0f;
    for (int64_t h = win.h0; h < win.h1; ++h)
      for (int64_t w = win.w0; w < win.w1; ++w)
        s = __fadd_rn(s, ld(plane[(h * g.W + w) * g.pixel]));
    out[i] = st<T>(__fmul_rn(s, avg_scale(g, win, count_pad)));
  }
}

template <typename T>
__global__ void avg_backward_kernel(T* dinp, const T* dout, PoolWindow g, bool count_pad) {
  const int64_t total = g.planes * g.H * g.W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PixelAt x = pixel_at(i, g.H, g.W, g.pixel);
    const int64_t h = x.row, w = x.col;
    const T* dy = dout + plane_start(x, g.Ho, g.Wo, g.pixel);
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.top, g.kh, g.sh, g.Ho, &oh0, &oh1);
    covering(w, g.left, g.kw, g.sw, g.Wo, &ow0, &ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const float scale = avg_scale(g, window_of(g, oh, ow), count_pad);
        s = __fadd_rn(s, __fmul_rn(ld(dy[(oh * g.Wo + ow) * g.pixel]), scale));
      }
    dinp[i] = st<T>(s);
  }
}

void check_window(const PoolWindow& g, const char* what) {
  REMAT_CHECK(g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.top >= 0 && g.left >= 0,
              what << ": bad window " << g.kh << "x" << g.kw << " stride " << g.sh << "x" << g.sw);
  REMAT_CHECK(g.pixel >= 1 && g.planes % g.pixel == 0,
              what << ": " << g.planes << " planes are not whole pixels of " << g.pixel);
}

// Checks the window and runs `kernel` with one thread per element of `total` (outputs for a
// forward, inputs for a backward); nothing to do when it is empty.
template <typename... Params, typename... Args>
void launch(const char* what, const PoolWindow& g, int64_t total, void (*kernel)(Params...),
            cudaStream_t stream, Args... args) {
  check_window(g, what);
  if (total <= 0) return;
  kernel<<<grid_for(total), kBlockSize, 0, stream>>>(args...);
  REMAT_CUDA_LAUNCH_CHECK();
}

int64_t outputs(const PoolWindow& g) { return g.planes * g.Ho * g.Wo; }
int64_t inputs(const PoolWindow& g) { return g.planes * g.H * g.W; }

}  // namespace

void pool_max_forward(float* out, const float* inp, const PoolWindow& g, cudaStream_t stream) {
  launch("pool_max_forward", g, outputs(g), max_forward_kernel<float>, stream, out, inp, g);
}
void pool_max_forward(uint16_t* out, const uint16_t* inp, const PoolWindow& g,
                      cudaStream_t stream) {
  launch("pool_max_forward", g, outputs(g), max_forward_kernel<__nv_bfloat16>, stream,
         bf16_ptr(out), bf16_ptr(inp), g);
}
void pool_max_backward(float* dinp, const float* dout, const float* inp, const PoolWindow& g,
                       cudaStream_t stream) {
  launch("pool_max_backward", g, inputs(g), max_backward_kernel<float>, stream, dinp, dout, inp,
         g);
}
void pool_max_backward(uint16_t* dinp, const uint16_t* dout, const uint16_t* inp,
                       const PoolWindow& g, cudaStream_t stream) {
  launch("pool_max_backward", g, inputs(g), max_backward_kernel<__nv_bfloat16>, stream,
         bf16_ptr(dinp), bf16_ptr(dout), bf16_ptr(inp), g);
}
void pool_avg_forward(float* out, const float* inp, const PoolWindow& g, bool count_pad,
                      cudaStream_t stream) {
  launch("pool_avg_forward", g, outputs(g), avg_forward_kernel<float>, stream, out, inp, g,
         count_pad);
}
void pool_avg_forward(uint16_t* out, const uint16_t* inp, const PoolWindow& g, bool count_pad,
                      cudaStream_t stream) {
  launch("pool_avg_forward", g, outputs(g), avg_forward_kernel<__nv_bfloat16>, stream,
         bf16_ptr(out), bf16_ptr(inp), g, count_pad);
}
void pool_avg_backward(float* dinp, const float* dout, const PoolWindow& g, bool count_pad,
                       cudaStream_t stream) {
  launch("pool_avg_backward", g, inputs(g), avg_backward_kernel<float>, stream, dinp, dout, g,
         count_pad);
}
void pool_avg_backward(uint16_t* dinp, const uint16_t* dout, const PoolWindow& g, bool count_pad,
                       cudaStream_t stream) {
  launch("pool_avg_backward", g, inputs(g), avg_backward_kernel<__nv_bfloat16>, stream,
         bf16_ptr(dinp), bf16_ptr(dout), g, count_pad);
}

}  // namespace remat
