// The shape patterns' translators (Note [ONNX patterns] in onnx_translator.h; the matchers are
// in onnx_shape_patterns.cpp): torch.roll, Swin's patch merging, and qkv[i] after a permute that
// moves an axis first.
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {

namespace {

// Roll(x) (match_roll in onnx_shape_patterns.cpp): torch.roll along one axis after the batch.
void roll(Translator& t) {
  const DataValue x = t.data(0);
  if (x.transposed) t.fail("a roll of transposed heads is not supported");
  const auto rank = static_cast<int64_t>(x.sample.size()) + 1;
  const int64_t axis = normalize_axis(t.attr_int("axis", 0), rank, t.where());
  if (axis == 0) t.fail("a roll along the batch is not supported");
  const int64_t n = x.sample[static_cast<size_t>(axis - 1)], shift = t.attr_int("shift", 0);
  if (shift <= -n || shift >= n)
    t.fail("the Slices split axis " + std::to_string(axis) + " of " + std::to_string(n) +
           " at " + std::to_string(-shift) + ", outside it: not a roll");
  AttrMap a;
  a.set("shifts", std::vector<int64_t>{shift});
  a.set("dims", std::vector<int64_t>{axis});
  t.emit("roll", {as_sample_shape(t, x)}, a, {}, x.sample, x.sample, x.dtype);
}

// PatchMerge(x) (match_patch_merge in onnx_shape_patterns.cpp): Swin's patch merging of x
// [N, H, W, C] to [N, H / 2, W / 2, 4 C], the four offsets' channels in the Concat's order: a
// reshape to [H / 2, 2, W / 2, 2, C], the block swap that puts the two offsets behind W / 2 (the
// row offset fastest: [H / 2, W / 2, dw, dh, C]; else [.., dh, dw, C]) and a reshape.
void patch_merge(Translator& t) {
  const DataValue x = t.data(0);
  if (x.transposed || x.sample.size() != 3)
    t.fail("expects data [N, H, W, C], got " + shape_str(x.sample) + " per sample");
  const int64_t h = x.sample[0], w = x.sample[1], c = x.sample[2];
  if (h % 2 != 0 || w % 2 != 0)
    t.fail("H = " + std::to_string(h) + " and W = " + std::to_string(w) + " must be even");
  const DataValue split = reshape_data(t, as_sample_shape(t, x), {h / 2, 2, w / 2, 2, c});
  const bool rows_fastest = t.attr_int("rows_fastest", 1) != 0;
  const DataValue moved = transpose_data(
      t, split, rows_fastest ? std::vector<int64_t>{0, 1, 3, 4, 2, 5} : std::vector<int64_t>{0, 1, 3, 2, 4, 5});
  reshape_data(t, moved, {h / 2, w / 2, 4 * c});
}

// Unbind(x) (match_unbind in onnx_shape_patterns.cpp): Transpose(x, perm) then Gather at
// `index` along axis 0, i.e. x at that index of its axis perm[0], the other axes in perm's order
// (the batch must lead them): the slice of x at the index (channel_slice along that axis), x's
// shape without the axis, and the rest of perm as a Transpose.
void unbind(Translator& t) {
  const DataValue x = t.data(0, kFolds);
  if (x.transposed) t.fail("an unbind of transposed heads is not supported");
  const std::vector<int64_t> perm = t.attr_ints("perm", {});
  const int64_t rank = onnx_rank(x);
  if (static_cast<int64_t>(perm.size()) != rank || rank < 3)
    t.fail("perm " + shape_str(perm) + " of a value of rank " + std::to_string(rank));
  const int64_t taken = perm[0];
  if (taken < 1 || taken >= rank || perm[1] != 0)
    t.fail("perm " + shape_str(perm) + " leaves the batch behind another axis once axis " +
           std::to_string(taken) + " is taken (remat's values keep it first)");
  std::vector<int64_t> rest;  // perm without the taken axis, renumbered
  for (size_t k = 1; k < perm.size(); ++k) rest.push_back(perm[k] > taken ? perm[k] - 1 : perm[k]);
  const int64_t axis = taken + (x.fold > 1 ? 1 : 0);  // remat's axis, the batch being axis 0
  const int64_t n = x.sample[static_cast<size_t>(axis - 1)];
  int64_t index = t.attr_int("index", 0);
  if (index < -n || index >= n)
    t.fail("index " + std::to_string(index) + " of an axis of " + std::to_string(n));
  if (index < 0) index += n;
  Shape sliced = x.sample;
  sliced[static_cast<size_t>(axis - 1)] = 1;
  AttrMap a;
  a.set("axis", axis);
  a.set("offset", index);
  a.set("channels", int64_t{1});
  const DataValue s = t.emit("channel_slice", {x}, a, {}, sliced, sliced, x.dtype);
  Shape without = sliced;
  without.erase(without.begin() + (axis - 1));
  transpose_data(t, reshape_data(t, s, without), rest);
}

}  // namespace

std::map<std::string, TranslateFn> with_shape_patterns(std::map<std::string, TranslateFn> ops) {
  ops["Roll"] = roll;
  ops["PatchMerge"] = patch_merge;
  ops["Unbind"] = unbind;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
