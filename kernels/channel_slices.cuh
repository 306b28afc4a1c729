// Per-channel work over (n, c, plane) tensors (NCHW; [N, F] as plane 1) shared by the channel
// reductions (channel_reduce.cu) and batch normalisation (batchnorm.cu): the split of each
// channel's values into slices (Note [channel reductions]), the walk over one slice, and the
// walk over every element with its channel for the elementwise passes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

// Note [packed channel walks]
// The walks below move a pack of V consecutive values of one plane per load (V = 16 bytes /
// sizeof(T): 8 bf16 or 4 floats, one 128-bit load; 4 bf16 where only that divides the plane;
// else 1). One 2- or 4-byte load per thread kept too few bytes in flight to near the memory
// bandwidth: ResNet-50's first batch norm (103 MB in bf16) took 0.45 ms forward on an H200,
// ~0.7 TB/s (GPU_RESULTS.md, 2026-11-27, NVIDIA H200). A pack never straddles two planes when
// V divides the plane, so all its values share one channel and the walks are those of a
// tensor of plane / V "values" a pack each. Within a pack the values are taken in ascending
// order, so a thread still adds its values in ascending order and every sum stays a function of
// the shapes and V. V depends on the plane and the pointers' alignment, and every tensor the
// executor allocates starts on a 256-byte boundary (kAllocAlignment), so a recomputation, at
// whatever address, takes the same V: reruns are bit-identical.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The widest pack the plane and the pointers allow (host side).
template <typename T>
int pack_width(int64_t plane, const void* a, const void* b = nullptr, const void* c = nullptr) {
  auto ok = [](const void* p, int bytes) {
    return (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes)) == 0;
  };
  for (int v : {16 / static_cast<int>(sizeof(T)), 4}) {
    const int bytes = v * static_cast<int>(sizeof(T));
    if (plane % v == 0 && ok(a, bytes) && ok(b, bytes) && ok(c, bytes)) return v;
  }
  return 1;
}

// Runs f(std::integral_constant<int, V>{}) with V = pack_width(...): the launchers instantiate
// each kernel for the three widths.
template <typename T, typename F>
void with_pack_width(int width, F f) {
  constexpr int kWide = 16 / static_cast<int>(sizeof(T));
  if (width == kWide) return f(std::integral_constant<int, kWide>{});
  if (width == 4) return f(std::integral_constant<int, 4>{});
  f(std::integral_constant<int, 1>{});
}

// The (channel, slice) of this block of a grid of c * splits blocks: packs [begin, end) of the
// channel's m = n * plane / V packs (plane counted in packs: vplane = plane / V).
struct ChannelSlice {
  int64_t ch, begin, end;
};
__device__ __forceinline__ ChannelSlice block_slice(int64_t n, int64_t vplane, int64_t splits) {
  const int64_t ch = blockIdx.x / splits, s = blockIdx.x % splits, m = n * vplane;
  const int64_t len = (m + splits - 1) / splits, begin = s * len;
  return {ch, begin < m ? begin : m, begin + len < m ? begin + len : m};
}

// Walks the packs of channel `ch` in slice [begin, end) of its n * vplane packs, thread by
// thread, in ascending order: `add(load(offset))` for each pack, `offset` the place of its first
// value in the (n, c, plane) tensor, found without a division per pack (SliceWalk). Two packs
// are loaded before either is added (more loads in flight; the order of the additions is
// unchanged).
template <int V, typename Load, typename Add>
__device__ __forceinline__ void for_slice(int64_t ch, int64_t c, int64_t vplane, int64_t begin,
                                          int64_t end, Load load, Add add) {
  const int64_t stride = blockDim.x;
  int64_t idx = begin + threadIdx.x;
  if (idx >= end) return;
  SliceWalk walk(c, ch, vplane, idx, stride);  // kernels/index_walk.h, in packs
  for (; idx + stride < end; idx += 2 * stride) {
    const int64_t o1 = walk.next() * V, o2 = walk.next() * V;
    const auto a = load(o1);
    const auto b = load(o2);
    add(a);
    add(b);
  }
  if (idx < end) add(load(walk.next() * V));
}

// Every pack of the (n, c, plane) tensor, grid-stride, with its channel: f(offset, ch), offset
// the place of the pack's first value.
template <int V, typename F>
__device__ __forceinline__ void for_each_with_channel(int64_t n, int64_t c, int64_t plane, F f) {
  const int64_t vplane = plane / V;
  const int64_t total = n * c * vplane, stride = int64_t{gridDim.x} * blockDim.x;
  int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (o >= total) return;
  ChannelWalk walk(c, vplane, o, stride);
  for (; o < total; o += stride, walk.advance()) f(o * V, walk.channel());
}

}  // namespace
}  // namespace remat
