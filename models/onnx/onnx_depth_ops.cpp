// DepthToSpace (nn.PixelShuffle, the sub-pixel convolution of super-resolution networks) and
// SpaceToDepth, each as ONNX defines it: a Reshape of the image into blocks, a Transpose and a
// Reshape back, here remat's reshape and transpose layers (a transpose as a chain of block swaps,
// transpose_data), the same floats moved as ONNX moves them.
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

struct Image {
  DataValue x;
  int64_t c, h, w, b;
};

// The data image and the node's blocksize, which must divide `divides` (C, or H and W).
Image image_and_block(Translator& t) {
  const DataValue x = image_input(t);
  if (!t.has_attr("blocksize")) t.fail("the attribute blocksize is required");
  const int64_t b = t.attr_int("blocksize", 0);
  if (b < 1) t.fail("blocksize must be at least 1, got " + std::to_string(b));
  return {x, x.sample[0], x.sample[1], x.sample[2], b};
}

// [N, C, H, W] -> [N, C / b^2, H b, W b]. DCR (ONNX's default): the block's row and column are
// the outer part of C, [b, b, C / b^2]; CRD (nn.PixelShuffle): the inner part, [C / b^2, b, b].
void depth_to_space(Translator& t) {
  const Image im = image_and_block(t);
  const std::string mode = t.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") t.fail("mode must be DCR or CRD, got '" + mode + "'");
  const int64_t b = im.b, b2 = b * b;
  if (im.c % b2 != 0)
    t.fail("C = " + std::to_string(im.c) + " is not a multiple of blocksize^2 = " +
           std::to_string(b2));
  if (b == 1) return t.alias(0, im.x);
  const int64_t c = im.c / b2;
  const bool dcr = mode == "DCR";
  const Shape blocks = dcr ? Shape{b, b, c, im.h, im.w} : Shape{c, b, b, im.h, im.w};
  const std::vector<int64_t> perm =
      dcr ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3};
  const DataValue split = reshape_data(t, im.x, blocks);
  const DataValue moved = transpose_data(t, split, perm);
  reshape_data(t, moved, {c, im.h * b, im.w * b});
}

// [N, C, H, W] -> [N, C b^2, H / b, W / b]: the block's row and column become the outer part
// of the channels ([b, b, C]; DepthToSpace's DCR inverse).
void space_to_depth(Translator& t) {
  const Image im = image_and_block(t);
  const int64_t b = im.b;
  if (im.h % b != 0 || im.w % b != 0)
    t.fail("H and W (" + std::to_string(im.h) + ", " + std::to_string(im.w) +
           ") must be multiples of blocksize " + std::to_string(b));
  if (b == 1) return t.alias(0, im.x);
  const DataValue split = reshape_data(t, im.x, {im.c, im.h / b, b, im.w / b, b});
  const DataValue moved = transpose_data(t, split, {0, 3, 5, 1, 2, 4});
  reshape_data(t, moved, {im.c * b * b, im.h / b, im.w / b});
}

}  // namespace

std::map<std::string, TranslateFn> with_depth_ops(std::map<std::string, TranslateFn> ops) {
  ops["DepthToSpace"] = depth_to_space;
  ops["SpaceToDepth"] = space_to_depth;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
