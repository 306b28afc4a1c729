// Per-channel work over (n, c, plane) tensors (NCHW; [N, F] as plane 1) shared by the channel
// reductions (channel_reduce.cu) and batch normalisation (batchnorm.cu): the split of each
// channel's values into slices (Note [channel reductions]), the walk over one slice (Note
// [unrolled slices]), and the walk over every element with its channel for the elementwise
// passes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "runtime/core/check.h"

namespace remat {
namespace {

// Note [channel reductions]
// A block per channel starves the GPU when channels are few and planes large (VGG's first
// block: 64 channels of 64 x 224 x 224 values on 132 SMs). Instead each channel's m = n * plane
// values are cut into `splits` contiguous slices, fixed by the shapes alone (never by the
// device), a block sums one (channel, slice) into a workspace of partial sums in double, and a
// second kernel adds each channel's partials in slice order. The order of every addition is
// thus a function of the shapes: reruns are bit-identical (Note [kernel determinism]).
constexpr int kSliceThreads = 256;
constexpr int64_t kBlocksWanted = 1024;      // enough (channel, slice) blocks to fill any GPU
constexpr int64_t kMinSliceValues = 4096;    // below this a slice is not worth a block

inline int64_t splits_for(int64_t n, int64_t c, int64_t plane) {
  const int64_t m = n * plane;
  int64_t s = (kBlocksWanted + c - 1) / c;
  s = std::min(s, (m + kMinSliceValues - 1) / kMinSliceValues);
  return std::max<int64_t>(s, 1);
}

// The (channel, slice) of this block of a grid of c * splits blocks: values [begin, end) of
// the channel's m = n * plane.
struct ChannelSlice {
  int64_t ch, begin, end;
};
__device__ __forceinline__ ChannelSlice block_slice(int64_t n, int64_t plane, int64_t splits) {
  const int64_t ch = blockIdx.x / splits, s = blockIdx.x % splits, m = n * plane;
  const int64_t len = (m + splits - 1) / splits, begin = s * len;
  return {ch, begin, begin + len < m ? begin + len : m};
}

// Walks the values of channel `ch` in slice [begin, end) of its m = n * plane values, thread
// by thread, in ascending order: `add(load(offset))` for each value, `offset` its place in the
// (n, c, plane) tensor. Note [unrolled slices]: a thread's values are kSliceUnroll loads at a
// time, all issued before the first is added, so that a thread has kSliceUnroll loads in flight
// instead of one (one at a time, the reductions read ~0.73 TB/s on an H200); the additions keep
// the order of one sequential loop, so the sums are the same bits either way.
constexpr int kSliceUnroll = 8;

template <typename Load, typename Add>
__device__ __forceinline__ void for_slice(int64_t ch, int64_t c, int64_t plane, int64_t begin,
                                          int64_t end, Load load, Add add) {
  const int64_t stride = blockDim.x;
  int64_t idx = begin + threadIdx.x;
  if (idx >= end) return;
  int64_t i = idx / plane, p = idx - i * plane;  // one division per thread, then increments
  auto next = [&]() {
    const int64_t o = (i * c + ch) * plane + p;
    p += stride;
    if (p >= plane) {  // a division only where the walk leaves a plane
      const int64_t q = p / plane;
      i += q;
      p -= q * plane;
    }
    return o;
  };
  using V = decltype(load(int64_t{0}));
  for (; idx + (kSliceUnroll - 1) * stride < end; idx += kSliceUnroll * stride) {
    V v[kSliceUnroll];
#pragma unroll
    for (int u = 0; u < kSliceUnroll; ++u) v[u] = load(next());
#pragma unroll
    for (int u = 0; u < kSliceUnroll; ++u) add(v[u]);
  }
  for (; idx < end; idx += stride) add(load(next()));
}

// Elementwise passes with a per-channel coefficient: planes of at least kApplyMinPlane values
// run as a grid of (n * c planes) x (chunks of kApplyChunk values), so a block knows its channel
// without a division per value, and each thread loads its kApplyUnroll values before using
// them; smaller planes ([N, F], 7 x 7) run flat, a division per value.
constexpr int kApplyUnroll = 8;
constexpr int64_t kApplyChunk = int64_t{kBlockSize} * kApplyUnroll;
constexpr int64_t kApplyMinPlane = 64;

inline dim3 apply_grid(int64_t n, int64_t c, int64_t plane) {
  if (plane < kApplyMinPlane) return dim3(grid_for(n * c * plane));
  return dim3(static_cast<unsigned>(n * c), static_cast<unsigned>((plane + kApplyChunk - 1) / kApplyChunk));
}

inline void check_apply_grid(int64_t n, int64_t c, int64_t plane) {
  if (plane < kApplyMinPlane) return;
  REMAT_CHECK(n * c < (int64_t{1} << 31) && (plane + kApplyChunk - 1) / kApplyChunk <= 65535,
              "per-channel pass: " << n << " x " << c << " planes of " << plane << " values");
}

}  // namespace
}  // namespace remat
