// The division-free walks of kernels/index_walk.h (used by the batch-norm and channel-reduction
// kernels) against the divisions they replace, over planes smaller and larger than the stride,
// one channel and many, starts anywhere.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/index_walk.h"

namespace remat {
namespace {

struct Dims {
  int64_t n, c, plane;
};
const Dims kDims[] = {{3, 1, 1}, {5, 7, 1}, {4, 3, 49}, {2, 1024, 196}, {3, 5, 256},
                      {2, 4, 257}, {6, 2, 3136}, {1, 3, 12544}};
const int64_t kStrides[] = {1, 7, 32, 255, 256, 1000, 4096};

TEST(IndexWalk, SliceWalkVisitsTheChannelsValuesInOrder) {
  for (const Dims& d : kDims)
    for (int64_t stride : kStrides)
      for (int64_t ch : {int64_t{0}, d.c - 1, d.c / 2}) {
        const int64_t m = d.n * d.plane;
        for (int64_t start : {int64_t{0}, int64_t{1}, m / 3, m - 1}) {
          SliceWalk w(d.c, ch, d.plane, start, stride);
          for (int64_t idx = start; idx < m; idx += stride) {
            const int64_t want = (idx / d.plane * d.c + ch) * d.plane + idx % d.plane;
            ASSERT_EQ(w.next(), want) << d.n << "x" << d.c << "x" << d.plane << " stride "
                                      << stride << " ch " << ch << " idx " << idx;
          }
        }
      }
}

TEST(IndexWalk, ChannelWalkNamesEachOffsetsChannel) {
  for (const Dims& d : kDims)
    for (int64_t stride : kStrides) {
      const int64_t total = d.n * d.c * d.plane;
      for (int64_t start : {int64_t{0}, int64_t{1}, total / 2, total - 1}) {
        ChannelWalk w(d.c, d.plane, start, stride);
        for (int64_t o = start; o < total; o += stride, w.advance())
          ASSERT_EQ(w.channel(), o / d.plane % d.c) << d.n << "x" << d.c << "x" << d.plane
                                                    << " stride " << stride << " offset " << o;
      }
    }
}

}  // namespace
}  // namespace remat
