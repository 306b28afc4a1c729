// The pattern pre-pass's matchers for data moved by Slices and a Concat (Note [ONNX patterns] in
// onnx_translator.h): torch.roll, and Swin's patch merging. Both fuse only when the Slices'
// constant bounds make exactly that movement, so any other Slices stay Slices.
#include <onnx/onnx_pb.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "models/onnx/onnx_pattern_graph.h"

namespace remat {
namespace onnx_detail {
namespace patterns {
namespace {

constexpr int64_t kToEnd = int64_t{1} << 62;  // PyTorch writes INT64_MAX for an open end

// A Slice of one axis with constant bounds.
struct SliceBounds {
  int64_t start = 0, end = 0, axis = 0, step = 1;
};
std::optional<SliceBounds> bounds_of(const Graph& g, const onnx::NodeProto* s) {
  if (!s || s->input_size() < 4 || s->input_size() > 5) return std::nullopt;
  std::vector<int64_t> b;  // start, end, axis, step
  for (int i = 1; i < s->input_size(); ++i) {
    const auto v = g.ints_of(s->input(i));
    if (!v || v->size() != 1) return std::nullopt;
    b.push_back(v->front());
  }
  return SliceBounds{b[0], b[1], b[2], b.size() == 4 ? b[3] : 1};
}

int64_t axis_of(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.name() == "axis") return a.i();
  return 0;
}

}  // namespace

// torch.roll(x, shifts=-k, dims=d) as torch.onnx.export writes it: Concat(Slice(x, [k, end)),
// Slice(x, [0, k))) along d, both Slices of the same data on that axis alone, k the same
// constant in both (negative: from the end): Roll(x) with axis d and shift -k.
void match_roll(Graph& g, int k) {
  const onnx::NodeProto* cat = g.node(k);
  if (!cat || cat->op_type() != "Concat" || !cat->domain().empty() || cat->input_size() != 2) return;
  const onnx::NodeProto* tail = g.made_by(cat->input(0), "Slice");
  const onnx::NodeProto* head = g.made_by(cat->input(1), "Slice");
  if (!tail || !head || tail->input(0) != head->input(0) || !g.is_data(tail->input(0)) ||
      !g.only_for(cat->input(0), k) || !g.only_for(cat->input(1), k))
    return;
  const int64_t axis = axis_of(*cat);
  const auto t = bounds_of(g, tail), h = bounds_of(g, head);
  if (!t || !h || t->axis != axis || h->axis != axis || t->step != 1 || h->step != 1 ||
      h->start != 0 || t->start != h->end || t->start == 0 || t->end < kToEnd)
    return;
  onnx::NodeProto f = fused_node("Roll", *cat, {tail->input(0)}, cat->output(0));
  set_int(&f, "axis", axis);
  set_int(&f, "shift", -t->start);
  g.fuse({g.index(tail), g.index(head), k}, f);
}

// Swin's patch merging (torchvision's _patch_merging_pad) on x [N, H, W, C]: x0 = x[:, 0::2,
// 0::2], x1 = x[:, 1::2, 0::2], x2 = x[:, 0::2, 1::2], x3 = x[:, 1::2, 1::2], each a Slice of
// axis 1 (start 0 or 1, step 2; shared by two of them) then of axis 2, and Concat(x0, x1, x2,
// x3) along the last axis: PatchMerge(x) with `order` 1 when the row offset varies fastest
// (torchvision's order), 0 when the column offset does.
void match_patch_merge(Graph& g, int k) {
  const onnx::NodeProto* cat = g.node(k);
  if (!cat || cat->op_type() != "Concat" || !cat->domain().empty() || cat->input_size() != 4) return;
  const int64_t axis = axis_of(*cat);
  if (axis != -1 && axis != 3) return;
  std::string x;
  std::vector<int> group = {k};
  std::vector<int64_t> offsets;  // per input: 2 * row offset + column offset
  for (int i = 0; i < 4; ++i) {
    const onnx::NodeProto* cols = g.made_by(cat->input(i), "Slice");
    const onnx::NodeProto* rows = cols ? g.made_by(cols->input(0), "Slice") : nullptr;
    const auto c = bounds_of(g, cols), r = bounds_of(g, rows);
    if (!c || !r || !g.only_for(cat->input(i), k) || r->axis != 1 || c->axis != 2 ||
        r->step != 2 || c->step != 2 || r->start < 0 || r->start > 1 || c->start < 0 ||
        c->start > 1 || r->end < kToEnd || c->end < kToEnd || (i > 0 && rows->input(0) != x))
      return;
    x = rows->input(0);
    offsets.push_back(2 * r->start + c->start);
    group.push_back(g.index(cols));
    group.push_back(g.index(rows));
  }
  const std::set<int> members(group.begin(), group.end());
  for (int n : members) {  // the row Slices feed only the group's column Slices
    if (n == k) continue;
    for (const auto& o : g.node(n)->output())
      for (int c : g.consumers(o))
        if (!members.count(c)) return;
  }
  int64_t order = -1;
  if (offsets == std::vector<int64_t>{0, 2, 1, 3}) order = 1;  // (0, 0), (1, 0), (0, 1), (1, 1)
  if (offsets == std::vector<int64_t>{0, 1, 2, 3}) order = 0;  // (0, 0), (0, 1), (1, 0), (1, 1)
  if (order < 0 || !g.is_data(x)) return;
  onnx::NodeProto f = fused_node("PatchMerge", *cat, {x}, cat->output(0));
  set_int(&f, "rows_fastest", order);
  g.fuse(std::vector<int>(members.begin(), members.end()), f);
}

// q, k, v = qkv[0], qkv[1], qkv[2] after a permute that moves an axis first (Swin's
// qkv.reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)): a Transpose of data whose perm does not
// begin with 0, read only by Gathers along axis 0 at constant scalar indices. Each Gather
// becomes Unbind(x) with the Transpose's perm and its index, in the Gather's place.
void match_unbind(Graph& g, int k) {
  const onnx::NodeProto* t = g.node(k);
  if (!t || t->op_type() != "Transpose" || !t->domain().empty() || !g.is_data(t->input(0))) return;
  const std::vector<int64_t> perm = perm_of(*t);
  if (perm.empty() || perm[0] == 0) return;
  const std::vector<int> readers = g.consumers(t->output(0));
  if (readers.empty() || g.is_output(t->output(0))) return;
  std::vector<int64_t> indices;
  for (int r : readers) {
    const onnx::NodeProto* gather = g.node(r);
    const bool along_first = gather && gather->op_type() == "Gather" &&
                             gather->domain().empty() && gather->input_size() == 2 &&
                             gather->input(0) == t->output(0) && axis_of(*gather) == 0;
    const std::optional<int64_t> i =
        along_first ? g.scalar_int_of(gather->input(1)) : std::nullopt;
    if (!i) return;
    indices.push_back(*i);
  }
  for (size_t j = 0; j < readers.size(); ++j) {
    const onnx::NodeProto& gather = *g.node(readers[j]);
    onnx::NodeProto f = fused_node("Unbind", gather, {t->input(0)}, gather.output(0));
    copy_attrs(&f, *t, "");
    set_int(&f, "index", indices[j]);
    if (j == 0) g.fuse({k, readers[j]}, f);
    else g.fuse({readers[j]}, f);
  }
}

}  // namespace patterns
}  // namespace onnx_detail
}  // namespace remat
