// Spatial padding as conv2d, the window pools (maxpool, avgpool) and zeropad read it from YAML,
// and the per-side pads it resolves to for a given input size. See Note [same padding].
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/attrs.h"

namespace remat {

// Note [same padding]
// `padding` is an int (every side), [h, w] (top = bottom = h, left = right = w) or
// [top, bottom, left, right]; conv2d and the pools also take the words `valid` (0) and `same`,
// TensorFlow's rule: the output has ceil(in / stride) rows, the padding needed for that,
// total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - in, 0), is split as
// top = total / 2 and bottom = total - top, so an odd total puts the extra row at the bottom
// (and the extra column at the right). Keras's stride-2 layers with padding='same' on even
// inputs pad (0, 1): PyTorch's symmetric padding cannot express them. 'same' is resolved per
// input size (the pads of a 224 input differ from a 225 one), so the same layer at another
// --input stays TensorFlow's.
// zeropad takes 'same' with the `kernel` and `stride` of the window that follows it: it adds the
// pads that window's 'same' would add, as zeros a following 'valid' window reads (they count in
// an average and can win a max, where a pool's own 'same' skips them). For an odd kernel k at
// stride 2 these are Keras's correct_pad(x, k) on every size, (k / 2 - 1, k / 2) on an even side
// and (k / 2, k / 2) on an odd one: `{op: zeropad, padding: same, kernel: 3, stride: 2}` is
// Keras's ZeroPadding2D(correct_pad(x, 3)) at any input size.
struct PaddingSpec {
  bool same = false;                            // resolved per input (Note [same padding])
  int64_t top = 0, bottom = 0, left = 0, right = 0;  // when !same
};

// Pads of one input: rows added above and below, columns left and right.
struct Pads {
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  bool symmetric() const { return top == bottom && left == right; }
  bool zero() const { return top == 0 && bottom == 0 && left == 0 && right == 0; }
};

// Reads attribute `key` (absent: 0 on every side); each pad in [0, max_pad]. `allow_words`:
// also accept 'same' and 'valid' (crop takes numbers only). Errors name the key's position.
PaddingSpec padding_parse(AttrReader& r, const std::string& key, int64_t max_pad,
                          bool allow_words);

// The pads of `spec` for an input of in_h x in_w under a window of kernel / stride / dilation
// (only 'same' reads them).
Pads padding_resolve(const PaddingSpec& spec, int64_t in_h, int64_t in_w, int64_t kernel_h,
                     int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t dilation_h = 1,
                     int64_t dilation_w = 1);

// "1", "1x2", "[0, 1, 0, 1]" or "same", for messages.
std::string padding_str(const PaddingSpec& spec);

}  // namespace remat
