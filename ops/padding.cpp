// Parsing and resolving spatial padding (Note [same padding] in padding.h).
#include "ops/padding.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

namespace remat {

PaddingSpec padding_parse(AttrReader& r, const std::string& key, int64_t max_pad,
                          bool allow_words) {
  PaddingSpec p;
  if (allow_words && r.is_string(key)) {
    p.same = r.get_choice(key, "valid", {"same", "valid"}) == "same";
    return p;
  }
  const std::vector<int64_t> v = r.get_int_list(key, {2, 4}, {0}, 0, max_pad);
  if (v.size() == 1) p.top = p.bottom = p.left = p.right = v[0];
  else if (v.size() == 2) p.top = p.bottom = v[0], p.left = p.right = v[1];
  else p.top = v[0], p.bottom = v[1], p.left = v[2], p.right = v[3];
  return p;
}

namespace {

// TensorFlow's 'same' split of one dimension: {before, after}.
std::pair<int64_t, int64_t> same_pads(int64_t in, int64_t kernel, int64_t stride,
                                      int64_t dilation) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
  return {total / 2, total - total / 2};
}

}  // namespace

Pads padding_resolve(const PaddingSpec& spec, int64_t in_h, int64_t in_w, int64_t kernel_h,
                     int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t dilation_h,
                     int64_t dilation_w) {
  Pads p;
  if (!spec.same) {
    p.top = spec.top, p.bottom = spec.bottom, p.left = spec.left, p.right = spec.right;
    return p;
  }
  std::tie(p.top, p.bottom) = same_pads(in_h, kernel_h, stride_h, dilation_h);
  std::tie(p.left, p.right) = same_pads(in_w, kernel_w, stride_w, dilation_w);
  return p;
}

std::string padding_str(const PaddingSpec& s) {
  if (s.same) return "same";
  if (s.top == s.bottom && s.left == s.right)
    return s.top == s.left ? std::to_string(s.top)
                           : std::to_string(s.top) + "x" + std::to_string(s.left);
  return "[" + std::to_string(s.top) + ", " + std::to_string(s.bottom) + ", " +
         std::to_string(s.left) + ", " + std::to_string(s.right) + "]";
}

}  // namespace remat
