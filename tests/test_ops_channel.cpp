// channel_shuffle, channel_slice, reshape, transpose and class_token (ShuffleNet's channel shuffle,
// torch.chunk of channels, Swin's qkv[i] along a middle axis, an imported [N, C] read as [N, C,
// 1, 1], x.permute(0, 2, 3, 1)): values against their definitions, the backward ops each emits,
// and the errors of each attribute. Their gradients against central differences, channels-last
// and bf16 run with the other spatial cases (tests/op_cases.h spatial_op_cases()).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ops/block_swap.h"
#include "tests/op_cases.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Floats = std::vector<float>;

// 1..n as floats.
Floats iota(int64_t n) {
  Floats v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  return v;
}

TEST(ChannelShuffle, OutputChannelJGPlusIIsInputChannelICOverGPlusJ) {
  const int64_t n = 2, c = 12, hw = 6;
  for (int64_t g : {1, 2, 3, 4, 6, 12}) {
    SCOPED_TRACE("groups " + std::to_string(g));
    OpHarness h(builtin_registry(),
                {"channel_shuffle", attr_map({{"groups", g}}), {f32({n, c, 2, 3})}, {iota(n * c * hw)}});
    const Floats y = h.forward();
    const Floats x = h.input(0);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < g; ++i)
        for (int64_t j = 0; j < c / g; ++j)
          for (int64_t p = 0; p < hw; ++p)
            ASSERT_EQ(y[static_cast<size_t>((s * c + j * g + i) * hw + p)],
                      x[static_cast<size_t>((s * c + i * (c / g) + j) * hw + p)]);
  }
}

TEST(ChannelShuffle, TheGradientIsTheShuffleWithCOverGGroups) {
  // Six channels in two groups: [1, 2, 3 | 4, 5, 6] -> [1, 4, 2, 5, 3, 6].
  OpHarness h(builtin_registry(), {"channel_shuffle", attr_map({{"groups", 2}}), {f32({1, 6, 1, 1})}, {iota(6)}});
  EXPECT_EQ(h.forward(), (Floats{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(h.gradients(iota(6))[0], (Floats{1, 3, 5, 2, 4, 6}));
  ASSERT_EQ(h.backward_nodes().size(), 1u);
  const Node& b = h.graph().node(h.backward_nodes()[0]);
  EXPECT_EQ(b.op, "channel_shuffle");
  EXPECT_EQ(AttrReader(b.attrs).require_int("groups", 1, 100), 3);
}

TEST(ChannelSlice, TakesItsChannelsAndItsGradientFillsTheRestWithZeros) {
  OpHarness h(builtin_registry(),
              {"channel_slice", attr_map({{"offset", 1}, {"channels", 2}}), {f32({1, 4, 1, 2})}, {iota(8)}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 2, 1, 2}));
  EXPECT_EQ(h.forward(), (Floats{3, 4, 5, 6}));
  EXPECT_EQ(h.gradients({1, 2, 3, 4})[0], (Floats{0, 0, 1, 2, 3, 4, 0, 0}));
  ASSERT_EQ(h.backward_nodes().size(), 1u);
  EXPECT_EQ(h.graph().node(h.backward_nodes()[0]).op, "channel_slice_grad");

  OpHarness f(builtin_registry(), {"channel_slice", attr_map({{"offset", 2}, {"channels", 1}}), {f32({2, 3})}, {iota(6)}});
  EXPECT_EQ(f.forward(), (Floats{3, 6}));
  EXPECT_EQ(f.gradients({1, 2})[0], (Floats{0, 0, 1, 0, 0, 2}));
}

// With `axis`: y[n, a, s, b] = x[n, a, offset + s, b] for the axes a before and b after it.
TEST(ChannelSlice, AlongAnAxisTakesItAtEveryIndexOfTheOtherAxes) {
  const int64_t n = 2, a = 3, c = 4, b = 2, off = 1, k = 2;
  OpHarness h(builtin_registry(),
              {"channel_slice", attr_map({{"axis", 2}, {"offset", off}, {"channels", k}}),
               {f32({n, a, c, b})}, {iota(n * a * c * b)}});
  EXPECT_EQ(h.output_desc().shape, (Shape{n, a, k, b}));
  const Floats y = h.forward(), x = h.input(0);
  const Floats dy = iota(n * a * k * b);
  const Floats dx = h.gradients(dy)[0];
  for (int64_t i = 0; i < n * a; ++i)
    for (int64_t s = 0; s < c; ++s)
      for (int64_t j = 0; j < b; ++j) {
        const size_t at = static_cast<size_t>((i * c + s) * b + j);
        const bool in = s >= off && s < off + k;
        const size_t out = static_cast<size_t>((i * k + (s - off)) * b + j);
        if (in) {
          ASSERT_EQ(y[out], x[at]);
        }
        ASSERT_EQ(dx[at], in ? dy[out] : 0.0f);
      }
  EXPECT_HAS(case_error({"channel_slice", attr_map({{"axis", 4}, {"offset", 0}, {"channels", 1}}),
                         {f32({1, 4, 2, 2})}}),
             "axis 4 of [1, 4, 2, 2] (the axes after the batch are 1 .. 3)");
  EXPECT_HAS(case_error({"channel_slice", attr_map({{"axis", 3}, {"offset", 2}, {"channels", 1}}),
                         {f32({1, 4, 2, 2})}}),
             "channels [2, 3) are outside the input's 2");
}

TEST(Reshape, CopiesInOrderAndItsGradientReshapesBack) {
  OpHarness h(builtin_registry(), {"reshape", attr_map({{"shape", std::vector<int64_t>{3, 1, 1}}}), {f32({2, 3})}, {iota(6)}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 3, 1, 1}));
  EXPECT_EQ(h.forward(), iota(6));
  EXPECT_EQ(h.gradients(iota(6))[0], iota(6));
  ASSERT_EQ(h.backward_nodes().size(), 1u);
  const Node& b = h.graph().node(h.backward_nodes()[0]);
  EXPECT_EQ(b.op, "reshape");
  EXPECT_EQ(h.graph().value(b.output).desc.shape, (Shape{2, 3}));
  EXPECT_HAS(case_error({"reshape", {}, {f32({2, 3})}}), "'shape': is required");
  EXPECT_HAS(case_error({"reshape", attr_map({{"shape", std::vector<int64_t>{2, 2}}}), {f32({2, 3})}}),
             "reshape: [2, 3] holds 3 values per sample, shape [2, 2] 4");
  EXPECT_HAS(case_error({"reshape", attr_map({{"shape", std::vector<int64_t>{0, 3}}}), {f32({2, 3})}}),
             "out of range");
}

// y[n, i1.., j1..] = x[n, j1.., i1..] for perm [0, k + 1, .., r - 1, 1, .., k], written out
// index by index for [2, 3, 4, 5] -> [2, 4, 5, 3].
TEST(Transpose, PermutesAsPyTorchsPermuteAndItsGradientPermutesBack) {
  OpHarness h(builtin_registry(), {"transpose", attr_map({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}),
                                   {f32({2, 3, 4, 5})}, {iota(120)}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 4, 5, 3}));
  const std::vector<float> y = h.forward();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j)
          ASSERT_EQ(y[((n * 4 + i) * 5 + j) * 3 + c], static_cast<float>(((n * 3 + c) * 4 + i) * 5 + j + 1));
  EXPECT_EQ(h.gradients(y)[0], iota(120));  // the permutation back of the output is the input
  ASSERT_EQ(h.backward_nodes().size(), 1u);
  const Node& b = h.graph().node(h.backward_nodes()[0]);
  EXPECT_EQ(b.op, "transpose");
  EXPECT_EQ(std::get<std::vector<int64_t>>(b.attrs.values.at("perm")), (std::vector<int64_t>{0, 3, 1, 2}));
  OpHarness tokens(builtin_registry(), {"transpose", attr_map({{"perm", std::vector<int64_t>{0, 2, 1}}}),
                                        {f32({1, 2, 3})}, {iota(6)}});
  EXPECT_EQ(tokens.forward(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

// Any perm, by the definition y[i_0, .., i_{r-1}] with i_{perm[d]} the index of output axis d:
// the reference walks the output in order and reads x through x's strides.
std::vector<float> permuted(const std::vector<float>& x, const Shape& s, const std::vector<int64_t>& perm) {
  const size_t r = s.size();
  std::vector<int64_t> stride(r, 1), out_shape(r), idx(r, 0);
  for (size_t d = r - 1; d > 0; --d) stride[d - 1] = stride[d] * s[d];
  for (size_t d = 0; d < r; ++d) out_shape[d] = s[static_cast<size_t>(perm[d])];
  std::vector<float> y;
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t at = 0;
    for (size_t d = 0; d < r; ++d) at += idx[d] * stride[static_cast<size_t>(perm[d])];
    y.push_back(x[static_cast<size_t>(at)]);
    for (size_t d = r; d-- > 0;) {  // the next output index, the last axis fastest
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

// Block swaps in the middle of the axes, with vectors of inner elements: k.transpose(-2, -1), a
// window partition (Swin's [N, H / w, w, W / w, w, C] -> [N, H / w, W / w, w, w, C]) and Swin's
// patch merging; each gradient is the swap back.
TEST(Transpose, BlockSwapsAreThePermutationsTheyName) {
  const std::vector<std::pair<std::vector<int64_t>, Shape>> cases = {
      {{0, 1, 3, 2}, {2, 3, 4, 5}},
      {{0, 1, 3, 2, 4, 5}, {2, 2, 3, 2, 3, 4}},
      {{0, 1, 3, 4, 2, 5}, {2, 2, 2, 3, 2, 3}},
      {{0, 2, 1, 3}, {2, 3, 4, 5}}};
  for (const auto& [perm, shape] : cases) {
    SCOPED_TRACE(shape_str(perm));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    OpHarness h(builtin_registry(), {"transpose", attr_map({{"perm", perm}}), {f32(shape)}, {iota(n)}});
    const std::vector<float> y = h.forward();
    EXPECT_EQ(y, permuted(iota(n), shape, perm));
    EXPECT_EQ(h.gradients(y)[0], iota(n));
  }
  EXPECT_EQ(permuted(iota(6), {1, 2, 3}, {0, 2, 1}), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

// Every permutation of up to 6 axes that keeps the batch first is the chain block_swaps_for
// gives, each link a block swap, at most rank - 2 of them; a block swap is a chain of one.
TEST(Transpose, EveryPermutationIsAChainOfBlockSwaps) {
  for (int64_t rank = 2; rank <= 6; ++rank) {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d) perm.push_back(d);
    do {
      SCOPED_TRACE(shape_str(perm));
      const std::vector<BlockSwap> chain = block_swaps_for(perm);
      std::vector<int64_t> now = perm;
      std::iota(now.begin(), now.end(), 0);
      for (const BlockSwap& s : chain) {
        const std::vector<int64_t> p = block_swap_perm(rank, s);
        ASSERT_TRUE(block_swap_of(p).has_value());
        std::vector<int64_t> next;
        for (int64_t k : p) next.push_back(now[static_cast<size_t>(k)]);
        now = next;
      }
      EXPECT_EQ(now, perm);
      EXPECT_LE(static_cast<int64_t>(chain.size()), std::max<int64_t>(rank - 2, 0));
      if (block_swap_of(perm)) {
        EXPECT_EQ(chain.size(), 1u);
      }
    } while (std::next_permutation(perm.begin() + 1, perm.end()));
  }
}

// y[n, (i + s1) mod H, (j + s2) mod W, c] = x[n, i, j, c], written out index by index; the
// gradient is the roll back.
TEST(Roll, RollsAsTorchRollAndItsGradientRollsBack) {
  OpHarness h(builtin_registry(), {"roll", attr_map({{"shifts", std::vector<int64_t>{-1, 5}}, {"dims", std::vector<int64_t>{1, 2}}}),
                                   {f32({2, 3, 4, 2})}, {iota(48)}});
  const std::vector<float> y = h.forward();
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int c = 0; c < 2; ++c)
          ASSERT_EQ(y[((n * 3 + (i + 2) % 3) * 4 + (j + 1) % 4) * 2 + c],
                    static_cast<float>(((n * 3 + i) * 4 + j) * 2 + c + 1));
  EXPECT_EQ(h.gradients(y)[0], iota(48));
  OpHarness one(builtin_registry(), {"roll", attr_map({{"shifts", std::vector<int64_t>{1}}, {"dims", std::vector<int64_t>{2}}}),
                                     {f32({1, 2, 3})}, {iota(6)}});
  EXPECT_EQ(one.forward(), (std::vector<float>{3, 1, 2, 6, 4, 5}));
  EXPECT_HAS(case_error({"roll", attr_map({{"shifts", std::vector<int64_t>{1, 1}}, {"dims", std::vector<int64_t>{1, 3}}}),
                         {f32({1, 2, 3, 4})}}),
             "must be one axis or two adjacent ones");
  EXPECT_HAS(case_error({"roll", attr_map({{"shifts", std::vector<int64_t>{1}}, {"dims", std::vector<int64_t>{1, 2}}}),
                         {f32({1, 2, 3, 4})}}),
             "names 2 axes for 1 shifts");
  EXPECT_HAS(case_error({"roll", attr_map({{"shifts", std::vector<int64_t>{1}}, {"dims", std::vector<int64_t>{3}}}),
                         {f32({1, 2, 3})}}),
             "roll: dims [3] are not axes of [1, 2, 3]");
  EXPECT_HAS(case_error({"roll", attr_map({{"shifts", std::vector<int64_t>{1}}, {"dims", std::vector<int64_t>{0}}}),
                         {f32({1, 2, 3})}}),
             "out of range");
}

// Row 0 of each sample is the weight, the rest x; dx is dy's rows 1.., dweight the sum over n of
// dy's rows 0; channel_slice takes rows along T of tokens (x[:, 0]).
TEST(ClassToken, PrependsItsWeightAndSumsItsGradientOverTheBatch) {
  OpHarness h(builtin_registry(), {"class_token", {}, {f32({2, 2, 3})}, {iota(12)}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 3, 3}));
  const std::vector<float> w = {-1, -2, -3};
  h.set_param(0, w);
  EXPECT_EQ(h.forward(), (Floats{-1, -2, -3, 1, 2, 3, 4, 5, 6, -1, -2, -3, 7, 8, 9, 10, 11, 12}));
  const auto g = h.gradients(iota(18));
  EXPECT_EQ(g[0], (Floats{4, 5, 6, 7, 8, 9, 13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(g[1], (Floats{1 + 10, 2 + 11, 3 + 12}));
  OpHarness first(builtin_registry(), {"channel_slice", attr_map({{"offset", 0}, {"channels", 1}}),
                                       {f32({2, 3, 2})}, {iota(12)}});
  EXPECT_EQ(first.output_desc().shape, (Shape{2, 1, 2}));
  EXPECT_EQ(first.forward(), (Floats{1, 2, 7, 8}));
}

TEST(ChannelOps, Errors) {
  EXPECT_HAS(case_error({"channel_shuffle", {}, {f32({1, 4, 2, 2})}}), "'groups': is required");
  EXPECT_HAS(case_error({"transpose", {}, {f32({1, 4, 2, 2})}}), "'perm': is required");
  EXPECT_HAS(case_error({"class_token", {}, {f32({2, 4})}}), "class_token expects tokens [N, T, C], got [2, 4]");
  EXPECT_HAS(case_error({"transpose", attr_map({{"perm", std::vector<int64_t>{0, 3, 2, 1}}}), {f32({1, 4, 2, 2})}}),
             "swap two adjacent blocks of the other axes");
  EXPECT_HAS(case_error({"transpose", attr_map({{"perm", std::vector<int64_t>{1, 0, 2}}}), {f32({2, 3, 4})}}),
             "keep the batch first");
  EXPECT_HAS(case_error({"transpose", attr_map({{"perm", std::vector<int64_t>{0, 2, 1}}}), {f32({1, 4, 2, 2})}}),
             "does not permute an input [1, 4, 2, 2]");
  EXPECT_HAS(case_error({"channel_shuffle", attr_map({{"groups", 4}}), {f32({1, 6, 2, 2})}}),
             "channels C = 6 are not divisible by groups 4");
  EXPECT_HAS(case_error({"channel_shuffle", attr_map({{"groups", 0}}), {f32({1, 6, 2, 2})}}), "out of range");
  EXPECT_HAS(case_error({"channel_shuffle", attr_map({{"groups", 2}}), {f32({2, 6})}}), "[N, C, H, W]");
  EXPECT_HAS(case_error({"channel_slice", attr_map({{"offset", 3}, {"channels", 2}}), {f32({1, 4, 2, 2})}}),
             "channels [3, 5) are outside the input's 4");
  EXPECT_HAS(case_error({"channel_slice", attr_map({{"channels", 2}}), {f32({1, 4, 2, 2})}}),
             "'offset': is required");
  EXPECT_HAS(case_error({"channel_slice", attr_map({{"offset", 0}, {"channels", 1}}), {f32({1, 4, 2, 2, 2})}}),
             "[N, C, H, W], [N, T, C] (rows along T) or [N, F]");
  EXPECT_HAS(case_error({"channel_slice", attr_map({{"offset", 0}, {"channels", 1}, {"chanels", 1}}),
                         {f32({1, 4, 2, 2})}}),
             "unknown field");
}

}  // namespace
}  // namespace remat
