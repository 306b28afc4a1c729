// Tests for the transformer ops (embedding, position_embedding, add_constant, mul_table,
// relative_position_bias, layernorm, gelu, dense over rank 3, matmul, split_heads /
// merge_heads, softmax with the causal mask, token_xent): shapes and their errors, forward values
// computed by hand (in the comments), gradients against central differences
// (tests/op_harness.h), and the masks the causal softmax and the ignore index apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/registry.h"
#include "runtime/core/check.h"
#include "tests/op_cases.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Floats = std::vector<float>;

TEST(TransformerOps, GradientsMatchFiniteDifferences) {
  for (const TransformerCase& tc : transformer_cases()) {
    SCOPED_TRACE(tc.name);
    OpHarness h(builtin_registry(), tc.c);
    EXPECT_TRUE(h.check_gradients(tc.tol));
  }
}

// ---- embedding ------------------------------------------------------------------------------

// weight rows: row v = [10 v, 10 v + 1]; ids [[2, 0, 2]].
TEST(Embedding, ForwardAndDeterministicGradientByHand) {
  OpHarness h(builtin_registry(), {"embedding", attr_map({{"vocab", 4}, {"dim", 2}}), {i32({1, 3})}, {{2, 0, 2}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1, 3, 2}));
  ASSERT_EQ(h.param_specs().size(), 1u);
  EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{4, 2}));
  EXPECT_EQ(h.param_specs()[0].role, ParamRole::Embedding);
  EXPECT_EQ(h.param_specs()[0].init, InitKind::Normal);
  EXPECT_DOUBLE_EQ(h.param_specs()[0].init_std, 0.02);
  h.set_param(0, {0, 1, 10, 11, 20, 21, 30, 31});
  EXPECT_EQ(h.forward(), (Floats{20, 21, 0, 1, 20, 21}));
  // dW[2] = dy[0] + dy[2], dW[0] = dy[1], rows 1 and 3 zero; ids get no gradient.
  auto g = h.gradients({1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(g[0].empty());
  EXPECT_EQ(g[1], (Floats{3, 4, 0, 0, 6, 8, 0, 0}));
}

TEST(Embedding, ErrorsNameTheToken) {
  EXPECT_HAS(case_error({"embedding", attr_map({{"vocab", 4}, {"dim", 2}}), {f32({1, 3})}}),
             "embedding expects int32 token ids");
  EXPECT_HAS(case_error({"embedding", attr_map({{"vocab", 4}}), {i32({1, 3})}}), "field 'dim'");
  OpHarness h(builtin_registry(), {"embedding", attr_map({{"vocab", 4}, {"dim", 2}}), {i32({2, 3})},
                           {{0, 1, 2, 3, 4, 0}}});
  try {
    h.forward();
    FAIL() << "token 4 of vocabulary 4 was accepted";
  } catch (const UserError& e) {
    EXPECT_HAS(e.what(), "token id 4 at sample 1, position 1 is outside the vocabulary [0, 4)");
  }
}

// ---- position_embedding ---------------------------------------------------------------------

TEST(PositionEmbedding, AddsTheFirstTRowsAndSumsTheBatch) {
  // x [2, 2, 1] = [[1], [2]], [[3], [4]]; table [3, 1] = [10, 20, 30].
  OpHarness h(builtin_registry(), {"position_embedding", attr_map({{"max_len", 3}}), {f32({2, 2, 1})}, {{1, 2, 3, 4}}});
  EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{3, 1}));
  h.set_param(0, {10, 20, 30});
  EXPECT_EQ(h.forward(), (Floats{11, 22, 13, 24}));
  auto g = h.gradients({1, 2, 3, 4});
  EXPECT_EQ(g[0], (Floats{1, 2, 3, 4}));  // dx = dy
  EXPECT_EQ(g[1], (Floats{4, 6, 0}));     // rows 0, 1 summed over the batch; row 2 unused
  EXPECT_HAS(case_error({"position_embedding", attr_map({{"max_len", 3}}), {f32({1, 4, 2})}}),
             "sequence length T = 4 exceeds max_len 3");
}

// ---- add_constant ---------------------------------------------------------------------------

TEST(AddConstant, AddsTheTableToEveryLeadingIndexAndPassesTheGradientThrough) {
  // x [2, 1, 3] = [[1, 2, 3]], [[4, 5, 6]]; table [1, 3] = [10, -inf, 0.5]: an additive mask.
  const float inf = std::numeric_limits<float>::infinity();
  OpHarness h(builtin_registry(),
              {"add_constant", attr_map({{"shape", std::vector<int64_t>{1, 3}}}), {f32({2, 1, 3})},
               {{1, 2, 3, 4, 5, 6}}});
  ASSERT_EQ(h.param_specs().size(), 1u);
  EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{1, 3}));
  EXPECT_EQ(h.param_specs()[0].kind, ValueKind::Buffer);  // never trained
  h.set_param(0, {10, -inf, 0.5f});
  EXPECT_EQ(h.forward(), (Floats{11, -inf, 3.5f, 14, -inf, 6.5f}));
  auto g = h.gradients({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(g[0], (Floats{1, 2, 3, 4, 5, 6}));  // dx = dy
  for (const auto& [shape, x] : std::vector<std::pair<std::vector<int64_t>, Shape>>{
           {{2, 3}, {4, 3, 2}}, {{4}, {4, 3}}, {{4, 3}, {4, 3}}})
    EXPECT_HAS(case_error({"add_constant", attr_map({{"shape", shape}}), {f32(x)}}),
               "is not the trailing axes of");
  EXPECT_HAS(case_error({"add_constant", {}, {f32({2, 3})}}), "shape");
  // learned: a trained bias, its gradient the sum of dy over the leading axes.
  OpHarness l(builtin_registry(),
              {"add_constant", attr_map({{"shape", std::vector<int64_t>{3}}, {"learned", true}}),
               {f32({2, 1, 3})}, {{1, 2, 3, 4, 5, 6}}});
  EXPECT_EQ(l.param_specs()[0].kind, ValueKind::Param);
  EXPECT_EQ(l.param_specs()[0].suffix, "bias");
  l.set_param(0, {10, 0, -0.5f});
  EXPECT_EQ(l.forward(), (Floats{11, 2, 2.5f, 14, 5, 5.5f}));
  const auto lg = l.gradients({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(lg[0], (Floats{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(lg.at(1), (Floats{5, 7, 9}));
}

// A table ending in 1s broadcasts over the axes under them: a learned bias [2, 1, 1] of an
// image [1, 2, 2, 2] = 1..8 adds table[c] to channel c; its gradient sums each channel's dy.
TEST(AddConstant, ATableEndingInOnesBroadcastsOverTheAxesUnderThem) {
  OpHarness h(builtin_registry(),
              {"add_constant", attr_map({{"shape", std::vector<int64_t>{2, 1, 1}}, {"learned", true}}),
               {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, 5, 6, 7, 8}}});
  EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{2, 1, 1}));
  h.set_param(0, {10, -1});
  EXPECT_EQ(h.forward(), (Floats{11, 12, 13, 14, 4, 5, 6, 7}));
  const auto g = h.gradients({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(g.at(1), (Floats{1 + 2 + 3 + 4, 5 + 6 + 7 + 8}));
  // Only the table's trailing 1s broadcast: a 1 before its last entry must match.
  EXPECT_HAS(case_error({"add_constant", attr_map({{"shape", std::vector<int64_t>{1, 2}}}),
                         {f32({2, 3, 2})}}),
             "is not the trailing axes of");
}

// ---- mul_table -------------------------------------------------------------------------------

TEST(MulTable, MultipliesEveryLeadingIndexByTheTableAndSumsTheLearnedGradient) {
  // x [2, 1, 3] = [[1, 2, 3]], [[4, 5, 6]]; table [1, 3] = [10, 0, -0.5].
  const Floats x = {1, 2, 3, 4, 5, 6}, dy = {1, -1, 2, 0.5f, 3, -2};
  for (bool learned : {false, true}) {
    SCOPED_TRACE(learned);
    OpHarness h(builtin_registry(),
                {"mul_table",
                 attr_map({{"shape", std::vector<int64_t>{1, 3}}, {"learned", learned}}),
                 {f32({2, 1, 3})}, {x}});
    ASSERT_EQ(h.param_specs().size(), 1u);
    EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{1, 3}));
    EXPECT_EQ(h.param_specs()[0].kind, learned ? ValueKind::Param : ValueKind::Buffer);
    EXPECT_EQ(h.param_specs()[0].suffix, learned ? "weight" : "table");
    h.set_param(0, {10, 0, -0.5f});
    EXPECT_EQ(h.forward(), (Floats{10, 0, -1.5f, 40, 0, -3}));
    auto g = h.gradients(dy);
    EXPECT_EQ(g[0], (Floats{10, 0, -1, 5, 0, 1}));  // dx = dy table
    // dtable[k] = sum over the rows of dy x: [1 + 2, -2 + 15, 6 - 12]
    if (learned) EXPECT_EQ(g.at(1), (Floats{3, 13, -6}));
    else EXPECT_TRUE(g.at(1).empty());  // a constant: no gradient
  }
  for (const auto& [shape, xs] : std::vector<std::pair<std::vector<int64_t>, Shape>>{
           {{2, 3}, {4, 3, 2}}, {{4}, {4, 3}}, {{4, 3}, {4, 3}}})
    EXPECT_HAS(case_error({"mul_table", attr_map({{"shape", shape}}), {f32(xs)}}),
               "is not the trailing axes of");
  EXPECT_HAS(case_error({"mul_table", {}, {f32({2, 3})}}), "shape");
}

// ---- relative_position_bias -----------------------------------------------------------------

// torchvision's relative_position_index of a 2 x 2 window and of a 2 x 3 one (printed by
// torchvision.models.maxvit._get_relative_position_index), row i, column j.
const std::vector<int64_t> kIndex2x2 = {4, 3, 1, 0, 5, 4, 2, 1, 7, 6, 4, 3, 8, 7, 5, 4};
const std::vector<int64_t> kIndex2x3 = {7, 6, 5, 2, 1, 0, 8, 7, 6, 3, 2, 1, 9, 8, 7, 4, 3, 2,
                                        12, 11, 10, 7, 6, 5, 13, 12, 11, 8, 7, 6, 14, 13, 12, 9, 8, 7};

// y[l, h, i, j] = x[l, h, i, j] + table[index[i T + j], h]; dtable[r, h] sums dy over l and the
// pairs (i, j) at r.
TEST(RelativePositionBias, AddsTorchvisionsIndexedTableAndScattersItsGradient) {
  for (const auto& [window, index] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{2, 2}, kIndex2x2}, {{2, 3}, kIndex2x3}}) {
    const int64_t t = window[0] * window[1], rows = (2 * window[0] - 1) * (2 * window[1] - 1), heads = 2, lead = 3;
    const int64_t n = lead * heads * t * t;
    Floats x;
    for (int64_t e = 0; e < n; ++e) x.push_back(static_cast<float>(e + 1));
    OpHarness h(builtin_registry(), {"relative_position_bias", attr_map({{"window", window}}),
                                     {f32({lead, 1, heads, t, t})}, {x}});
    ASSERT_EQ(h.param_specs()[0].desc.shape, (Shape{rows, heads}));
    Floats table;
    for (int64_t k = 0; k < rows * heads; ++k) table.push_back(static_cast<float>(1000 * (k + 1)));
    h.set_param(0, table);
    const Floats y = h.forward();
    Floats dy(static_cast<size_t>(n));
    Floats dtable(static_cast<size_t>(rows * heads), 0.0f);
    for (int64_t e = 0; e < n; ++e) {
      const int64_t j = e % t, i = e / t % t, hh = e / (t * t) % heads;
      const int64_t r = index[static_cast<size_t>(i * t + j)];
      ASSERT_EQ(y[static_cast<size_t>(e)], static_cast<float>(e + 1) + table[static_cast<size_t>(r * heads + hh)]) << e;
      dy[static_cast<size_t>(e)] = static_cast<float>(e % 7);
      dtable[static_cast<size_t>(r * heads + hh)] += static_cast<float>(e % 7);
    }
    const auto g = h.gradients(dy);
    EXPECT_EQ(g[0], dy);
    EXPECT_EQ(g[1], dtable);
  }
  EXPECT_HAS(case_error({"relative_position_bias", attr_map({{"window", 2}}), {f32({2, 2, 3, 3})}}),
             "relative_position_bias expects scores [N, .., H, T, T] with T = 2 x 2 = 4 tokens, got [2, 2, 3, 3]");
  EXPECT_HAS(case_error({"relative_position_bias", {}, {f32({2, 2, 4, 4})}}), "'window': is required");
}

// torchvision's shifted-window mask (swin_transformer.shifted_window_attention) as it writes it:
// region ids assigned by Python slices of the padded grid, the ids of each window's tokens, then
// -100 where two tokens' ids differ. [windows][i][j].
std::vector<float> torchvision_mask(int64_t gh, int64_t gw, int64_t wh, int64_t ww, int64_t sh,
                                    int64_t sw) {
  const int64_t ph = gh * wh, pw = gw * ww, t = wh * ww;
  auto py = [](int64_t v, int64_t n) { return v < 0 ? n + v : v; };  // a[v:], a[:v] of a side of n
  auto slices = [&](int64_t w, int64_t s, int64_t n) {  // (0, -w), (-w, -s), (-s, None)
    return std::vector<std::pair<int64_t, int64_t>>{
        {0, py(-w, n)}, {py(-w, n), py(-s, n)}, {py(-s, n), n}};
  };
  std::vector<int64_t> region(static_cast<size_t>(ph * pw), 0);
  int64_t count = 0;
  for (const auto& [h0, h1] : slices(wh, sh, ph))
    for (const auto& [w0, w1] : slices(ww, sw, pw)) {
      for (int64_t r = h0; r < h1; ++r)
        for (int64_t c = w0; c < w1; ++c) region[static_cast<size_t>(r * pw + c)] = count;
      ++count;
    }
  std::vector<float> mask;
  for (int64_t win = 0; win < gh * gw; ++win)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) {
        auto id = [&](int64_t k) {
          const int64_t row = win / gw * wh + k / ww, col = win % gw * ww + k % ww;
          return region[static_cast<size_t>(row * pw + col)];
        };
        mask.push_back(id(i) == id(j) ? 0.0f : -100.0f);
      }
  return mask;
}

// With a shift: y = (x + table[index(i, j), h]) + mask[w, i, j] for window w (the axis before the
// heads), in float as PyTorch's two adds; the gradients are the unshifted op's.
TEST(RelativePositionBias, ShiftedWindowsAddTorchvisionsMaskAfterTheBias) {
  struct Case {
    std::vector<int64_t> grid, shift;
  };
  for (const Case& c : {Case{{2, 2}, {1, 1}}, Case{{2, 3}, {1, 0}}, Case{{3, 2}, {0, 1}}}) {
    SCOPED_TRACE("grid " + shape_str(c.grid) + " shift " + shape_str(c.shift));
    const int64_t wh = 2, ww = 2, t = 4, heads = 2, batch = 2, windows = c.grid[0] * c.grid[1];
    const std::vector<float> mask =
        torchvision_mask(c.grid[0], c.grid[1], wh, ww, c.shift[0], c.shift[1]);
    const int64_t n = batch * windows * heads * t * t;
    Floats x;
    for (int64_t e = 0; e < n; ++e) x.push_back(0.25f * static_cast<float>(e % 13) - 1.0f);
    OpHarness h(builtin_registry(),
                {"relative_position_bias",
                 attr_map({{"window", std::vector<int64_t>{wh, ww}},
                           {"shift", c.shift},
                           {"windows", c.grid}}),
                 {f32({batch, windows, heads, t, t})}, {x}});
    Floats table;
    for (int64_t k = 0; k < 9 * heads; ++k) table.push_back(0.1f * static_cast<float>(k + 1));
    h.set_param(0, table);
    const Floats y = h.forward();
    Floats dy(static_cast<size_t>(n));
    Floats dtable(static_cast<size_t>(9 * heads), 0.0f);
    for (int64_t e = 0; e < n; ++e) {
      const int64_t j = e % t, i = e / t % t, hh = e / (t * t) % heads;
      const int64_t w = e / (t * t * heads) % windows;
      const int64_t r = kIndex2x2[static_cast<size_t>(i * t + j)];
      const float biased = x[static_cast<size_t>(e)] + table[static_cast<size_t>(r * heads + hh)];
      ASSERT_EQ(y[static_cast<size_t>(e)], biased + mask[static_cast<size_t>((w * t + i) * t + j)])
          << e;
      dy[static_cast<size_t>(e)] = static_cast<float>(e % 7);
      dtable[static_cast<size_t>(r * heads + hh)] += static_cast<float>(e % 7);
    }
    const auto g = h.gradients(dy);
    EXPECT_EQ(g[0], dy);
    EXPECT_EQ(g[1], dtable);
    EXPECT_NE(std::count(mask.begin(), mask.end(), -100.0f), 0);
  }
  using Ints = std::vector<int64_t>;
  EXPECT_HAS(case_error({"relative_position_bias", attr_map({{"window", 2}, {"shift", Ints{1, 1}}}),
                         {f32({2, 4, 2, 4, 4})}}),
             "'windows': is required with a shift");
  EXPECT_HAS(case_error({"relative_position_bias",
                         attr_map({{"window", 2}, {"shift", Ints{2, 1}}, {"windows", 2}}),
                         {f32({2, 4, 2, 4, 4})}}),
             "a shift of [2, 1] is not inside the window [2, 2]");
  EXPECT_HAS(case_error({"relative_position_bias",
                         attr_map({{"window", 2}, {"shift", Ints{1, 1}}, {"windows", 3}}),
                         {f32({2, 4, 2, 4, 4})}}),
             "with 3 x 3 = 9 windows, got [2, 4, 2, 4, 4]");
}

// ---- layernorm ------------------------------------------------------------------------------

TEST(LayerNorm, ForwardByHand) {
  // Row [1, 2, 3, 4]: mean 2.5, biased variance 1.25, rstd = 1 / sqrt(1.25 + eps).
  OpHarness h(builtin_registry(), {"layernorm", attr_map({{"eps", 0.0}}), {f32({1, 4})}, {{1, 2, 3, 4}}});
  ASSERT_EQ(h.param_specs().size(), 2u);
  EXPECT_EQ(h.param_specs()[0].role, ParamRole::Norm);
  EXPECT_EQ(h.param_specs()[0].init, InitKind::Ones);
  h.set_param(0, {1, 2, 1, 1});
  h.set_param(1, {0, 0, 0, 5});
  const double r = 1 / std::sqrt(1.25);
  expect_near_all(h.forward(), {-1.5 * r, -0.5 * r * 2, 0.5 * r, 1.5 * r + 5}, 1e-6);
  OpHarness plain(builtin_registry(), {"layernorm", attr_map({{"affine", false}}), {f32({2, 2})}, {{0, 2, 5, 5}}});
  EXPECT_EQ(plain.num_inputs(), 1);
  // [0, 2]: mean 1, var 1 -> [-1, 1] / sqrt(1 + 1e-5); [5, 5]: var 0 -> [0, 0].
  const double s = 1 / std::sqrt(1 + 1e-5);
  expect_near_all(plain.forward(), {-s, s, 0, 0}, 1e-6);
}

TEST(LayerNorm, OverTrailingAxesEachRowSpansThemAll) {
  // axes 2 of [1, 2, 2, 2]: rows [0, 1, 2, 3] and [4, 4, 4, 8] (channels of an image, as
  // instance normalization); mean 1.5, var 1.25 and mean 5, var 3.
  OpHarness h(builtin_registry(),
              {"layernorm", attr_map({{"axes", 2}, {"eps", 0.0}}), {f32({1, 2, 2, 2})}, {{0, 1, 2, 3, 4, 4, 4, 8}}});
  ASSERT_EQ(h.param_specs().size(), 2u);
  EXPECT_EQ(h.param_specs()[0].desc.shape, (Shape{2, 2}));
  h.set_param(0, {1, 1, 1, 2});
  h.set_param(1, {0, 0, 0, 0});
  const double a = 1 / std::sqrt(1.25), b = 1 / std::sqrt(3.0);
  expect_near_all(h.forward(), {-1.5 * a, -0.5 * a, 0.5 * a, 1.5 * a * 2, -b, -b, -b, 3 * b * 2}, 1e-6);
  EXPECT_HAS(case_error({"layernorm", attr_map({{"axes", 2}}), {f32({4, 5})}}),
             "layernorm over the last 2 dimension(s) needs an input of rank 3 or more");
  // The same rows as 2 groups of the channels of [2, 2, 2] (nn.GroupNorm's normalization).
  OpHarness g(builtin_registry(),
              {"layernorm", attr_map({{"axes", 3}, {"groups", 2}, {"affine", false}, {"eps", 0.0}}),
               {f32({1, 2, 2, 2})}, {{0, 1, 2, 3, 4, 4, 4, 8}}});
  EXPECT_EQ(g.num_inputs(), 1);
  expect_near_all(g.forward(), {-1.5 * a, -0.5 * a, 0.5 * a, 1.5 * a, -b, -b, -b, 3 * b}, 1e-6);
  EXPECT_HAS(case_error({"layernorm", attr_map({{"axes", 3}, {"groups", 3}, {"affine", false}}),
                         {f32({1, 2, 2, 2})}}),
             "layernorm with groups 3 needs the first normalized dimension divisible by it");
  EXPECT_HAS(case_error({"layernorm", attr_map({{"axes", 3}, {"groups", 2}}), {f32({1, 2, 2, 2})}}),
             "needs affine: false");
}

// ---- gelu -----------------------------------------------------------------------------------

TEST(Gelu, TanhApproximationByHand) {
  OpHarness h(builtin_registry(), {"gelu", {}, {f32({4})}, {{0, 1, -1, 3}}});
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): gelu(1) = 0.841192, gelu(-1) = -0.158808,
  // gelu(3) = 2.996363 (torch.nn.functional.gelu(x, approximate='tanh')).
  expect_near_all(h.forward(), {0, 0.841191991, -0.158808009, 2.996362608}, 2e-7);
}

// ---- matmul ---------------------------------------------------------------------------------

TEST(Matmul, TransposesAndScaleByHand) {
  // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]].
  struct Want {
    bool ta, tb;
    double scale;
    Floats c;
  };
  const std::vector<Want> wants = {
      {false, false, 1, {19, 22, 43, 50}},    // A B
      {false, true, 1, {17, 23, 39, 53}},     // A B^T
      {true, false, 1, {26, 30, 38, 44}},     // A^T B
      {true, true, 0.5, {11.5f, 15.5f, 17, 23}},  // (A^T B^T) / 2 = (B A)^T / 2
  };
  for (const Want& w : wants) {
    OpHarness h(builtin_registry(), {"matmul",
                             attr_map({{"transpose_a", w.ta}, {"transpose_b", w.tb}, {"scale", w.scale}}),
                             {f32({1, 2, 2}), f32({1, 2, 2})},
                             {{1, 2, 3, 4}, {5, 6, 7, 8}}});
    EXPECT_EQ(h.forward(), w.c) << w.ta << w.tb;
  }
}

TEST(Matmul, ShapesCostAndErrors) {
  OpHarness h(builtin_registry(), {"matmul", attr_map({{"transpose_b", true}}), {f32({2, 3, 4, 8}), f32({2, 3, 5, 8})}});
  EXPECT_EQ(h.output_desc().shape, (Shape{2, 3, 4, 5}));
  std::vector<TensorDesc> in{h.input_desc(0), h.input_desc(1)};
  EXPECT_DOUBLE_EQ(h.op().cost(*h.node().typed, in, h.output_desc()).flops, 2.0 * 6 * 4 * 5 * 8);
  EXPECT_HAS(case_error({"matmul", {}, {f32({2, 3, 4}), f32({3, 4, 5})}}), "batch dimensions differ");
  EXPECT_HAS(case_error({"matmul", {}, {f32({3, 4}), f32({5, 6})}}), "inner dimensions differ");
  EXPECT_HAS(case_error({"matmul", {}, {f32({3, 4}), f32({2, 4, 6})}}), "same rank");
}

// ---- split_heads / merge_heads --------------------------------------------------------------

TEST(Heads, SplitAndMergeByHandAndRoundTrip) {
  // x [1, 2, 4] = [[0, 1, 2, 3], [4, 5, 6, 7]], 2 heads of D = 2: head 0 sees channels 0, 1.
  OpHarness s(builtin_registry(), {"split_heads", attr_map({{"heads", 2}}), {f32({1, 2, 4})}, {{0, 1, 2, 3, 4, 5, 6, 7}}});
  EXPECT_EQ(s.output_desc().shape, (Shape{1, 2, 2, 2}));
  const Floats split = s.forward();
  EXPECT_EQ(split, (Floats{0, 1, 4, 5, 2, 3, 6, 7}));
  OpHarness m(builtin_registry(), {"merge_heads", {}, {f32({1, 2, 2, 2})}, {split}});
  EXPECT_EQ(m.output_desc().shape, (Shape{1, 2, 4}));
  EXPECT_EQ(m.forward(), (Floats{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_HAS(case_error({"split_heads", attr_map({{"heads", 3}}), {f32({1, 2, 4})}}), "not divisible by heads 3");
  EXPECT_HAS(case_error({"merge_heads", {}, {f32({2, 4})}}), "merge_heads expects [N, H, T, D]");
}

// ---- softmax --------------------------------------------------------------------------------

TEST(Softmax, RowsAndTheCausalMaskByHand) {
  // Rows [0, ln 3] -> [1/4, 3/4]; causal [2, 2] scores: row 0 sees key 0 only.
  const float l3 = static_cast<float>(std::log(3.0));
  OpHarness h(builtin_registry(), {"softmax", {}, {f32({1, 2})}, {{0, l3}}});
  expect_near_all(h.forward(), {0.25, 0.75}, 1e-6);
  OpHarness c(builtin_registry(), {"softmax", attr_map({{"causal", true}}), {f32({1, 2, 2})}, {{5, 100, 0, l3}}});
  expect_near_all(c.forward(), {1, 0, 0.25, 0.75}, 1e-6);
  EXPECT_HAS(case_error({"softmax", attr_map({{"causal", true}}), {f32({2, 3, 4})}}), "square scores");
}

// The mask is exact: masked probabilities are 0 whatever the scores (even +inf-like ones), and
// no gradient reaches a masked score, while every unmasked score gets one.
TEST(Softmax, CausalMaskGivesMaskedScoresNoGradient) {
  OpHarness h(builtin_registry(), {"softmax", attr_map({{"causal", true}}), {f32({2, 4, 4})}, {}, 9});
  for (size_t i = 0; i < h.input(0).size(); ++i)
    if ((i % 4) > (i / 4) % 4) h.input(0)[i] = 1e30f;  // huge future scores must not matter
  const Floats y = h.forward();
  const auto g = h.gradients(h.random_dy(5));
  for (size_t i = 0; i < y.size(); ++i) {
    const bool future = (i % 4) > (i / 4) % 4;
    EXPECT_EQ(y[i] == 0.0f, future) << i;
    if (future) {
      EXPECT_EQ(g[0][i], 0.0f) << i;
    } else if ((i / 4) % 4 > 0) {
      EXPECT_NE(g[0][i], 0.0f) << i;  // row 0 has one entry: dx = 0
    }
  }
}

// ---- token_xent -----------------------------------------------------------------------------

TEST(TokenXent, MeanOverCountedTokensByHand) {
  // Logits [1, 3, 2]: tokens with logits (0, 0), (0, ln 3), (9, 9); targets 0, 1, ignored.
  // Loss = (ln 2 + (ln 4 - ln 3)) / 2.
  const float l3 = static_cast<float>(std::log(3.0));
  OpHarness h(builtin_registry(), {"token_xent", attr_map({{"ignore_index", -1}}), {f32({1, 3, 2}), i32({1, 3})},
                           {{0, 0, 0, l3, 9, 9}, {0, 1, -1}}});
  EXPECT_EQ(h.output_desc().shape, (Shape{1}));
  expect_near_all(h.forward(), {(std::log(2.0) + std::log(4.0) - std::log(3.0)) / 2}, 1e-6);
  const auto g = h.gradients({});
  // (softmax - onehot) / 2 for the counted tokens, zero for the ignored one.
  expect_near_all(g[0], {-0.25, 0.25, 0.125, -0.125, 0, 0}, 1e-6);
  EXPECT_TRUE(g[1].empty());
}

TEST(TokenXent, ErrorsAndAllIgnored) {
  OpHarness bad(builtin_registry(), {"token_xent", {}, {f32({1, 2, 3}), i32({1, 2})}, {{}, {0, 3}}});
  try {
    bad.forward();
    FAIL() << "target 3 of vocabulary 3 was accepted";
  } catch (const UserError& e) {
    EXPECT_HAS(e.what(), "target 3 of sample 0, position 1 is outside the vocabulary [0, 3)");
  }
  OpHarness none(builtin_registry(), {"token_xent", {}, {f32({1, 2, 3}), i32({1, 2})}, {{}, {-100, -100}}});
  EXPECT_EQ(none.forward(), (Floats{0}));
  EXPECT_HAS(case_error({"token_xent", {}, {f32({2, 3}), i32({2})}}), "expects f32 or bf16 logits [N, T, V]");
  EXPECT_HAS(case_error({"token_xent", {}, {f32({1, 2, 3}), i32({2, 1})}}), "i32 labels [1, 2]");
  EXPECT_HAS(case_error({"token_xent", attr_map({{"ignore_index", 0}}), {f32({1, 2, 3}), i32({1, 2})}}),
             "field 'ignore_index'");
}

}  // namespace
}  // namespace remat
