// Op test cases shared by the CPU gradient tests (test_ops_a.cpp) and the CUDA-vs-CPU tests
// (test_cuda_ops_a.cpp), so both backends are checked on exactly the same shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/attrs.h"
#include "runtime/tensor.h"
#include "tests/op_harness.h"

namespace remat {

struct ConvCase {
  const char* name;
  AttrMap attrs;
  Shape x;
  float x_scale;  // inputs uniform in [-x_scale, x_scale)
};

// conv2d: stride, asymmetric kernel/stride/padding, dilation, groups, depthwise (multiplier 1
// and 2), grouped pointwise, no bias, fused relu and relu6 (relu6 with inputs scaled so both
// clips are exercised).
inline std::vector<ConvCase> conv2d_cases() {
  using Ints = std::vector<int64_t>;
  return {
      {"basic", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}}), {2, 3, 5, 5}, 1},
      {"stride_asym",
       attr_map({{"filters", 3}, {"kernel", Ints{3, 2}}, {"stride", Ints{2, 1}}, {"padding", Ints{1, 0}}}),
       {2, 2, 6, 5}, 1},
      {"stride2_pad2", attr_map({{"filters", 2}, {"kernel", 3}, {"stride", 2}, {"padding", 2}}), {1, 2, 5, 5}, 1},
      {"dilation", attr_map({{"filters", 2}, {"kernel", 3}, {"dilation", 2}, {"padding", 1}}), {2, 2, 6, 6}, 1},
      {"groups", attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 2}}), {2, 4, 5, 4}, 1},
      {"depthwise", attr_map({{"filters", 3}, {"kernel", 3}, {"groups", 3}, {"padding", 1}}), {2, 3, 4, 4}, 1},
      {"depthwise_x2", attr_map({{"filters", 6}, {"kernel", 2}, {"groups", 3}, {"stride", 2}}), {1, 3, 5, 5}, 1},
      {"pointwise_groups", attr_map({{"filters", 4}, {"kernel", 1}, {"groups", 2}}), {2, 4, 3, 3}, 1},
      {"no_bias", attr_map({{"filters", 3}, {"kernel", 2}, {"bias", false}}), {2, 2, 4, 4}, 1},
      {"relu", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu")}}),
       {2, 2, 4, 4}, 1},
      {"relu6", attr_map({{"filters", 3}, {"kernel", 3}, {"padding", 1}, {"activation", std::string("relu6")}}),
       {2, 2, 4, 4}, 4},
  };
}

}  // namespace remat
