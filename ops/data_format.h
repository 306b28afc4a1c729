// The channels-last form of image ops (Note [channels-last layout] in
// models/channels_last.cpp): the attribute data_format (channels_first, the default, or
// channels_last, which only the graph builder sets) and the [N, C, H, W] sizes of a 4-D shape
// stored either way.
#pragma once

#include <cstdint>

#include "runtime/core/attrs.h"
#include "runtime/core/tensor.h"

namespace remat {

// Reads the attribute `data_format`; true for channels_last.
inline bool read_channels_last(AttrReader& r) {
  return r.get_choice("data_format", "channels_first", {"channels_first", "channels_last"}) ==
         "channels_last";
}

// The sizes of an image tensor, whichever way it is stored, and the element strides of a
// channel and of a pixel: NCHW has channel stride h * w and pixel stride 1, NHWC channel
// stride 1 and pixel stride c.
struct ImageDims {
  int64_t n = 0, c = 0, h = 0, w = 0;
  bool channels_last = false;
  int64_t plane() const { return h * w; }
  int64_t planes() const { return n * c; }  // the H x W planes: q = n C + c
  int64_t image() const { return c * h * w; }
  int64_t channel_stride() const { return channels_last ? 1 : h * w; }
  int64_t pixel_stride() const { return channels_last ? c : 1; }
  // The first element of plane q = n C + c (its pixel i is i * pixel_stride() further).
  int64_t plane_start(int64_t q) const { return (q / c) * image() + (q % c) * channel_stride(); }
  // The stored shape of these sizes.
  Shape shape() const { return channels_last ? Shape{n, h, w, c} : Shape{n, c, h, w}; }
};

// Note [kept axes]: a value that spans x's first `axes` axes and its last `keep_last` axes and
// broadcasts over the axes between them (a scale or shift [N, 1, D] of tokens [N, T, D], adaLN's
// and FiLM's; a mean over the middle axes). x is then [lead, mid, last], and each (lead, last)
// pair owns a plane of mid values `last` apart: the NHWC layout of an image [lead, 1, mid, last],
// whose kernels (pixel = last) serve. keep_last 0 leaves rows of mid contiguous values.
inline ImageDims kept_axes_dims(const Shape& x, int64_t axes, int64_t keep_last) {
  ImageDims d;
  d.channels_last = true;
  d.n = d.c = d.h = d.w = 1;
  const int64_t rank = static_cast<int64_t>(x.size());
  for (int64_t k = 0; k < rank; ++k)
    (k < axes ? d.n : k >= rank - keep_last ? d.c : d.w) *= x[static_cast<size_t>(k)];
  return d;
}

// The shape of the kept axes: x's first `axes` and last `keep_last` axes.
inline Shape kept_axes_shape(const Shape& x, int64_t axes, int64_t keep_last) {
  Shape s(x.begin(), x.begin() + axes);
  s.insert(s.end(), x.end() - keep_last, x.end());
  return s;
}

// `s` must be 4-D.
inline ImageDims image_dims(const Shape& s, bool channels_last) {
  ImageDims d;
  d.channels_last = channels_last;
  d.n = s.at(0);
  d.c = channels_last ? s.at(3) : s.at(1);
  d.h = channels_last ? s.at(1) : s.at(2);
  d.w = channels_last ? s.at(2) : s.at(3);
  return d;
}

}  // namespace remat
