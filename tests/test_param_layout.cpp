// The persistent layout (runtime/memory/param_layout.h): one process keeps today's value order; data
// parallel puts parameters and gradients in mirrored flat blocks cut into padded buckets in the
// order the backward finishes them, and a sharded optimizer holds exactly 1/world of the state,
// its ranks' slices covering every element once.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/memory/allocator.h"
#include "runtime/graph/autodiff.h"
#include "runtime/memory/param_layout.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

Graph training_graph(const std::string& config) {
  const OpRegistry ops = make_builtin_registry();
  const ModelConfig cfg = load_model_config(test_source_dir() + "/configs/" + config + ".yaml");
  return make_training_graph(build_forward_graph(cfg, ops, {}), ops, cfg.optimizer.op,
                             cfg.optimizer.attrs);
}

TEST(ParamLayout, OneProcessKeepsValueOrder) {
  const Graph g = training_graph("small_cnn");
  const PersistentLayout L = persistent_layout(g, {});
  int64_t at = 0;
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!value_is_persistent(g.values[v].kind)) {
      EXPECT_EQ(L.offset[v], -1);
      continue;
    }
    EXPECT_EQ(L.offset[v], at) << g.values[v].name;
    at += pool_round_up(g.values[v].desc.bytes());
  }
  EXPECT_EQ(L.region_bytes, at);
  EXPECT_EQ(L.constant_bytes, g.persistent_bytes());
  EXPECT_TRUE(L.buckets.empty());
}

// Buckets partition the parameters in the order their gradients are written, gradients
// mirror parameters, every held value lies inside the region and no two overlap.
void check_parallel_layout(const Graph& g, const PersistentLayout& L) {
  const int world = L.parallel.world;
  std::set<ValueId> seen;
  int64_t expect_begin = 0;
  NodeId last_writer = -2;
  for (const GradBucket& b : L.buckets) {
    EXPECT_EQ(b.begin, expect_begin);
    EXPECT_EQ(b.bytes % (world * kPoolAlignment), 0);
    expect_begin += b.bytes;
    int64_t fill = 0;
    for (ValueId p : b.params) {
      EXPECT_TRUE(seen.insert(p).second) << g.value(p).name << " in two buckets";
      EXPECT_EQ(L.offset[p] - L.params_begin, b.begin + fill) << g.value(p).name;
      fill += pool_round_up(g.value(p).desc.bytes());
      const ValueId grad = g.find_value(g.value(p).name + ".grad");
      ASSERT_NE(grad, kNoValue);
      EXPECT_EQ(L.offset[grad] - L.grads_begin, L.offset[p] - L.params_begin);
      const NodeId writer = g.value(grad).producer;
      EXPECT_GE(writer, last_writer) << g.value(p).name << " out of finish order";
      last_writer = writer;
    }
    EXPECT_LT(b.bytes - fill, world * kPoolAlignment) << "padding beyond one unit";
  }
  int params = 0;
  for (const auto& v : g.values) params += v.kind == ValueKind::Param;
  EXPECT_EQ(static_cast<int>(seen.size()), params);
  EXPECT_EQ(L.flat_bytes, expect_begin);
  EXPECT_EQ(L.grads_begin, L.flat_bytes);
  // Held values do not overlap and fit the region.
  std::map<int64_t, int64_t> spans;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (L.offset[v] >= 0) spans[L.offset[v]] = g.values[v].desc.bytes();
  int64_t end = 0;
  for (auto [off, bytes] : spans) {
    EXPECT_GE(off, end);
    EXPECT_EQ(off % kPoolAlignment, 0);
    end = off + bytes;
  }
  EXPECT_LE(end, L.region_bytes);
  EXPECT_EQ(L.constant_bytes, L.region_bytes);
}

TEST(ParamLayout, BucketsFollowTheBackward) {
  const Graph g = training_graph("small_dag");
  for (int world : {2, 3}) {
    for (int64_t bucket : {int64_t{1}, int64_t{20000}, int64_t{25000000}}) {
      SCOPED_TRACE("world " + std::to_string(world) + ", bucket " + std::to_string(bucket));
      ParallelConfig pc;
      pc.world = world;
      pc.bucket_bytes = bucket;
      const PersistentLayout L = persistent_layout(g, pc);
      check_parallel_layout(g, L);
      if (bucket == 1) {
        int params = 0;
        for (const auto& v : g.values) params += v.kind == ValueKind::Param;
        EXPECT_EQ(static_cast<int>(L.buckets.size()), params) << "one parameter per bucket";
      }
      if (bucket == 25000000) {
        EXPECT_EQ(L.buckets.size(), 1u);
      }
    }
  }
}

TEST(ParamLayout, ShardedStateIsOneWorldthAndSlicesCoverEveryElementOnce) {
  const Graph g = training_graph("small_dag");  // Adam: two state kinds
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ParallelConfig pc;
    pc.world = world;
    pc.bucket_bytes = 20000;
    const PersistentLayout full = persistent_layout(g, pc);
    EXPECT_EQ(full.state_kinds, 2);
    std::map<ValueId, std::vector<int>> covered;  // param -> coverage count per element
    for (const auto& v : g.values)
      if (v.kind == ValueKind::Param)
        covered[g.find_value(v.name)].assign(static_cast<size_t>(v.desc.numel()), 0);
    int64_t state_elems = 0;
    for (int rank = 0; rank < world; ++rank) {
      pc.rank = rank;
      pc.shard_optimizer = true;
      const PersistentLayout L = persistent_layout(g, pc);
      check_parallel_layout(g, L);
      EXPECT_EQ(L.state_block_bytes * world, L.flat_bytes);
      EXPECT_EQ(full.constant_bytes - L.constant_bytes,
                L.state_kinds * (L.flat_bytes - L.state_block_bytes))
          << "the constant shrinks by (world - 1) / world of the optimizer state";
      for (const auto& v : g.values) {
        if (v.kind == ValueKind::OptState) {
          EXPECT_EQ(L.offset[g.find_value(v.name)], -1);
        }
      }
      std::set<int64_t> state_starts;
      for (const UpdateSlice& s : L.slices) {
        const ValueId p = g.node(s.update).inputs[0];
        EXPECT_EQ(s.param_offset, L.offset[p] + 4 * s.first);
        EXPECT_EQ(s.grad_offset - L.grads_begin, s.param_offset - L.params_begin);
        ASSERT_EQ(s.state_offsets.size(), 2u);
        for (size_t k = 0; k < 2; ++k) {
          EXPECT_GE(s.state_offsets[k], L.state_begin[k]);
          EXPECT_LE(s.state_offsets[k] + s.desc.bytes(), L.state_begin[k] + L.state_block_bytes);
          EXPECT_TRUE(state_starts.insert(s.state_offsets[k]).second);
        }
        state_elems += s.desc.numel();
        for (int64_t e = 0; e < s.desc.numel(); ++e) ++covered[p][static_cast<size_t>(s.first + e)];
      }
    }
    int64_t param_elems = 0;
    for (const auto& [p, counts] : covered) {
      param_elems += static_cast<int64_t>(counts.size());
      for (size_t e = 0; e < counts.size(); ++e)
        ASSERT_EQ(counts[e], 1) << g.value(p).name << " element " << e;
    }
    EXPECT_EQ(state_elems, param_elems);
  }
}

TEST(ParamLayout, RejectsBadRanks) {
  const Graph g = training_graph("small_cnn");
  ParallelConfig pc;
  pc.world = 2;
  pc.rank = 2;
  EXPECT_THROW(persistent_layout(g, pc), Error);
  pc.world = 0;
  pc.rank = 0;
  EXPECT_THROW(persistent_layout(g, pc), Error);
}

}  // namespace
}  // namespace remat
