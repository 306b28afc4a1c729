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
