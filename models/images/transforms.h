// Image transforms as torchvision's standard recipes, done in one resampling: a crop box in the
// source image (RandomResizedCrop's for training, Resize(size / crop_pct) + CenterCrop's for
// evaluation), an optional horizontal flip, then the box resampled to the model's H x W with
// PIL's antialiased bilinear filter (a triangle kernel widened by the scale when shrinking),
// normalised per channel to (x / 255 - mean) / std in CHW floats. Label maps take the same box
// with nearest-neighbour sampling (labels are never blended).
#pragma once

#include <cstdint>

#include "models/config.h"
#include "models/data_rng.h"
#include "models/images/image_decode.h"

namespace remat {

// A region of the source image in pixel units (x0, y0 its top-left corner), and whether the
// result is mirrored left to right.
struct CropBox {
  double x0 = 0, y0 = 0, w = 0, h = 0;
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params (ten tries of a random area in `scale` and a
// log-uniform aspect ratio in `ratio`, integer sizes and offsets, else the central crop of the
// ratio's bounds) and, with t.flip, a flip of probability 1/2 — drawn from `rng`.
CropBox train_crop(const ImageTransformConfig& t, int64_t width, int64_t height, Rng& rng);

// Resize's shorter side to int(out / crop_pct) (timm's crop_pct: 224 / 0.875 = 256; torchvision's
// integer sizes) and the centered out_w x out_h crop of that, as a box in the source image.
CropBox eval_crop(const ImageTransformConfig& t, int64_t width, int64_t height, int64_t out_w,
                  int64_t out_h);

// The box of `img` resampled to out_h x out_w, normalised, into out[3][out_h][out_w].
void resample_image(const Image& img, const CropBox& box, int64_t out_w, int64_t out_h,
                    const ImageTransformConfig& t, float* out);

// The box of `labels` sampled to out_h x out_w (each output pixel takes the label under its
// centre) into out[out_h][out_w]. The box is in the coordinates of an image of `image_w` x
// `image_h`, which the label map covers whatever its own size.
void resample_labels(const LabelMap& labels, const CropBox& box, int64_t image_w, int64_t image_h,
                     int64_t out_w, int64_t out_h, int32_t* out);

}  // namespace remat
