// The ONNX ops that reshape, permute, slice and split data (Flatten, Reshape, Squeeze,
// Unsqueeze, Transpose, Slice, Split): aliases where remat's value is the result already, else
// a layer of flatten, reshape, transpose, channel_slice or crop. The batch stays the first axis
// throughout, windows folded into it included (Note [folded batch] in onnx_translator.h).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <limits>

#include "models/onnx/onnx_translator.h"
#include "ops/block_swap.h"

namespace remat {
namespace onnx_detail {

namespace {

// `s` without trailing 1s (at least one dimension kept): the shapes an alias may differ by.
Shape strip_ones(Shape s) {
  while (s.size() > 1 && s.back() == 1) s.pop_back();
  return s;
}

// `s` without any of its 1s: two shapes of one size whose values lie in the same order.
Shape without_ones(Shape s) {
  s.erase(std::remove(s.begin(), s.end(), int64_t{1}), s.end());
  return s;
}

// [N, ...] -> [N, F]: an alias when remat's value is flat already.
void to_flat(Translator& t, const DataValue& x) {
  const Shape flat = {shape_numel(x.sample)};
  if (x.remat == flat) {
    DataValue v = x;
    v.sample = flat;
    t.alias(0, v);
  } else {
    t.emit("flatten", {x}, {}, {}, flat, flat);
  }
}

void flatten(Translator& t) {
  const DataValue x = t.data(0);
  const int64_t axis = normalize_axis(t.attr_int("axis", 1), static_cast<int64_t>(x.sample.size()) + 1,
                                      t.where());
  if (axis != 1) t.fail("only Flatten at axis 1 (keeping the batch) is supported");
  to_flat(t, x);
}

}  // namespace

DataValue as_sample_shape(Translator& t, const DataValue& x) {
  if (x.remat == x.sample || without_ones(x.remat) != without_ones(x.sample)) return x;
  AttrMap a;
  a.set("shape", std::vector<int64_t>(x.sample.begin(), x.sample.end()));
  return t.emit("reshape", {x}, a, {}, x.sample, x.sample, x.dtype);
}

DataValue reshape_data(Translator& t, const DataValue& x, const Shape& to, int64_t fold) {
  DataValue v = x;
  if (strip_ones(to) == strip_ones(x.remat)) {
    v.sample = to;
  } else {
    AttrMap a;
    a.set("shape", std::vector<int64_t>(to.begin(), to.end()));
    v = t.emit("reshape", {x}, a, {}, to, to, x.dtype);
  }
  if (fold > 0) v.fold = fold;
  t.alias(0, v);
  return v;
}

// The first dimension m N of ONNX's Reshape target (N, m N, 0 for x's own, -1 with the rest
// known, or the static batch times m) as m; 0 when it is none of these.
int64_t target_fold(Translator& t, const DataValue& x, const SymInt& first, int64_t per_sample,
                    int64_t rest_known, bool rest_inferred) {
  if (first.n > 0 && first.c == 0) return first.n;
  if (first == SymInt{0, 0}) return x.fold;
  if (first == SymInt{0, -1} && !rest_inferred && rest_known > 0 && per_sample % rest_known == 0)
    return per_sample / rest_known;
  const std::optional<int64_t> batch = t.static_batch();
  if (batch && *batch > 0 && first.n == 0 && first.c > 0 && first.c % *batch == 0)
    return first.c / *batch;
  return 0;
}

// ONNX's Reshape target `to` of data x, folds included: the fold m of the result and its dims
// after the first.
std::pair<int64_t, Shape> onnx_target(Translator& t, const DataValue& x, const OnnxConst& to) {
  if (to.is_float || to.shape.size() != 1 || to.i.empty())
    t.fail("the shape must be a 1-D integer list");
  const Shape onnx_rest(x.sample.begin() + (x.fold > 1 ? 1 : 0), x.sample.end());
  const int64_t per_sample = shape_numel(x.sample);
  Shape rest;
  int64_t infer = -1, known = 1;
  for (size_t k = 1; k < to.i.size(); ++k) {
    if (!to.i[k].is_const()) t.fail("the batch N may only be the first dimension of the shape");
    int64_t v = to.i[k].c;
    if (v == 0 && k - 1 < onnx_rest.size()) v = onnx_rest[k - 1];
    if (v < -1 || v == 0 || v > (int64_t{1} << 40)) t.fail("a dimension of " + std::to_string(v));
    if (v == -1 && infer >= 0) t.fail("two dimensions of -1");
    if (v == -1) infer = static_cast<int64_t>(rest.size());
    else known = known <= (int64_t{1} << 40) / v ? known * v : (int64_t{1} << 41);
    rest.push_back(v);
  }
  const int64_t m = target_fold(t, x, to.i[0], per_sample, known, infer >= 0);
  const std::string fold = std::to_string(x.fold);
  const std::string from = x.fold > 1
                               ? "[" + fold + "N, " + shape_str(onnx_rest).substr(1) + " per " +
                                     fold + " rows"
                               : shape_str(x.sample) + " per sample";
  if (m < 1 || per_sample % m != 0)
    t.fail("a Reshape to [" + sym_str(to.i[0]) + ", ...] of " + from +
           " does not keep the batch first (remat's values keep it)");
  if (infer >= 0 && known > 0) rest[static_cast<size_t>(infer)] = per_sample / m / known;
  if (m * shape_numel(rest) != per_sample)
    t.fail("a Reshape of " + from + " to [" + sym_str(SymInt{m, 0}) + ", " +
           shape_str(rest).substr(1) + " changes the number of values");
  return {m, rest};
}

// Reshape's target `to` ([N or 0, d1, ...]; ONNX's 0 copies the dimension, -1 is inferred) of a
// value of per-sample shape `from`: the per-sample result, or an error when the batch does not
// stay first (Note [ONNX constant folding]).
Shape reshape_target(Translator& t, const Shape& from, const OnnxConst& to) {
  DataValue x;
  x.sample = from;
  const auto [m, rest] = onnx_target(t, x, to);
  if (m != 1)
    t.fail("a Reshape to [" + sym_str(to.i[0]) + ", ...] of " + shape_str(from) +
           " per sample does not keep the batch first (remat's values keep it)");
  return rest;
}

DataValue reshape_onnx(Translator& t, const DataValue& x, const OnnxConst& to) {
  auto [m, rest] = onnx_target(t, x, to);
  if (m > 1) rest.insert(rest.begin(), m);
  return reshape_data(t, x, rest, m);
}

DataValue transpose_data(Translator& t, const DataValue& x, std::vector<int64_t> perm) {
  if (x.transposed) t.fail("a Transpose of transposed heads is not supported");
  const int64_t onnx_rank_x = onnx_rank(x);
  if (perm.empty())  // ONNX's default reverses the axes
    for (int64_t d = onnx_rank_x - 1; d >= 0; --d) perm.push_back(d);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < onnx_rank_x; ++d)
    if (static_cast<int64_t>(sorted.size()) != onnx_rank_x || sorted[static_cast<size_t>(d)] != d)
      t.fail("perm " + shape_str(perm) + " is not a permutation of " + std::to_string(onnx_rank_x) +
             " axes");
  std::vector<int64_t> swap = {1, 0};  // [1, 0, 2, ...]: Note [sequence-first values]
  for (int64_t d = 2; d < onnx_rank_x; ++d) swap.push_back(d);
  if (x.seq_first && perm != swap)
    t.fail("perm " + shape_str(perm) + " of sequence-first data: only " + shape_str(swap) +
           " (back to the batch first) is supported");
  if (perm == swap && (x.seq_first || (onnx_rank_x >= 3 && x.fold == 1 && x.remat == x.sample))) {
    DataValue v = x;
    v.seq_first = !x.seq_first;
    t.alias(0, v);
    return v;
  }
  if (perm[0] != 0) t.fail("perm " + shape_str(perm) + " moves the batch (remat's values keep it first)");
  if (x.fold > 1) {  // remat's axes: the batch, the fold, then ONNX's axes 1.. one further on
    for (size_t k = 1; k < perm.size(); ++k) ++perm[k];
    perm.insert(perm.begin() + 1, 1);
  }
  const int64_t rank = static_cast<int64_t>(x.sample.size()) + 1;
  Shape out;
  std::vector<int64_t> moved;  // the axes of size > 1, in their new order
  for (size_t k = 1; k < perm.size(); ++k) {
    out.push_back(x.sample[static_cast<size_t>(perm[k] - 1)]);
    if (out.back() != 1) moved.push_back(perm[k]);
  }
  if (std::is_sorted(moved.begin(), moved.end())) return reshape_data(t, x, out);
  DataValue now = as_sample_shape(t, x);
  Shape shape = x.sample;
  for (const BlockSwap& swap : block_swaps_for(perm)) {
    const std::vector<int64_t> p = block_swap_perm(rank, swap);
    Shape next;
    for (size_t k = 1; k < p.size(); ++k) next.push_back(shape[static_cast<size_t>(p[k] - 1)]);
    AttrMap a;
    a.set("perm", p);
    now = t.emit("transpose", {now}, a, {}, next, next, x.dtype);  // a copy: the next overwrites
    shape = next;
  }
  return now;
}

namespace {


// Reshape of data: a flat result is a flatten, one that is remat's value already an alias, any
// other a reshape layer (the batch first throughout).
void reshape(Translator& t) {
  const DataValue x = t.data(0, kFolds);
  if (x.transposed) t.fail("a Reshape of transposed heads is not supported");
  const auto [m, rest] = onnx_target(t, x, t.konst(1));
  if (m == 1 && rest.size() == 1 && x.fold == 1) return to_flat(t, x);
  reshape_onnx(t, x, t.konst(1));  // sets the result's fold (a flatten would keep x's)
}

// Squeeze / Unsqueeze of data: an alias where remat's value differs from the result only by
// trailing 1s, a reshape layer where it differs by other 1s (adaLN's s.unsqueeze(1) of [N, D]).
void squeeze_like(Translator& t, bool unsqueeze) {
  const DataValue x = t.data(0);
  const std::vector<int64_t> axes =
      t.has(1) ? t.konst(1).ints(t.where() + ": axes") : t.attr_ints("axes", {});
  OnnxConst probe;  // only the shape matters; the batch stands as 2 so no axis takes it for a 1
  probe.shape = Shape{2};
  probe.shape.insert(probe.shape.end(), x.sample.begin(), x.sample.end());
  const OnnxConst r = unsqueeze ? fold_unsqueeze(probe, axes, t.where())
                                : fold_squeeze(probe, axes, t.where());
  if (r.shape.empty() || r.shape[0] != 2) t.fail("the batch axis cannot be squeezed or unsqueezed");
  const Shape sample(r.shape.begin() + 1, r.shape.end());
  if (without_ones(sample) != without_ones(x.remat))
    t.fail(std::string(unsqueeze ? "Unsqueeze" : "Squeeze") + " of " + shape_str(x.sample) +
           " to " + shape_str(sample) + " per sample is not supported (only where remat's value "
           "has that shape but for 1s)");
  if (strip_ones(sample) != strip_ones(x.remat)) {  // a 1 before the last axis: a reshape
    AttrMap a;
    a.set("shape", std::vector<int64_t>(sample.begin(), sample.end()));
    return (void)t.emit("reshape", {x}, a, {}, sample, sample, x.dtype);
  }
  DataValue v = x;
  v.sample = sample;
  t.alias(0, v);
}

void squeeze(Translator& t) { squeeze_like(t, false); }
void unsqueeze(Translator& t) { squeeze_like(t, true); }

// Transpose of data, the batch first: one that moves only dimensions of 1 (a pooled [C, 1, 1]
// to [1, 1, C]) is a reshape; one that swaps two adjacent blocks of axes (x.permute(0, 2, 3, 1)
// and back, x.transpose(1, 2) of [N, A, B], a window partition; Note [block swaps] in
// ops/block_swap.h) a transpose layer; any other a chain of them (MaxViT's permute(0, 2, 4, 3,
// 5, 1) of [N, C, H / p, p, W / p, p] is two); [1, 0, 2, ...] of tokens an alias, sequence-first
// (Note [sequence-first values]). (Heads' Transposes are patterns: Note [ONNX patterns].)
void transpose(Translator& t) {
  transpose_data(t, t.data(0, kFolds | kSeqFirst), t.attr_ints("perm", {}));
}

// Channels [lo, hi) of data whose channels are its first per-sample axis: an image [C, H, W]
// or features [F] (remat's [C] of a pooled [C, 1, 1] too). Output `out` of the node.
void emit_channels(Translator& t, const DataValue& x, int64_t lo, int64_t hi, int out) {
  const int64_t c = x.sample[0];
  if (x.remat.size() != 1 && x.remat.size() != 3)
    t.fail("only the channels of an image [N, C, H, W] or features [N, F] are sliced, not of " +
           shape_str(x.sample) + " per sample");
  if (lo == 0 && hi == c) return t.set_data(out, x);
  DataValue y = x;
  y.sample[0] = y.remat[0] = hi - lo;
  AttrMap a;
  a.set("offset", lo);
  a.set("channels", hi - lo);
  t.emit("channel_slice", {x}, a, {}, y.sample, y.remat, x.dtype, out);
}

// Slice of data along its channels (torch.chunk, ShuffleNet's split) or an image's H and W (a
// crop): the batch whole, steps of 1, ONNX's clamping of the starts and ends.
void slice(Translator& t) {
  const DataValue x = t.data(0);
  const int64_t rank = static_cast<int64_t>(x.sample.size()) + 1;
  const std::vector<int64_t> starts = t.konst(1).ints(t.where() + ": starts");
  const std::vector<int64_t> ends = t.konst(2).ints(t.where() + ": ends");
  if (starts.size() != ends.size() || starts.empty())
    t.fail("starts and ends must have one value per sliced axis");
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  for (size_t k = 0; k < axes.size(); ++k) axes[k] = static_cast<int64_t>(k);
  if (t.has(3)) axes = t.konst(3).ints(t.where() + ": axes");
  if (t.has(4)) steps = t.konst(4).ints(t.where() + ": steps");
  if (axes.size() != starts.size() || steps.size() != starts.size())
    t.fail("axes and steps must have one value per sliced axis");
  Shape lo(x.sample.size(), 0), hi = x.sample;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = normalize_axis(axes[k], rank, t.where());
    if (a == 0) t.fail("the batch axis is not sliced (remat's values keep it whole)");
    if (steps[k] != 1) t.fail("only steps of 1 are supported");
    const int64_t dim = x.sample[static_cast<size_t>(a - 1)];
    auto clamp = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    lo[static_cast<size_t>(a - 1)] = clamp(starts[k]);
    hi[static_cast<size_t>(a - 1)] = clamp(ends[k]);
  }
  std::vector<size_t> cut;
  for (size_t d = 0; d < lo.size(); ++d) {
    if (hi[d] <= lo[d]) t.fail("the result would be empty");
    if (lo[d] != 0 || hi[d] != x.sample[d]) cut.push_back(d);
  }
  if (cut.empty()) return t.alias(0, x);
  if (cut == std::vector<size_t>{0}) return emit_channels(t, x, lo[0], hi[0], 0);
  if (x.sample.size() == 3 && x.remat == x.sample && cut.front() >= 1) {
    AttrMap a;
    a.set("cropping", std::vector<int64_t>{lo[1], x.sample[1] - hi[1], lo[2], x.sample[2] - hi[2]});
    const Shape out = {x.sample[0], hi[1] - lo[1], hi[2] - lo[2]};
    t.emit("crop", {x}, a, {}, out, out);
    return;
  }
  t.fail("only a Slice of channels (axis 1) or of an image's H and W (axes 2, 3) is supported, "
         "not of " + shape_str(x.sample) + " per sample along several of them");
}

// Split of data along its channels: one channel_slice per output that is used.
void split(Translator& t) {
  const DataValue x = t.data(0);
  const int64_t rank = static_cast<int64_t>(x.sample.size()) + 1;
  if (normalize_axis(t.attr_int("axis", 0), rank, t.where()) != 1)
    t.fail("only a Split of channels (axis 1) is supported");
  const int64_t c = x.sample[0], n = t.node().output_size();
  std::vector<int64_t> parts;
  if (t.has(1)) {
    parts = t.konst(1).ints(t.where() + ": split");
  } else {
    if (c % n != 0)
      t.fail(std::to_string(c) + " channels do not split into " + std::to_string(n) + " equal parts");
    parts.assign(static_cast<size_t>(n), c / n);
  }
  int64_t sum = 0;
  for (int64_t p : parts) {
    if (p < 1 || p > c) t.fail("a part of " + std::to_string(p) + " channels of " + std::to_string(c));
    sum += p;
  }
  if (static_cast<int64_t>(parts.size()) != n || sum != c)
    t.fail("parts " + shape_str(parts) + " do not split " + std::to_string(c) + " channels into " +
           std::to_string(n) + " outputs");
  int64_t offset = 0;
  for (int k = 0; k < n; ++k) {
    if (t.used(k)) emit_channels(t, x, offset, offset + parts[static_cast<size_t>(k)], k);
    offset += parts[static_cast<size_t>(k)];
  }
}

}  // namespace

std::map<std::string, TranslateFn> with_shape_ops(std::map<std::string, TranslateFn> ops) {
  ops["Flatten"] = flatten;
  ops["Reshape"] = reshape;
  ops["Squeeze"] = squeeze;
  ops["Unsqueeze"] = unsqueeze;
  ops["Transpose"] = transpose;
  ops["Slice"] = slice;
  ops["Split"] = split;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
