// Division-free walks over the elements of an (n, c, plane) tensor (NCHW; [N, F] as plane 1)
// for kernels/channel_slices.cuh: each thread divides once to find where it starts and then
// only adds and compares, however the stride compares with the plane (a 64-bit division per
// value made the batch-norm passes 2-6x slower on 28 x 28 to 7 x 7 planes on an H200,
// GPU_RESULTS.md). Plain C++ with __host__ __device__ under nvcc, so tests/test_index_walk.cpp
// checks them against the divisions on the CPU.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define REMAT_HOST_DEVICE __host__ __device__
#else
#define REMAT_HOST_DEVICE
#endif

namespace remat {

// The values of channel `ch`, from its idx-th value on (idx < n * plane), `stride` at a time:
// next() is the offset of the current value in the tensor, then steps to the next.
struct SliceWalk {
  int64_t c, ch, plane, i, p, q, r;  // i: sample, p: place in the plane; stride = q plane + r
  REMAT_HOST_DEVICE SliceWalk(int64_t c_, int64_t ch_, int64_t plane_, int64_t idx, int64_t stride)
      : c(c_), ch(ch_), plane(plane_), i(idx / plane_), p(idx - (idx / plane_) * plane_),
        q(stride / plane_), r(stride - (stride / plane_) * plane_) {}
  REMAT_HOST_DEVICE int64_t next() {
    const int64_t o = (i * c + ch) * plane + p;
    p += r;
    i += q;
    if (p >= plane) p -= plane, ++i;
    return o;
  }
};

// Flat offsets o, o + stride, ... of the tensor with the channel of each: channel() of the
// current offset, advance() to the next.
struct ChannelWalk {
  int64_t c, plane, p, ch, qs, rs, qc;  // stride = qs plane + rs; qc = qs mod c
  REMAT_HOST_DEVICE ChannelWalk(int64_t c_, int64_t plane_, int64_t o, int64_t stride)
      : c(c_), plane(plane_), p(o % plane_), ch((o / plane_) % c_), qs(stride / plane_),
        rs(stride % plane_), qc((stride / plane_) % c_) {}
  REMAT_HOST_DEVICE int64_t channel() const { return ch; }
  REMAT_HOST_DEVICE void advance() {
    p += rs;
    ch += qc;
    if (p >= plane) p -= plane, ++ch;
    if (ch >= c) ch -= c;
  }
};

}  // namespace remat
