// im2col / col2im for one image's channel group (CPU conv2d via GEMM), Caffe's layout:
// col[(c * R + r) * S + s][ho * Wo + wo] = x[c][ho*sh - ph + r*dh][wo*sw - pw + s*dw] (0 outside).
#pragma once

#include <cstdint>

namespace remat {

struct ConvGeometry {
  int64_t channels;          // C of this group
  int64_t height, width;     // H, W
  int64_t kernel_h, kernel_w;  // R, S
  int64_t pad_h, pad_w;
  int64_t stride_h, stride_w;
  int64_t dilation_h, dilation_w;
  int64_t out_h, out_w;      // Ho, Wo
  int64_t col_rows() const { return channels * kernel_h * kernel_w; }
  int64_t col_cols() const { return out_h * out_w; }
};

// x: [C, H, W] -> col: [C*R*S, Ho*Wo] (every element written).
void im2col_cpu(const float* x, const ConvGeometry& g, float* col);
// col: [C*R*S, Ho*Wo] -> dx: [C, H, W], ACCUMULATING (dx += scatter(col)).
void col2im_add_cpu(const float* col, const ConvGeometry& g, float* dx);
// The same with x's (dx's) element (c, h, w) at c * channel_stride + (h * W + w) * pixel_stride:
// NCHW is (H * W, 1), one group of an NHWC image (x at its first channel) is (1, C).
void im2col_strided_cpu(const float* x, const ConvGeometry& g, int64_t channel_stride,
                        int64_t pixel_stride, float* col);
void col2im_add_strided_cpu(const float* col, const ConvGeometry& g, int64_t channel_stride,
                            int64_t pixel_stride, float* dx);

}  // namespace remat
