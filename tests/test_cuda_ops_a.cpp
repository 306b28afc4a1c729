// CUDA vs CPU for conv2d, dense, batchnorm and pooling (forward and every backward node, via
// tests/cuda_op_harness.h): every case of the CPU suites for these ops, rerun bit-identity,
// batchnorm's running statistics (updated on first computation only) and conv workspace
// reporting. Every test skips without a usable CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "tests/cuda_op_harness.h"
#include "tests/op_cases.h"

namespace remat {
namespace {

using Floats = std::vector<float>;
using Ints = std::vector<int64_t>;

using CudaConv2d = CudaOpTest;
using CudaDense = CudaOpTest;
using CudaBatchNorm = CudaOpTest;
using CudaPool = CudaOpTest;

// Matches the CPU within the tolerance table, and a second full run is bit-identical.
void expect_cuda_matches(Backend& cuda, CudaOpHarness& h, int steps = 1) {
  EXPECT_TRUE(h.compare_with_cpu(cuda, steps));
  EXPECT_TRUE(h.check_rerun_identical(cuda, steps));
}

// n distinct values in [-0.5, 0.5), scrambled (no ties in any pooling window).
Floats distinct_values(int n) {
  Floats v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i * 37) % n) / n - 0.5f;
  return v;
}

bool bit_equal(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- conv2d ----------------------------------------------------------------------------------


TEST_F(CudaConv2d, GradientCasesMatchCpu) {  // tests/test_ops_a.cpp Conv2d.GradientsMatch...
  std::vector<ConvCase> cases = conv2d_cases();
  cases.insert(cases.end(), {
      // Determinism.RerunIsBitIdentical's convolutions.
      {"rerun_stride2_relu", attr_map({{"filters", 8}, {"kernel", 3}, {"padding", 1}, {"stride", 2}, {"activation", std::string("relu")}}),
       {4, 6, 17, 17}, 1},
      {"rerun_depthwise", attr_map({{"filters", 6}, {"kernel", 3}, {"groups", 6}}), {2, 6, 9, 9}, 1},
  });
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    CudaOpHarness h(registry(), {"conv2d", c.attrs, {f32(c.x)}, {}, 11});
    for (float& v : h.host().input(0)) v *= c.x_scale;
    expect_cuda_matches(cuda(), h);
  }
}

// tests/test_ops_a.cpp's hand-computed forward cases (x = 1..9 or 1..8), forward and backward.
TEST_F(CudaConv2d, HandComputedCasesMatchCpu) {
  struct Hand {
    const char* name;
    AttrMap attrs;
    Shape x;
    Floats xv, w, b;
  };
  const Floats x9 = {1, 2, 3, 4, 5, 6, 7, 8, 9}, x8 = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<Hand> cases = {
      {"bias", attr_map({{"filters", 1}, {"kernel", 2}}), {1, 1, 3, 3}, x9, {1, 2, 3, 4}, {0.5f}},
      {"stride_pad", attr_map({{"filters", 1}, {"kernel", 2}, {"stride", 2}, {"padding", 1}, {"bias", false}}),
       {1, 1, 3, 3}, x9, {1, 2, 3, 4}, {}},
      {"dilation", attr_map({{"filters", 1}, {"kernel", 2}, {"dilation", 2}, {"bias", false}}), {1, 1, 3, 3}, x9,
       {1, 2, 3, 4}, {}},
      {"groups_pointwise", attr_map({{"filters", 2}, {"kernel", 1}, {"groups", 2}}), {1, 2, 2, 2}, x8, {2, -1},
       {1, 0}},
      {"pointwise_mix", attr_map({{"filters", 1}, {"kernel", 1}, {"bias", false}}), {1, 2, 2, 2}, x8, {1, 10}, {}},
      {"depthwise", attr_map({{"filters", 2}, {"kernel", 2}, {"groups", 2}, {"bias", false}}), {1, 2, 2, 2}, x8,
       {1, 2, 3, 4, 1, 0, 0, 1}, {}},
      {"fused_relu", attr_map({{"filters", 1}, {"kernel", 2}, {"activation", std::string("relu")}}), {1, 1, 3, 3},
       x9, {1, 2, 3, 4}, {-50}},
      {"fused_relu6", attr_map({{"filters", 1}, {"kernel", 2}, {"activation", std::string("relu6")}}),
       {1, 1, 3, 3}, x9, {1, 2, 3, 4}, {-50}},
      {"multi_image", attr_map({{"filters", 2}, {"kernel", 2}}), {2, 2, 2, 2},
       {1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 0, 0, 0},
       {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0}, {0, 100}},
  };
  for (const Hand& c : cases) {
    SCOPED_TRACE(c.name);
    CudaOpHarness h(registry(), {"conv2d", c.attrs, {f32(c.x)}, {c.xv}});
    h.host().set_param(0, c.w);
    if (!c.b.empty()) h.host().set_param(1, c.b);
    expect_cuda_matches(cuda(), h);
  }
}

// The measured algorithm choice reports its workspace, within the limit; a limit of 0 still
// gives a (zero-workspace) forward algorithm.
TEST_F(CudaConv2d, WorkspaceReportedWithinLimit) {
  const int64_t limit = int64_t{64} << 20;
  std::string why;
  CudaOptions opt;
  opt.workspace_limit = limit;
  std::unique_ptr<Backend> b = make_cuda_backend(0, &why, opt);
  ASSERT_TRUE(b) << why;
  CudaOpHarness h(registry(), {"conv2d", attr_map({{"filters", 64}, {"kernel", 3}, {"padding", 1}}),
                               {f32({8, 64, 32, 32})}});
  const Graph& g = h.graph();
  int64_t total = 0;
  for (const Node& n : g.nodes) {
    if (n.op == "conv2d_grad_bias") continue;
    ExecContext ctx;  // shapes only: data pointers stay null
    ctx.node = &n;
    for (ValueId v : n.inputs) ctx.inputs.push_back(TensorView{&g.value(v).desc, nullptr});
    ctx.output = TensorView{&g.value(n.output).desc, nullptr};
    const int64_t ws = b->workspace_bytes(registry().get(n.op), ctx);
    EXPECT_GE(ws, 0) << n.op;
    EXPECT_LE(ws, limit) << n.op;
    EXPECT_EQ(ws, b->workspace_bytes(registry().get(n.op), ctx)) << n.op << ": cached choice";
    total += ws;
  }
  // The fastest deterministic algorithms of a 3x3 conv over 64 channels use scratch in at
  // least one of the three passes.
  EXPECT_GT(total, 0);
  expect_cuda_matches(*b, h);

  opt.workspace_limit = 0;
  std::unique_ptr<Backend> none = make_cuda_backend(0, &why, opt);
  ASSERT_TRUE(none) << why;
  const Node& fwd = g.nodes.at(0);
  ExecContext ctx;
  ctx.node = &fwd;
  for (ValueId v : fwd.inputs) ctx.inputs.push_back(TensorView{&g.value(v).desc, nullptr});
  ctx.output = TensorView{&g.value(fwd.output).desc, nullptr};
  EXPECT_EQ(none->workspace_bytes(registry().get("conv2d"), ctx), 0);
}

// ---- dense -----------------------------------------------------------------------------------

TEST_F(CudaDense, HandComputedCasesMatchCpu) {  // x = [[1, 2, 3], [4, 5, 6]]
  const std::vector<AttrMap> cases = {
      attr_map({{"units", 2}}),
      attr_map({{"units", 2}, {"bias", false}}),
      attr_map({{"units", 2}, {"activation", std::string("relu")}}),
      attr_map({{"units", 2}, {"activation", std::string("relu6")}}),
  };
  for (const AttrMap& a : cases) {
    CudaOpHarness h(registry(), {"dense", a, {f32({2, 3})}, {{1, 2, 3, 4, 5, 6}}});
    h.host().set_param(0, {1, 0, -1, 0.5f, 0.5f, 0.5f});
    if (h.host().num_inputs() == 3) h.host().set_param(1, {1, -1});
    expect_cuda_matches(cuda(), h);
  }
}

TEST_F(CudaDense, GradientCasesMatchCpu) {
  const std::vector<std::pair<const char*, AttrMap>> cases = {
      {"bias", attr_map({{"units", 5}})},
      {"no_bias", attr_map({{"units", 4}, {"bias", false}})},
      {"relu", attr_map({{"units", 5}, {"activation", std::string("relu")}})},
      {"relu6", attr_map({{"units", 5}, {"activation", std::string("relu6")}, {"bias", false}})},
      {"constant_map", attr_map({{"units", 5}, {"learned", false}})},  // a resize's map
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    CudaOpHarness h(registry(), {"dense", c.second, {f32({3, 6})}, {}, 21});
    if (std::string(c.first) == "relu6")
      for (float& v : h.host().input(0)) v *= 8;
    expect_cuda_matches(cuda(), h);
  }
  CudaOpHarness big(registry(), {"dense", attr_map({{"units", 33}}), {f32({16, 70})}});
  expect_cuda_matches(cuda(), big);
}

// Staged NHWC convolutions in FP32 (Note [staged NHWC convolutions]) forced, whole batch and
// in chunks (a 160 KB workspace limit: 2 samples, then 1): every pass against the CPU.
TEST_F(CudaConv2d, StagedNhwcMatchesCpu) {
  for (int64_t limit : {int64_t{1} << 30, int64_t{160} << 10}) {
    SCOPED_TRACE("workspace limit " + std::to_string(limit));
    std::unique_ptr<Backend> nhwc = staged_nhwc_backend(limit);
    ASSERT_TRUE(nhwc);
    CudaOpHarness same(registry(), {"conv2d", attr_map({{"filters", 16}, {"kernel", 3}, {"padding", 1}}),
                                    {f32({4, 8, 12, 12})}});
    expect_cuda_matches(*nhwc, same);
    CudaOpHarness strided(registry(), {"conv2d", attr_map({{"filters", 8}, {"kernel", 3}, {"stride", 2}}),
                                       {f32({4, 16, 23, 23})}});
    expect_cuda_matches(*nhwc, strided);
  }
}

// 1 x 1 convolutions as GEMMs in FP32 (Note [1x1 convolutions as GEMMs]) forced: with bias and
// a fused relu, without bias, an odd plane, on NCHW and on channels-last tensors (one GEMM over
// the batch); stride 2 and 3 x 3 fall back to cuDNN. Every pass (forward, data and weight
// gradients, all three as GEMMs) against the CPU.
TEST_F(CudaConv2d, OneByOneGemmMatchesCpu) {
  std::unique_ptr<Backend> gemm = gemm_conv_backend();
  ASSERT_TRUE(gemm);
  const std::vector<OpCase> cases = {
      {"conv2d",
       attr_map({{"filters", 24}, {"kernel", 1}, {"activation", std::string("relu")}}),
       {f32({3, 16, 7, 9})}},
      {"conv2d", attr_map({{"filters", 8}, {"kernel", 1}, {"bias", false}}), {f32({2, 40, 5, 5})}},
      {"conv2d",
       attr_map({{"filters", 24},
                 {"kernel", 1},
                 {"activation", std::string("relu")},
                 {"data_format", std::string("channels_last")}}),
       {f32({3, 7, 9, 16})}},
      {"conv2d",
       attr_map({{"filters", 8},
                 {"kernel", 1},
                 {"bias", false},
                 {"data_format", std::string("channels_last")}}),
       {f32({2, 5, 5, 40})}},
      {"conv2d", attr_map({{"filters", 8}, {"kernel", 1}, {"stride", 2}}), {f32({2, 6, 9, 9})}},
      {"conv2d", attr_map({{"filters", 8}, {"kernel", 3}, {"padding", 1}}), {f32({2, 6, 9, 9})}}};
  for (const OpCase& c : cases) {
    CudaOpHarness h(registry(), c);
    expect_cuda_matches(*gemm, h);
  }
}

// ---- batchnorm -------------------------------------------------------------------------------

TEST_F(CudaBatchNorm, ForwardCasesMatchCpu) {
  CudaOpHarness four(registry(), {"batchnorm", {}, {f32({4, 1})}, {{1, 2, 3, 4}}});
  four.host().set_param(0, {2.0f});
  four.host().set_param(1, {0.5f});
  expect_cuda_matches(cuda(), four);
  expect_cuda_matches(cuda(), four, 2);  // two steps: running statistics updated twice

  CudaOpHarness nchw(registry(), {"batchnorm", attr_map({{"momentum", 0.5}}), {f32({2, 2, 1, 2})},
                                  {{1, 3, 10, 20, 5, 7, 30, 40}}});
  nchw.host().set_param(0, {1, 1});
  nchw.host().set_param(1, {0, 0});
  expect_cuda_matches(cuda(), nchw);

  CudaOpHarness inf(registry(), {"batchnorm", attr_map({{"mode", std::string("inference")}}),
                                 {f32({3, 1})}, {{1, 2, 7}}});
  inf.host().set_param(0, {3.0f});
  inf.host().set_param(1, {-1.0f});
  inf.host().set_param(2, {1.0f});
  inf.host().set_param(3, {4.0f});
  expect_cuda_matches(cuda(), inf);
}

TEST_F(CudaBatchNorm, GradientCasesMatchCpu) {
  CudaOpHarness nchw(registry(), {"batchnorm", {}, {f32({2, 3, 2, 2})}});
  expect_cuda_matches(cuda(), nchw);
  CudaOpHarness features(registry(), {"batchnorm", {}, {f32({5, 3})}, {}, 3});
  expect_cuda_matches(cuda(), features);
  CudaOpHarness inf(registry(), {"batchnorm", attr_map({{"mode", std::string("inference")}}),
                                 {f32({2, 2, 2, 2})}});
  inf.host().set_param(2, {0.3f, -0.2f});
  inf.host().set_param(3, {0.5f, 2.0f});
  expect_cuda_matches(cuda(), inf);
  CudaOpHarness larger(registry(), {"batchnorm", {}, {f32({8, 16, 7, 7})}, {}, 4});
  expect_cuda_matches(cuda(), larger);
  // 28 x 28 planes (cuDNN forward, our dx) and 56 x 56 ones (our kernels, Note [batchnorm on
  // the GPU]), with
  // several slices per channel (Note [channel reductions]); the running statistics over two
  // steps; without a learned scale.
  CudaOpHarness mid(registry(), {"batchnorm", {}, {f32({8, 64, 28, 28})}, {}, 5});
  expect_cuda_matches(cuda(), mid);
  expect_cuda_matches(cuda(), mid, 2);
  CudaOpHarness large(registry(), {"batchnorm", {}, {f32({4, 16, 56, 56})}, {}, 6});
  expect_cuda_matches(cuda(), large);
  expect_cuda_matches(cuda(), large, 2);
  CudaOpHarness unscaled(registry(), {"batchnorm", attr_map({{"scale", false}}), {f32({2, 8, 60, 60})}, {}, 8});
  expect_cuda_matches(cuda(), unscaled);
}

// Our kernels forced on every plane (REMAT_BN_KERNELS=own): packs of 4 floats (16 x 16 and
// 14 x 14 planes) and of 1 (7 x 7; [N, F] as 1 x 1) (Note [packed channel walks]); running
// statistics over two steps; without a learned scale.
TEST_F(CudaBatchNorm, OwnKernelsOnEveryPackWidth) {
  std::unique_ptr<Backend> own = bn_kernels_backend(BnKernels::Own);
  ASSERT_TRUE(own);
  uint64_t seed = 20;
  for (const Shape& s : {Shape{4, 16, 16, 16}, Shape{4, 32, 14, 14}, Shape{8, 16, 7, 7}, Shape{64, 48}}) {
    CudaOpHarness h(registry(), {"batchnorm", {}, {f32(s)}, {}, seed++});
    expect_cuda_matches(*own, h);
    expect_cuda_matches(*own, h, 2);
  }
  CudaOpHarness unscaled(registry(), {"batchnorm", attr_map({{"scale", false}}), {f32({2, 8, 10, 10})}, {}, 30});
  expect_cuda_matches(*own, unscaled);
}

// A fused relu / relu6 (Note [batchnorm activation]): applied before the store by our kernels
// (NCHW and NHWC) and over cuDNN's output, in train and inference mode, fp32 and bf16, with
// scales that reach past 6 and below 0. Node by node against the CPU (Note [node-wise
// comparison]: a value near 0 or 6 that the two round to either side must not carry another
// mask into the batch norm's gradients), reruns bit-identical.
TEST_F(CudaBatchNorm, FusedActivationMatchesTheCpu) {
  std::unique_ptr<Backend> own = bn_kernels_backend(BnKernels::Own);
  std::unique_ptr<Backend> cudnn = bn_kernels_backend(BnKernels::Cudnn);
  ASSERT_TRUE(own && cudnn);
  for (const char* act : {"relu", "relu6"}) {
    for (const char* mode : {"train", "inference"}) {
      for (const char* layout : {"channels_first", "channels_last"}) {
        AttrMap a = attr_map({{"mode", std::string(mode)}, {"activation", std::string(act)}});
        const bool last = std::string(layout) == "channels_last";
        if (last) a.set("data_format", std::string("channels_last"));
        const OpCase c{"batchnorm",
                       a,
                       {f32(last ? Shape{4, 16, 16, 8} : Shape{4, 8, 16, 16})},
                       {},
                       40};  // 8 channels either way
        for (Backend* b : {own.get(), cudnn.get()}) {
          for (const OpCase& k : {c, as_bf16(c)}) {
            SCOPED_TRACE(std::string(act) + " " + mode + " " + layout + " " + b->name() +
                         (k.inputs[0].dtype == DType::BF16 ? " bf16" : " fp32"));
            CudaOpHarness h(registry(), k);
            h.host().set_param(0, {4.0f, -3.0f, 0.5f, 7.0f, 1.0f, 2.0f, -6.5f, 3.0f});
            EXPECT_TRUE(h.compare_nodewise_with_cpu(*b));
            EXPECT_TRUE(h.check_rerun_identical(*b));
          }
        }
      }
    }
  }
}

// A recomputation (first_compute false) leaves the running statistics alone and gives the
// same y, bit for bit, as the first computation.
TEST_F(CudaBatchNorm, RecomputeDoesNotUpdateRunningStats) {
  CudaOpHarness h(registry(), {"batchnorm", {}, {f32({4, 3, 3, 3})}, {}, 7});
  const Graph& g = h.graph();
  const Node& fwd = g.nodes.at(0);
  const size_t y = static_cast<size_t>(fwd.output);
  const size_t rm = static_cast<size_t>(fwd.inputs.at(3)), rv = static_cast<size_t>(fwd.inputs.at(4));
  GraphRun first = h.run_graph(cuda());
  h.first_compute = false;
  GraphRun again = h.run_graph(cuda());
  EXPECT_TRUE(bit_equal(first.f[y], again.f[y]));
  // The harness starts every run from the same inputs: the recomputation must leave the
  // running statistics as they came in; the first computation did update them.
  const Floats rm0 = h.host().input(3), rv0 = h.host().input(4);
  EXPECT_EQ(again.f[rm], rm0);
  EXPECT_EQ(again.f[rv], rv0);
  EXPECT_NE(first.f[rm], rm0);
  EXPECT_NE(first.f[rv], rv0);
}

// ---- pooling ---------------------------------------------------------------------------------

const Floats kGrid = {1, 5, 2, 0, 3, 4, 8, 6, 9, 7, 1, 2, 0, 3, 11, 4};

TEST_F(CudaPool, MaxPoolCasesMatchCpu) {
  const AttrMap k2 = attr_map({{"kernel", int64_t(2)}});
  const AttrMap k3s2p1 = attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}});
  CudaOpHarness grid(registry(), {"maxpool", k2, {f32({1, 1, 4, 4})}, {kGrid}});
  expect_cuda_matches(cuda(), grid);
  Floats neg(kGrid);
  for (float& v : neg) v = -v - 1;
  CudaOpHarness padded(registry(), {"maxpool", k3s2p1, {f32({1, 1, 4, 4})}, {neg}});
  expect_cuda_matches(cuda(), padded);  // padding never wins
  CudaOpHarness overlap(registry(),
                        {"maxpool", attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(1)}, {"padding", int64_t(1)}}),
                         {f32({2, 2, 4, 5})}, {distinct_values(80)}});
  expect_cuda_matches(cuda(), overlap);
  CudaOpHarness plain(registry(), {"maxpool", k2, {f32({1, 3, 4, 4})}, {distinct_values(48)}});
  expect_cuda_matches(cuda(), plain);
}

// The CPU gives a tied window's gradient to its first maximum in scan order; cuDNN's
// deterministic max pooling must do the same for the two paths to agree.
TEST_F(CudaPool, MaxPoolTiesMatchCpu) {
  CudaOpHarness t(registry(), {"maxpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 2, 4})},
                               {{2, 3, 7, 7, 2, 3, 7, 7}}});
  t.set_dy({10, 20});
  expect_cuda_matches(cuda(), t);
}

TEST_F(CudaPool, AvgPoolCasesMatchCpu) {
  const AttrMap k3s2p1 = attr_map({{"kernel", int64_t(3)}, {"stride", int64_t(2)}, {"padding", int64_t(1)}});
  CudaOpHarness grid(registry(), {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 4, 4})}, {kGrid}});
  expect_cuda_matches(cuda(), grid);
  CudaOpHarness padded(registry(), {"avgpool", k3s2p1, {f32({1, 1, 4, 4})}, {kGrid}});
  expect_cuda_matches(cuda(), padded);  // divisor 9 at the edges too
  CudaOpHarness edge(registry(), {"avgpool", attr_map({{"kernel", int64_t(2)}}), {f32({1, 1, 5, 5})}});
  edge.set_dy({4, 8, 12, 16});
  expect_cuda_matches(cuda(), edge);  // uncovered last row / column get 0
  CudaOpHarness rnd(registry(), {"avgpool", k3s2p1, {f32({2, 2, 5, 4})}});
  expect_cuda_matches(cuda(), rnd);
}

TEST_F(CudaPool, GlobalAvgPoolCasesMatchCpu) {
  CudaOpHarness h(registry(), {"global_avgpool", {}, {f32({1, 2, 2, 2})}, {{1, 2, 3, 4, -1, 5, 0, 0}}});
  h.set_dy({4, -8});
  expect_cuda_matches(cuda(), h);
  CudaOpHarness r(registry(), {"global_avgpool", {}, {f32({2, 3, 3, 2})}});
  expect_cuda_matches(cuda(), r);
  CudaOpHarness big(registry(), {"global_avgpool", {}, {f32({4, 8, 14, 14})}});
  expect_cuda_matches(cuda(), big);
}

}  // namespace
}  // namespace remat
