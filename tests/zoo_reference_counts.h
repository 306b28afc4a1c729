// Reference parameter counts of the zoo's networks (tests/test_zoo.cpp), worked out from each
// architecture's definition: Keras's VGG16 encoder and keras_segmentation's encoders, decoders
// and heads, layer by layer.
#pragma once

#include <cstdint>

namespace remat::test {

// Reference counts, written from each architecture's definition (never from this code's output).
inline int64_t conv_params(int64_t c_in, int64_t c_out, int64_t k, bool bias = true) {
  return c_in * c_out * k * k + (bias ? c_out : 0);
}
inline int64_t dense_params(int64_t in, int64_t out) { return in * out + out; }

// VGG16 encoder convs (blocks 1..`blocks`), 3x3 with bias.
inline int64_t vgg16_encoder_params(int blocks) {
  const int64_t convs[5][4] = {{3, 64, 64, 0}, {64, 128, 128, 0}, {128, 256, 256, 256},
                               {256, 512, 512, 512}, {512, 512, 512, 512}};
  int64_t total = 0;
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i + 1 < 4 && convs[b][i + 1] != 0; ++i)
      total += conv_params(convs[b][i], convs[b][i + 1], 3);
  return total;
}

// Keras's vgg_unet / vgg_segnet decoders (keras_segmentation), `k` classes; BN channels counted
// separately (2 trainable + 2 running values each).
constexpr int64_t kSegClasses = 19;
inline int64_t unet_conv_params() {
  return vgg16_encoder_params(4) + conv_params(512, 512, 3) + conv_params(512 + 256, 256, 3) +
         conv_params(256 + 128, 128, 3) + conv_params(128 + 64, 64, 3) +
         conv_params(64, kSegClasses, 3);
}
inline int64_t segnet_conv_params() {
  return vgg16_encoder_params(4) + conv_params(512, 512, 3) + conv_params(512, 256, 3) +
         conv_params(256, 128, 3) + conv_params(128, 64, 3) + conv_params(64, kSegClasses, 3);
}
constexpr int64_t kSegDecoderBnChannels = 512 + 256 + 128 + 64;
// FCN-8s with nearest upsample + 3x3 conv (no bias) in place of each transposed conv.
inline int64_t fcn8_params() {
  const int64_t k = kSegClasses;
  return vgg16_encoder_params(5) + conv_params(512, 4096, 7) + conv_params(4096, 4096, 1) +
         conv_params(4096, k, 1) + conv_params(512, k, 1) + conv_params(256, k, 1) +
         3 * conv_params(k, k, 3, false);
}

// keras_segmentation's encoders and decoders (models/resnet50.py, mobilenet.py, unet.py,
// segnet.py, pspnet.py), counted layer by layer: conv weights (and biases) in the return value,
// batch-norm channels added to *bn (each has a scale and a shift, and two running statistics).
// ResNet-50 with conv biases, stages 2..last_stage; returns the last stage's channels in *out_c.
inline int64_t seg_resnet50_params(int last_stage, int64_t* bn, int64_t* out_c) {
  int64_t total = conv_params(3, 64, 7);
  *bn += 64;
  int64_t c = 64;
  const int64_t widths[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
  for (int s = 0; s + 2 <= last_stage; ++s) {
    const int64_t f = widths[s];
    total += conv_params(c, f, 1) + conv_params(f, f, 3) + conv_params(f, 4 * f, 1) +
             conv_params(c, 4 * f, 1);  // the conv block, its projection shortcut
    *bn += f + f + 4 * f + 4 * f;
    total += (blocks[s] - 1) *
             (conv_params(4 * f, f, 1) + conv_params(f, f, 3) + conv_params(f, 4 * f, 1));
    *bn += (blocks[s] - 1) * (f + f + 4 * f);
    c = 4 * f;
  }
  *out_c = c;
  return total;
}
// MobileNet v1 blocks 1..11 (no biases): conv 3x3 32, then depthwise 3x3 + pointwise 1x1.
inline int64_t seg_mobilenet_params(int64_t* bn) {
  int64_t total = conv_params(3, 32, 3, false);
  *bn += 32;
  const int64_t widths[11] = {64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512};
  int64_t c = 32;
  for (int64_t f : widths) {
    total += c * 9 + conv_params(c, f, 1, false);
    *bn += c + f;
    c = f;
  }
  return total;
}
// _unet's decoder on skips of f4, f3, f2, f1 channels; segnet_decoder on f4; the PSP head on f5.
inline int64_t seg_unet_decoder(int64_t f4, int64_t f3, int64_t f2, int64_t f1, int64_t* bn) {
  *bn += 512 + 256 + 128 + 64;
  return conv_params(f4, 512, 3) + conv_params(512 + f3, 256, 3) + conv_params(256 + f2, 128, 3) +
         conv_params(128 + f1, 64, 3) + conv_params(64, kSegClasses, 3);
}
inline int64_t seg_segnet_decoder(int64_t f4, int64_t* bn) {
  *bn += 512 + 256 + 128 + 64;
  return conv_params(f4, 512, 3) + conv_params(512, 256, 3) + conv_params(256, 128, 3) +
         conv_params(128, 64, 3) + conv_params(64, kSegClasses, 3);
}
inline int64_t seg_psp_head(int64_t f5, int64_t* bn) {
  *bn += 5 * 512;
  return 4 * conv_params(f5, 512, 1, false) + conv_params(f5 + 4 * 512, 512, 1, false) +
         conv_params(512, kSegClasses, 3);
}

// Trainable and buffer counts of a segmentation network: its convs plus 2 values per BN channel
// each.
struct SegCount {
  int64_t trainable, buffers;
};
inline SegCount seg_count(int64_t convs, int64_t bn) { return {convs + 2 * bn, 2 * bn}; }

inline SegCount resnet50_pspnet_count() {
  int64_t bn = 0, c = 0;
  const int64_t convs = seg_resnet50_params(5, &bn, &c) + seg_psp_head(c, &bn);
  return seg_count(convs, bn);
}
inline SegCount resnet50_unet_count(bool unet) {
  int64_t bn = 0, c = 0;
  int64_t convs = seg_resnet50_params(4, &bn, &c);  // f1 64 (conv1), f2 256, f3 512, f4 1024
  convs += unet ? seg_unet_decoder(c, 512, 256, 64, &bn) : seg_segnet_decoder(c, &bn);
  return seg_count(convs, bn);
}
inline SegCount mobilenet_unet_count(bool unet) {
  int64_t bn = 0;
  int64_t convs = seg_mobilenet_params(&bn);  // f1 64, f2 128, f3 256, f4 512
  convs += unet ? seg_unet_decoder(512, 256, 128, 64, &bn) : seg_segnet_decoder(512, &bn);
  return seg_count(convs, bn);
}
inline SegCount vgg_pspnet_count() {
  int64_t bn = 0;
  const int64_t convs = vgg16_encoder_params(5) + seg_psp_head(512, &bn);
  return seg_count(convs, bn);
}
// FCN-32s with a nearest x32 upsample + 3x3 conv (no bias) in place of the transposed conv.
inline int64_t fcn32_params() {
  const int64_t k = kSegClasses;
  return vgg16_encoder_params(5) + conv_params(512, 4096, 7) + conv_params(4096, 4096, 1) +
         conv_params(4096, k, 1) + conv_params(k, k, 3, false);
}

}  // namespace remat::test
