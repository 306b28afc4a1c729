// CUDA paths of the non-cuDNN ops (relu*, add, concat*, flatten*, upsample*, dropout*,
// softmax_xent*, sgd, adam) against the CPU reference through the CUDA op harness, the kernels
// ops reach only indirectly (bias_grad_reduce, global average pooling, bias_act_forward) against
// CPU ops, and rerun determinism. GPU cases skip without a device; the CudaHarness cases run
// everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/core/check.h"
#include "tests/cuda_op_harness.h"
#include "tests/op_harness.h"

#ifdef REMAT_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "runtime/backends/cuda_context.h"
#endif

namespace remat {
namespace {

using Floats = std::vector<float>;

AttrMap factor(int64_t f) { return attr_map({{"factor", f}}); }
AttrMap rate(double r) { return attr_map({{"rate", r}}); }

// Forward + backward on the GPU vs the CPU, then a bit-identical rerun on the GPU.
void expect_matches_cpu(Backend& cuda, const OpRegistry& reg, OpCase c, int steps = 1) {
  const std::string what = c.op;
  CudaOpHarness h(reg, std::move(c));
  EXPECT_TRUE(h.compare_with_cpu(cuda, steps)) << what;
  EXPECT_TRUE(h.check_rerun_identical(cuda, steps)) << what;
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a UserError: ") + e.what();
  }
  return "(no error)";
}

// ---- runs everywhere: the harness itself --------------------------------------------------

TEST(CudaHarness, SkipsCleanlyOrFindsADevice) {
  std::string why;
  std::unique_ptr<Backend> cuda = make_cuda_backend(0, &why);
  if (!cuda) {
    EXPECT_FALSE(why.empty()) << "make_cuda_backend returned null without saying why";
  } else {
    EXPECT_EQ(cuda->kind(), DeviceKind::Cuda);
  }
#ifdef REMAT_HAVE_CUDA
  EXPECT_TRUE(cuda_backend_built());
#endif
}

TEST(CudaHarness, ToleranceTableCoversEveryOp) {
  const OpRegistry reg = make_builtin_registry();
  for (const std::string& op : reg.names(false)) EXPECT_NO_THROW(cuda_tolerance(op)) << op;
  EXPECT_THROW(cuda_tolerance("no_such_op"), Error);
  EXPECT_EQ(cuda_tolerance("relu").rel, 0.0);
}

// The generic runner on the CPU backend reproduces OpHarness's own results (forward and every
// backward node), so a GPU comparison compares the right things.
TEST(CudaHarness, CpuBackendRunMatchesOpHarness) {
  const OpRegistry reg = make_builtin_registry();
  OpCase c{"concat", {}, {f32({2, 1, 3, 2}), f32({2, 2, 3, 2})}};
  CudaOpHarness h(reg, c);
  OpHarness ref(reg, c);
  Floats dy = ref.random_dy(3);
  h.set_dy(dy);
  std::vector<Floats> want = ref.gradients(dy);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  GraphRun run = h.run_graph(*cpu);
  const Graph& g = h.graph();
  EXPECT_EQ(run.f[static_cast<size_t>(g.node(0).output)], ref.forward());
  ASSERT_EQ(g.nodes.size(), 3u);  // concat + 2 concat_slice
  EXPECT_EQ(run.f[static_cast<size_t>(g.node(1).output)], want[0]);
  EXPECT_EQ(run.f[static_cast<size_t>(g.node(2).output)], want[1]);
  EXPECT_TRUE(h.check_rerun_identical(*cpu));
}

// Note [GEMM tolerance]: a conv weight gradient summing K = 8 x 16 x 16 products may differ by
// (2 sqrt(K) + 64) 2^-24 times the sum of the products' magnitudes, and not by ten times that.
TEST(CudaHarness, GemmToleranceFollowsTheReduction) {
  const OpRegistry reg = make_builtin_registry();
  CudaOpHarness h(reg, {"conv2d", attr_map({{"filters", 4}, {"kernel", 3}, {"padding", 1}}),
                        {f32({8, 3, 16, 16})}});
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const GraphRun a = h.run_graph(*cpu);
  const GraphRun& mag = h.magnitude_run(*cpu);
  size_t gw = 0;
  for (const Node& n : h.graph().nodes)
    if (n.op == "conv2d_grad_weight") gw = static_cast<size_t>(n.output);
  ASSERT_GT(gw, 0u);
  const double bound =
      1e-6 + (2 * std::sqrt(8.0 * 16 * 16) + 64) * std::ldexp(1.0, -24) * mag.f[gw][0];
  ASSERT_GT(mag.f[gw][0], std::fabs(a.f[gw][0]));  // magnitudes do not cancel
  GraphRun b = a;
  b.f[gw][0] = static_cast<float>(a.f[gw][0] + 0.5 * bound);
  EXPECT_TRUE(compare_runs(h.graph(), a, b, false, &mag));
  b.f[gw][0] = static_cast<float>(a.f[gw][0] + 10 * bound);
  EXPECT_FALSE(compare_runs(h.graph(), a, b, false, &mag));
}

// compare_runs can fail: one flipped element, one NaN, or a bit-level difference.
TEST(CudaHarness, ComparisonDetectsDifferences) {
  const OpRegistry reg = make_builtin_registry();
  CudaOpHarness h(reg, {"softmax_xent", {}, {f32({3, 4}), i32({3})}, {}, 1, 4});
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const GraphRun a = h.run_graph(*cpu);
  EXPECT_TRUE(compare_runs(h.graph(), a, a, false));
  const size_t grad = static_cast<size_t>(h.graph().node(1).output);
  GraphRun b = a;
  b.f[grad][5] += 1e-3f;  // beyond the reduction tolerance
  EXPECT_FALSE(compare_runs(h.graph(), a, b, false));
  b = a;
  b.f[grad][5] = std::nanf("");
  EXPECT_FALSE(compare_runs(h.graph(), a, b, false));
  b = a;
  b.f[grad][5] = std::nextafter(a.f[grad][5], 1.0f);  // within tolerance, not bit-identical
  EXPECT_TRUE(compare_runs(h.graph(), a, b, false));
  EXPECT_FALSE(compare_runs(h.graph(), a, b, true));
}

// ---- GPU: elementwise and data movement ----------------------------------------------------

using CudaOpsB = CudaOpTest;

TEST_F(CudaOpsB, ReluAndRelu6) {
  for (const char* op : {"relu", "relu6"}) {
    for (Shape s : {Shape{1, 5}, Shape{2, 3, 5, 7}, Shape{4, 16, 8, 8}}) {
      OpCase c{op, {}, {f32(s)}, {}, 4};
      CudaOpHarness h(registry(), c);
      for (float& v : h.host().input(0)) v *= 8;  // spans both kinks (0 and 6)
      EXPECT_TRUE(h.compare_with_cpu(cuda())) << op << " " << shape_str(s);
      EXPECT_TRUE(h.check_rerun_identical(cuda())) << op;
    }
  }
}

TEST_F(CudaOpsB, AddTwoThreeAndTenInputs) {
  expect_matches_cpu(cuda(), registry(), {"add", {}, {f32({2, 3, 4, 4}), f32({2, 3, 4, 4})}});
  expect_matches_cpu(cuda(), registry(),
                     {"add", {}, {f32({1, 2}), f32({1, 2}), f32({1, 2})},
                      {{1, 2}, {10, 20}, {100, 200}}});
  OpCase ten{"add", {}, {}};
  for (int i = 0; i < 10; ++i) ten.inputs.push_back(f32({3, 5, 7}));  // > one 8-pointer chunk
  expect_matches_cpu(cuda(), registry(), ten);
}

TEST_F(CudaOpsB, ConcatAndSlices) {
  expect_matches_cpu(cuda(), registry(),
                     {"concat", {}, {f32({2, 1, 1, 2}), f32({2, 2, 1, 2}), f32({2, 1, 1, 2})}});
  expect_matches_cpu(cuda(), registry(), {"concat", {}, {f32({2, 3, 5, 5}), f32({2, 2, 5, 5})}});
  expect_matches_cpu(cuda(), registry(), {"concat", {}, {f32({2, 2}), f32({2, 1})}});
  // float4 path: every row and stride a multiple of 4 floats.
  expect_matches_cpu(cuda(), registry(), {"concat", {}, {f32({2, 4, 4, 4}), f32({2, 8, 4, 4})}});
}

TEST_F(CudaOpsB, Flatten) {
  expect_matches_cpu(cuda(), registry(), {"flatten", {}, {f32({2, 2, 1, 2})}});
  expect_matches_cpu(cuda(), registry(), {"flatten", {}, {f32({3, 2, 3, 2})}});
}

TEST_F(CudaOpsB, Upsample) {
  expect_matches_cpu(cuda(), registry(), {"upsample", factor(2), {f32({1, 1, 2, 2})}});
  expect_matches_cpu(cuda(), registry(), {"upsample", factor(3), {f32({2, 2, 2, 3})}});
  expect_matches_cpu(cuda(), registry(), {"upsample", factor(1), {f32({1, 1, 1, 2})}});
  expect_matches_cpu(cuda(), registry(), {"upsample", factor(2), {f32({2, 8, 7, 9})}});
}

// ---- GPU: dropout -------------------------------------------------------------------------

TEST_F(CudaOpsB, DropoutMaskEqualsCpuMask) {
  // Ones in: the output is the mask times 1 / (1 - rate), element for element.
  const int64_t n = 100003;  // not a multiple of 4: vector body and scalar tail
  OpCase c{"dropout", rate(0.3), {f32({n})}, {Floats(static_cast<size_t>(n), 1.0f)}, 42};
  CudaOpHarness h(registry(), c);
  h.step = 5;
  EXPECT_TRUE(h.compare_with_cpu(cuda()));
  const GraphRun run = h.run_graph(cuda());
  const Floats& y = run.f[static_cast<size_t>(h.graph().node(0).output)];
  int64_t mismatches = 0;
  for (int64_t e = 0; e < n; ++e) {
    const bool keep = rng_uniform(42, 5, static_cast<uint64_t>(e)) >= 0.3f;
    mismatches += (y[static_cast<size_t>(e)] != 0.0f) != keep;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(CudaOpsB, DropoutCasesStepsAndRecompute) {
  for (uint64_t step : {0, 3, 4}) {
    OpCase c{"dropout", rate(0.5), {f32({4, 64})}, {}, 9};
    CudaOpHarness h(registry(), c);
    h.step = static_cast<int64_t>(step);
    EXPECT_TRUE(h.compare_with_cpu(cuda())) << step;
    h.first_compute = false;  // a recomputation replays the same mask
    EXPECT_TRUE(h.compare_with_cpu(cuda())) << step;
    EXPECT_TRUE(h.check_rerun_identical(cuda())) << step;
  }
  expect_matches_cpu(cuda(), registry(), {"dropout", rate(0.4), {f32({2, 3, 5})}, {}, 5});
  expect_matches_cpu(cuda(), registry(), {"dropout", rate(0.0), {f32({2, 5})}});
  // Another step draws another mask on the GPU too.
  CudaOpHarness h(registry(), {"dropout", rate(0.5), {f32({4, 64})}, {}, 9});
  h.step = 3;
  const GraphRun a = h.run_graph(cuda());
  h.step = 4;
  const GraphRun b = h.run_graph(cuda());
  const size_t y = static_cast<size_t>(h.graph().node(0).output);
  int differ = 0;
  for (size_t e = 0; e < a.f[y].size(); ++e) differ += (a.f[y][e] == 0) != (b.f[y][e] == 0);
  EXPECT_GT(differ, 64);
}

// ---- GPU: softmax cross-entropy -----------------------------------------------------------

TEST_F(CudaOpsB, SoftmaxXentRowsAndPixels) {
  auto xent = [](Shape logits, Shape labels, int32_t k, const char* op) {
    OpCase c{op, {}, {f32(std::move(logits)), i32(std::move(labels))}};
    c.int_max = k;
    return c;
  };
  expect_matches_cpu(cuda(), registry(), xent({4, 5}, {4}, 5, "softmax_xent"));
  expect_matches_cpu(cuda(), registry(), xent({3, 40}, {3}, 40, "softmax_xent"));
  expect_matches_cpu(cuda(), registry(), xent({300, 1000}, {300}, 1000, "softmax_xent"));
  expect_matches_cpu(cuda(), registry(), xent({2, 3, 2, 2}, {2, 2, 2}, 3, "softmax_xent_pixel"));
  expect_matches_cpu(cuda(), registry(),
                     xent({2, 21, 33, 17}, {2, 33, 17}, 21, "softmax_xent_pixel"));
  // Large logits stay finite (max-shifted) on the device as well.
  expect_matches_cpu(cuda(), registry(),
                     {"softmax_xent", {}, {f32({2, 2}), i32({2})}, {{1000, 0, 0, 1000}, {0, 0}}});
}

TEST_F(CudaOpsB, SoftmaxXentLabelOutOfRangeNamesTheSample) {
  CudaOpHarness h(registry(), {"softmax_xent", {}, {f32({3, 2}), i32({3})}, {{}, {0, 1, 1}}});
  h.host().set_input(1, {0, 1, 2});
  std::string e = user_error_of([&] { h.run_graph(cuda()); });
  EXPECT_NE(e.find("label 2 of sample 2 is outside [0, 2)"), std::string::npos) << e;
  h.host().set_input(1, {0, -1, 5});  // the smallest bad sample is reported
  e = user_error_of([&] { h.run_graph(cuda()); });
  EXPECT_NE(e.find("label -1 of sample 1"), std::string::npos) << e;

  CudaOpHarness p(registry(), {"softmax_xent_pixel", {}, {f32({1, 2, 2, 2}), i32({1, 2, 2})},
                               {{}, {0, 1, 0, 1}}});
  p.host().set_input(1, {0, 1, 0, 7});
  e = user_error_of([&] { p.run_graph(cuda()); });
  EXPECT_NE(e.find("label 7 of sample 0 at pixel (1, 1)"), std::string::npos) << e;
}

// ---- GPU: optimizers ----------------------------------------------------------------------

OpCase optimizer_case(const std::string& op, AttrMap attrs, int64_t n, int n_state) {
  OpCase c{op, std::move(attrs), {f32({n}), f32({n})}};
  for (int i = 0; i < n_state; ++i) c.inputs.push_back(f32({n}));
  c.input_values.assign(c.inputs.size(), {});
  for (int i = 0; i < n_state; ++i)
    c.input_values[static_cast<size_t>(2 + i)] = Floats(static_cast<size_t>(n), 0.0f);
  return c;
}

TEST_F(CudaOpsB, SgdSeveralSteps) {
  expect_matches_cpu(cuda(), registry(), optimizer_case("sgd", attr_map({{"lr", 0.1}}), 1003, 0),
                     3);
  expect_matches_cpu(cuda(), registry(),
                     optimizer_case("sgd", attr_map({{"lr", 0.05}, {"momentum", 0.9}}), 1003, 1),
                     4);
  expect_matches_cpu(cuda(), registry(),
                     optimizer_case("sgd",
                                    attr_map({{"lr", 0.1},
                                              {"momentum", 0.8},
                                              {"weight_decay", 0.01},
                                              {"nesterov", true}}),
                                    257, 1),
                     3);
}

TEST_F(CudaOpsB, AdamSeveralSteps) {
  expect_matches_cpu(cuda(), registry(), optimizer_case("adam", attr_map({{"lr", 0.01}}), 1003, 2),
                     5);
  expect_matches_cpu(
      cuda(), registry(),
      optimizer_case("adam", attr_map({{"lr", 0.01}, {"weight_decay", 0.1}, {"beta2", 0.99}}),
                     257, 2),
      5);
  // Starting at a later step (bias correction uses t = step + 1).
  CudaOpHarness h(registry(), optimizer_case("adam", attr_map({{"lr", 0.001}}), 64, 2));
  h.step = 100;
  EXPECT_TRUE(h.compare_with_cpu(cuda(), 2));
}

#ifdef REMAT_HAVE_CUDA
// ---- GPU: kernels reached through other ops (bias gradient, global average pooling) -------

// Device copies of host vectors through the backend; kernels run on the default stream and the
// test synchronizes the device before reading back.
class DeviceVec {
 public:
  DeviceVec(Backend& b, const Floats& host) : b_(b), n_(host.size()) {
    p_ = static_cast<float*>(b_.raw_alloc(static_cast<int64_t>(std::max<size_t>(n_, 1) * 4)));
    b_.copy_from_host(p_, host.data(), static_cast<int64_t>(n_ * 4));
    b_.synchronize();
  }
  ~DeviceVec() { b_.raw_free(p_); }
  float* get() { return p_; }
  Floats read() {
    REMAT_CUDA_CHECK(cudaDeviceSynchronize());
    Floats h(n_);
    b_.copy_to_host(h.data(), p_, static_cast<int64_t>(n_ * 4));
    return h;
  }

 private:
  Backend& b_;
  size_t n_;
  float* p_ = nullptr;
};

Floats nan_vec(int64_t n) { return Floats(static_cast<size_t>(n), std::nanf("")); }

::testing::AssertionResult near_all(const Floats& want, const Floats& got, double abs, double rel) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(want[i]) - got[i]);
    if (!(d <= abs + rel * std::fabs(want[i])))
      return ::testing::AssertionFailure() << "[" << i << "] " << want[i] << " vs " << got[i];
  }
  return ::testing::AssertionSuccess();
}

TEST_F(CudaOpsB, BiasGradReduceMatchesCpuOps) {
  // conv2d_grad_bias [dy (N, K, H, W)] and dense_grad_bias [dy (N, U)] on the CPU.
  for (Shape s : {Shape{3, 5, 7, 9}, Shape{2, 64, 4, 4}, Shape{4, 3, 100, 100}, Shape{37, 130}}) {
    const bool conv = s.size() == 4;
    const int64_t n = s[0], c = s[1], plane = conv ? s[2] * s[3] : 1;
    OpHarness h(registry(), {conv ? "conv2d_grad_bias" : "dense_grad_bias",
                             conv ? attr_map({{"filters", c}, {"kernel", 1}}) : attr_map({{"units", c}}), {f32(s)}});
    const Floats want = h.forward();
    DeviceVec dy(cuda(), h.input(0)), db(cuda(), nan_vec(c));
    DeviceVec ws(cuda(), nan_vec(std::max<int64_t>(1, bias_grad_workspace_bytes(n, c, plane) / 4)));
    bias_grad_reduce(db.get(), dy.get(), n, c, plane, ws.get(), nullptr);
    const Floats got = db.read();
    EXPECT_TRUE(near_all(want, got, 1e-6, 1e-5)) << shape_str(s);
    if (!conv) {
      EXPECT_EQ(want, got);  // columns summed in the CPU's order: bit-identical
    }
    bias_grad_reduce(db.get(), dy.get(), n, c, plane, ws.get(), nullptr);
    const Floats again = db.read();
    EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * 4)) << shape_str(s);
  }
}

TEST_F(CudaOpsB, GlobalAvgPoolKernelsMatchCpuOps) {
  for (Shape s : {Shape{2, 3, 7, 7}, Shape{1, 2, 33, 65}}) {
    OpHarness f(registry(), {"global_avgpool", {}, {f32(s)}});
    const Floats want = f.forward();
    const int64_t planes = s[0] * s[1], hw = s[2] * s[3];
    DeviceVec x(cuda(), f.input(0)), y(cuda(), nan_vec(planes));
    global_avgpool_forward(y.get(), x.get(), planes, hw, 1, nullptr);
    EXPECT_TRUE(near_all(want, y.read(), 1e-6, 1e-5)) << shape_str(s);

    CudaOpHarness g(registry(), {"global_avgpool", {}, {f32(s)}});
    const GraphRun cpu_run = g.run_graph(*make_cpu_backend());
    const Graph& gr = g.graph();
    const Floats& dy = cpu_run.f[static_cast<size_t>(gr.find_value("dy"))];
    const Floats& dx_want = cpu_run.f[static_cast<size_t>(gr.node(1).output)];
    DeviceVec d(cuda(), dy), dx(cuda(), nan_vec(planes * hw));
    global_avgpool_backward(dx.get(), d.get(), planes, hw, 1, nullptr);
    EXPECT_EQ(dx.read(), dx_want) << shape_str(s);
  }
}

TEST_F(CudaOpsB, BiasActAndMisalignedElementwise) {
  // bias_act_forward vs bias add + relu6 by hand; relu on pointers offset by one float (no
  // float4 path) vs the CPU relu op.
  const int64_t n = 2, c = 3, plane = 5;
  Floats z(static_cast<size_t>(n * c * plane)), bias = {0.5f, -7.0f, 2.0f};
  for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>(i % 11) - 3.0f;
  Floats want = z;
  for (size_t i = 0; i < z.size(); ++i)
    want[i] = std::min(std::max(z[i] + bias[(i / plane) % c], 0.0f), 6.0f);
  DeviceVec y(cuda(), z), b(cuda(), bias);
  bias_act_forward(y.get(), b.get(), n, c, plane, KernelActivation::Relu6, nullptr);
  EXPECT_EQ(y.read(), want);

  OpHarness r(registry(), {"relu", {}, {f32({1, 1001})}});
  const Floats relu_want = r.forward();
  Floats shifted(1, 0.0f);
  shifted.insert(shifted.end(), r.input(0).begin(), r.input(0).end());
  DeviceVec in(cuda(), shifted), out(cuda(), nan_vec(1002));
  relu_forward(out.get() + 1, in.get() + 1, 1001, nullptr);
  const Floats got = out.read();
  EXPECT_EQ(Floats(got.begin() + 1, got.end()), relu_want);
}
#endif  // REMAT_HAVE_CUDA

}  // namespace
}  // namespace remat
