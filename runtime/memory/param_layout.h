// Where an executor keeps the persistent values of a training graph: one region, every value
// at an offset that is a multiple of kPoolAlignment. One process: the values in graph order.
// Data parallel: Note [gradient buckets] — parameters and gradients in flat blocks split into
// buckets, and with a sharded optimizer only this rank's share of the optimizer state.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/graph/graph.h"

namespace remat {

// Note [gradient buckets]
// With world > 1 the region starts with two flat blocks of equal layout: every parameter,
// then every gradient, in the order the backward finishes them (graph order of the nodes that
// write the gradients; gradients that no node writes first). Consecutive gradients form
// buckets of about bucket_bytes (a larger gradient is a bucket of its own); each bucket is
// padded with zeros to a multiple of world * kPoolAlignment, so it splits into world aligned
// shards. A bucket is a view of the gradient block, as PyTorch DDP's gradient_as_bucket_view:
// its collective runs in place, as soon as the last gradient in it is written (runtime/
// grad_sync.h), and costs no memory besides the gradients and the padding. The same byte range
// of the parameter block holds the bucket's parameters, so a shard of a bucket is a shard of
// parameters too. Optimizer state follows, one flat block per state kind (momentum; Adam's m
// and v) with the same layout — or, sharded (ZeRO stage 1), only this rank's shard of every
// bucket, concatenated: world times less. Buffers, the input batch and labels come last.
// All of it is the constant the solver plans with (constant_bytes).

struct ParallelConfig {
  int world = 1;                      // ranks training together
  int rank = 0;                       // this one
  bool shard_optimizer = false;       // keep 1/world of the optimizer state (ZeRO stage 1)
  int64_t bucket_bytes = 25'000'000;  // gradient bucket size before padding
  bool active() const { return world > 1; }
};

struct GradBucket {
  int64_t begin = 0;             // bytes from the start of the parameter (or gradient) block
  int64_t bytes = 0;             // a multiple of world * kPoolAlignment, padding included
  std::vector<ValueId> params;   // parameters in it, in layout order
};

// One optimizer update over part of a parameter: its whole (unsharded) or the part inside this
// rank's shards (sharded). Offsets are bytes from the region start.
struct UpdateSlice {
  NodeId update = -1;                  // the parameter's Update node
  int64_t first = 0;                   // first element of the parameter the slice covers
  TensorDesc desc;                     // [elements] f32
  int64_t param_offset = 0;
  int64_t grad_offset = 0;
  std::vector<int64_t> state_offsets;  // per optimizer-state input of the node, in order
};

struct PersistentLayout {
  ParallelConfig parallel;
  // Per value: bytes from the region start, or -1 when the value is not held whole on this
  // rank (activations; optimizer state when sharded).
  std::vector<int64_t> offset;
  int64_t region_bytes = 0;    // every held value rounded up to kPoolAlignment, padding included
  // The solver's constant: the graph's persistent bytes for one process (as before data
  // parallelism), region_bytes for world > 1.
  int64_t constant_bytes = 0;

  // world > 1 only.
  int64_t params_begin = 0, grads_begin = 0;  // region offsets of the two flat blocks
  int64_t flat_bytes = 0;                     // size of each (sum of the bucket sizes)
  std::vector<GradBucket> buckets;
  int64_t state_kinds = 0;                    // optimizer-state blocks (0 sgd without momentum)
  std::vector<int64_t> state_begin;           // region offset of each state block
  int64_t state_block_bytes = 0;              // flat_bytes, or flat_bytes / world when sharded
  int64_t padding_bytes = 0;                  // zeros that pad the buckets (each flat block)
  std::vector<UpdateSlice> slices;            // sharded: this rank's updates

  // Bytes of bucket b's shard `r` inside the flat blocks: [shard_begin, shard_begin + bytes).
  int64_t shard_bytes(size_t b) const { return buckets[b].bytes / parallel.world; }
  int64_t shard_begin(size_t b, int r) const { return buckets[b].begin + r * shard_bytes(b); }
  // Offset of bucket b's shard inside a sharded state block.
  int64_t shard_state_offset(size_t b) const;
};

// The layout of `g`'s persistent values for `pc`. Throws Error for a world < 1 or a rank
// outside it.
PersistentLayout persistent_layout(const Graph& g, const ParallelConfig& pc);

}  // namespace remat
