// im2col / col2im loops (see im2col.h for the layout).
#include "ops/im2col.h"

namespace remat {

void im2col_cpu(const float* x, const ConvGeometry& g, float* col) {
  im2col_strided_cpu(x, g, g.height * g.width, 1, col);
}

void col2im_add_cpu(const float* col, const ConvGeometry& g, float* dx) {
  col2im_add_strided_cpu(col, g, g.height * g.width, 1, dx);
}

void im2col_strided_cpu(const float* x, const ConvGeometry& g, int64_t channel_stride,
                        int64_t pixel_stride, float* col) {
  float* out = col;
  for (int64_t c = 0; c < g.channels; ++c) {
    const float* xc = x + c * channel_stride;
    for (int64_t r = 0; r < g.kernel_h; ++r) {
      for (int64_t s = 0; s < g.kernel_w; ++s) {
        for (int64_t ho = 0; ho < g.out_h; ++ho) {
          int64_t h = ho * g.stride_h - g.pad_h + r * g.dilation_h;
          if (h < 0 || h >= g.height) {
            for (int64_t wo = 0; wo < g.out_w; ++wo) *out++ = 0.0f;
            continue;
          }
          const float* row = xc + h * g.width * pixel_stride;
          for (int64_t wo = 0; wo < g.out_w; ++wo) {
            int64_t w = wo * g.stride_w - g.pad_w + s * g.dilation_w;
            *out++ = (w >= 0 && w < g.width) ? row[w * pixel_stride] : 0.0f;
          }
        }
      }
    }
  }
}

void col2im_add_strided_cpu(const float* col, const ConvGeometry& g, int64_t channel_stride,
                            int64_t pixel_stride, float* dx) {
  const float* in = col;
  for (int64_t c = 0; c < g.channels; ++c) {
    float* dxc = dx + c * channel_stride;
    for (int64_t r = 0; r < g.kernel_h; ++r) {
      for (int64_t s = 0; s < g.kernel_w; ++s) {
        for (int64_t ho = 0; ho < g.out_h; ++ho) {
          int64_t h = ho * g.stride_h - g.pad_h + r * g.dilation_h;
          if (h < 0 || h >= g.height) {
            in += g.out_w;
            continue;
          }
          float* row = dxc + h * g.width * pixel_stride;
          for (int64_t wo = 0; wo < g.out_w; ++wo, ++in) {
            int64_t w = wo * g.stride_w - g.pad_w + s * g.dilation_w;
            if (w >= 0 && w < g.width) row[w * pixel_stride] += *in;
          }
        }
      }
    }
  }
}

}  // namespace remat
