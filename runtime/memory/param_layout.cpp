// persistent_layout(): offsets of the persistent values, gradient buckets and optimizer-state
// shards (Note [gradient buckets]).
#include "runtime/memory/param_layout.h"

#include <algorithm>

#include "runtime/memory/allocator.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

int64_t round_up(int64_t bytes, int64_t unit) { return (bytes + unit - 1) / unit * unit; }

// A parameter with its gradient, Update node and the node that writes the gradient.
struct Trainable {
  ValueId param = kNoValue, grad = kNoValue;
  NodeId update = -1, writer = -1;
  int64_t pos = 0;  // bytes from the start of the flat blocks
};

// An Update node that transforms the gradients before the optimizer runs (global-norm clipping,
// Note [gradient clipping] in runtime/graph/autodiff.cpp) rather than updating a parameter.
bool transforms_gradients(const Graph& g, const Node& u) {
  return u.kind == NodeKind::Update && !u.inputs.empty() &&
         g.value(u.inputs[0]).kind == ValueKind::ParamGrad;
}

std::vector<Trainable> trainables_in_finish_order(const Graph& g) {
  std::vector<Trainable> out;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& u = g.nodes[n];
    if (u.kind != NodeKind::Update || transforms_gradients(g, u)) continue;
    REMAT_CHECK(u.inputs.size() >= 2, "update node '" << u.name << "' has no gradient input");
    Trainable t;
    t.param = u.inputs[0];
    t.grad = u.inputs[1];
    t.update = static_cast<NodeId>(n);
    t.writer = g.value(t.grad).producer;  // -1: a gradient no node writes (unused parameter)
    REMAT_CHECK(g.value(t.param).kind == ValueKind::Param &&
                    g.value(t.grad).kind == ValueKind::ParamGrad,
                "update node '" << u.name << "' does not read a parameter and its gradient");
    out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Trainable& a, const Trainable& b) { return a.writer < b.writer; });
  return out;
}

}  // namespace

int64_t PersistentLayout::shard_state_offset(size_t b) const {
  int64_t off = 0;
  for (size_t i = 0; i < b; ++i) off += shard_bytes(i);
  return off;
}

PersistentLayout persistent_layout(const Graph& g, const ParallelConfig& pc) {
  REMAT_CHECK(pc.world >= 1 && pc.rank >= 0 && pc.rank < pc.world,
              "rank " << pc.rank << " of a world of " << pc.world);
  REMAT_CHECK(pc.bucket_bytes > 0, "gradient bucket size " << pc.bucket_bytes);
  PersistentLayout L;
  L.parallel = pc;
  L.offset.assign(g.values.size(), -1);
  int64_t at = 0;
  auto place = [&](size_t v) {
    L.offset[v] = at;
    at += pool_round_up(g.values[v].desc.bytes());
  };
  if (!pc.active()) {
    for (size_t v = 0; v < g.values.size(); ++v)
      if (value_is_persistent(g.values[v].kind)) place(v);
    L.region_bytes = at;
    L.constant_bytes = g.persistent_bytes();
    return L;
  }

  // A gradient transform reads every gradient whole; a rank of a sharded optimizer holds only
  // its shard of them averaged (Note [gradient buckets]).
  for (const Node& u : g.nodes)
    if (pc.shard_optimizer && transforms_gradients(g, u))
      REMAT_USER_ERROR("--shard-optimizer: node '" << u.name << "' (" << u.op
                       << ") needs every gradient whole before the updates, and a sharded "
                          "optimizer averages only this rank's shard of them; train without "
                          "--shard-optimizer or without gradient clipping");

  // Buckets over the parameters in the order their gradients are finished.
  std::vector<Trainable> ts = trainables_in_finish_order(g);
  const int64_t unit = pc.world * kPoolAlignment;
  int64_t flat = 0, fill = 0;
  GradBucket cur;
  auto close = [&] {
    cur.begin = flat;
    cur.bytes = round_up(fill, unit);
    L.padding_bytes += cur.bytes - fill;
    flat += cur.bytes;
    L.buckets.push_back(std::move(cur));
    cur = GradBucket{};
    fill = 0;
  };
  for (Trainable& t : ts) {
    const int64_t bytes = pool_round_up(g.value(t.param).desc.bytes());
    if (!cur.params.empty() && fill + bytes > pc.bucket_bytes) close();
    t.pos = flat + fill;
    cur.params.push_back(t.param);
    fill += bytes;
  }
  if (!cur.params.empty()) close();
  L.flat_bytes = flat;
  L.params_begin = 0;
  L.grads_begin = flat;
  at = 2 * flat;
  for (const Trainable& t : ts) {
    L.offset[static_cast<size_t>(t.param)] = L.params_begin + t.pos;
    L.offset[static_cast<size_t>(t.grad)] = L.grads_begin + t.pos;
  }

  // Optimizer state: one block per kind, whole or this rank's shards.
  L.state_kinds = ts.empty() ? 0 : static_cast<int64_t>(g.node(ts[0].update).inputs.size()) - 2;
  L.state_block_bytes = pc.shard_optimizer ? flat / pc.world : flat;
  for (int64_t k = 0; k < L.state_kinds; ++k) {
    L.state_begin.push_back(at);
    at += L.state_block_bytes;
  }
  for (const Trainable& t : ts) {
    const Node& u = g.node(t.update);
    REMAT_CHECK(static_cast<int64_t>(u.inputs.size()) == L.state_kinds + 2,
                "update node '" << u.name << "' has " << u.inputs.size() - 2
                                << " optimizer-state inputs, others " << L.state_kinds);
    if (!pc.shard_optimizer)
      for (int64_t k = 0; k < L.state_kinds; ++k)
        L.offset[static_cast<size_t>(u.inputs[static_cast<size_t>(k + 2)])] =
            L.state_begin[static_cast<size_t>(k)] + t.pos;
  }

  // Buffers, the input batch and labels (and anything else persistent), in graph order.
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (value_is_persistent(val.kind) && L.offset[v] < 0 && val.kind != ValueKind::OptState)
      place(v);
    REMAT_CHECK(!value_is_persistent(val.kind) || L.offset[v] >= 0 ||
                    (pc.shard_optimizer && val.kind == ValueKind::OptState),
                "persistent value '" << val.name << "' has no place in the layout");
  }
  L.region_bytes = at;
  L.constant_bytes = at;

  // This rank's updates: whole parameters, or the parts inside its shard of every bucket.
  std::vector<int64_t> pos_of(g.values.size(), -1);
  std::vector<NodeId> update_of(g.values.size(), -1);
  for (const Trainable& t : ts) {
    pos_of[static_cast<size_t>(t.param)] = t.pos;
    update_of[static_cast<size_t>(t.param)] = t.update;
  }
  for (size_t b = 0; b < L.buckets.size(); ++b) {
    const int64_t lo = pc.shard_optimizer ? L.shard_begin(b, pc.rank) : L.buckets[b].begin;
    const int64_t hi = lo + (pc.shard_optimizer ? L.shard_bytes(b) : L.buckets[b].bytes);
    for (ValueId p : L.buckets[b].params) {
      const int64_t start = pos_of[static_cast<size_t>(p)];
      const int64_t a = std::max(lo, start), e = std::min(hi, start + g.value(p).desc.bytes());
      if (a >= e) continue;
      const Node& u = g.node(update_of[static_cast<size_t>(p)]);
      UpdateSlice s;
      s.update = update_of[static_cast<size_t>(p)];
      s.first = (a - start) / 4;
      s.desc = TensorDesc{{(e - a) / 4}, DType::F32};
      s.param_offset = L.params_begin + a;
      s.grad_offset = L.grads_begin + a;
      for (int64_t k = 0; k < L.state_kinds; ++k)
        s.state_offsets.push_back(
            pc.shard_optimizer
                ? L.state_begin[static_cast<size_t>(k)] + L.shard_state_offset(b) + (a - lo)
                : L.offset[static_cast<size_t>(u.inputs[static_cast<size_t>(k + 2)])] +
                      (a - start));
      L.slices.push_back(std::move(s));
    }
  }
  return L;
}

}  // namespace remat
