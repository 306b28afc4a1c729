// Per-channel work over (n, c, plane) tensors (NCHW; [N, F] as plane 1) shared by the channel
// reductions (channel_reduce.cu) and batch normalisation (batchnorm.cu): the split of each
// channel's values into slices (Note [channel reductions]), the walk over one slice, and the
// walk over every element with its channel for the elementwise passes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/index_walk.h"
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
// (n, c, plane) tensor, found without a division per value (SliceWalk). One value at a time, as
// the kernels measured first: a version that issued 8 loads before adding them (the same sums;
// it also divided wherever a walk left a plane) ran the batch-norm and bias reductions 1.4-2x
// slower on an H200 on every plane size (GPU_RESULTS.md, 2026-11-27).
template <typename Load, typename Add>
__device__ __forceinline__ void for_slice(int64_t ch, int64_t c, int64_t plane, int64_t begin,
                                          int64_t end, Load load, Add add) {
  const int64_t stride = blockDim.x;
  int64_t idx = begin + threadIdx.x;
  if (idx >= end) return;
  SliceWalk walk(c, ch, plane, idx, stride);  // kernels/index_walk.h
  for (; idx < end; idx += stride) add(load(walk.next()));
}

// Every element of the (n, c, plane) tensor, grid-stride, with its channel: f(offset, ch).
template <typename F>
__device__ __forceinline__ void for_each_with_channel(int64_t n, int64_t c, int64_t plane, F f) {
  const int64_t total = n * c * plane, stride = int64_t{gridDim.x} * blockDim.x;
  int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (o >= total) return;
  ChannelWalk walk(c, plane, o, stride);
  for (; o < total; o += stride, walk.advance()) f(o, walk.channel());
}

}  // namespace
}  // namespace remat
