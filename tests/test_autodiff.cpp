// Autodiff over whole graphs: gradients of every parameter of a small DAG (fan-out, add,
// concat) and of a graph of splits against central finite differences of the loss, plus
// structural checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "tests/graph_test_util.h"

namespace remat {
namespace {

using test::count_op;

// What both test graphs share: the fields before their layers, and the head after them.
const std::string kHead = R"(
input: [2, 4, 4]
classes: 3
batch: 2
seed: 5
optimizer: {op: sgd, lr: 0.0}
layers:
)";
const std::string kTail = R"(  - {name: p, op: avgpool, kernel: 2}
  - {name: f, op: flatten}
  - {name: fc, op: dense, units: 3}
)";

// `a` feeds both the add and the concat (fan-out); `b` reads the model input directly.
const std::string kDag = "name: dag" + kHead +
                         R"(  - {name: a, op: conv2d, filters: 3, kernel: 3, padding: 1}
  - {name: b, op: conv2d, filters: 3, kernel: 3, padding: 1, inputs: input}
  - {name: s, op: add, inputs: [a, b]}
  - {name: c, op: concat, inputs: [a, s]}
)" + kTail;

// Note [split gradients]: `a` is split in two along its channels and `c` along its rows
// (axis 2), each into slices that tile the axis; `j` joins along the rows again. With `gap`,
// a's slices leave channel 1 out.
std::string split_yaml(bool gap) {
  return "name: split" + kHead +
         "  - {name: a, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
         "  - {name: lo, op: channel_slice, offset: 0, channels: 1, inputs: a}\n" +
         (gap ? "  - {name: hi, op: channel_slice, offset: 2, channels: 2, inputs: a}\n"
              : "  - {name: hi, op: channel_slice, offset: 1, channels: 3, inputs: a}\n") +
         R"(  - {name: l2, op: conv2d, filters: 2, kernel: 3, padding: 1, inputs: lo}
  - {name: h2, op: conv2d, filters: 2, kernel: 1, inputs: hi}
  - {name: c, op: concat, inputs: [l2, h2]}
  - {name: top, op: channel_slice, axis: 2, offset: 0, channels: 3, inputs: c}
  - {name: bottom, op: channel_slice, axis: 2, offset: 3, channels: 1, inputs: c}
  - {name: t2, op: conv2d, filters: 2, kernel: 1, inputs: top}
  - {name: b2, op: conv2d, filters: 2, kernel: 1, inputs: bottom}
  - {name: j, op: concat, axis: 2, inputs: [t2, b2]}
)" + kTail;
}

// One convolution's weight and bias read by four layers (`share`, weight tying as in a recurrent
// layer unrolled over its steps).
const std::string kShared = "name: shared" + kHead +
                            R"(  - {name: a, op: conv2d, filters: 3, kernel: 3, padding: 1}
  - {name: b, op: conv2d, filters: 3, kernel: 3, padding: 1, activation: relu}
  - {name: c, op: conv2d, filters: 3, kernel: 3, padding: 1, activation: relu,
     share: {weight: b.weight, bias: b.bias}}
  - {name: d, op: conv2d, filters: 3, kernel: 3, padding: 1, activation: relu,
     share: {weight: b.weight, bias: b.bias}}
  - {name: e, op: conv2d, filters: 3, kernel: 3, padding: 1,
     share: {weight: b.weight, bias: b.bias}}
)" + kTail;

struct Fixture {
  explicit Fixture(const std::string& yaml = kDag) : cfg(parse_model_config(yaml, "dag.yaml")) {
    g = make_training_graph(build_forward_graph(cfg, ops), ops, cfg.optimizer.op,
                            cfg.optimizer.attrs);
  }
  OpRegistry ops = make_builtin_registry();
  ModelConfig cfg;
  Graph g;
};

TEST(Autodiff, StructureSumsFanOutAndRoutesParamGrads) {
  Fixture f;
  // `a` has two consumers (s, c), so its gradient is a sum node; every parameter has a
  // persistent gradient written by exactly one backward node, and one update node.
  EXPECT_NE(f.g.find_node("a.grad_sum"), -1);
  int params = 0, updates = 0;
  for (const auto& v : f.g.values) {
    if (v.kind != ValueKind::Param) continue;
    ++params;
    ValueId grad = f.g.find_value(v.name + ".grad");
    ASSERT_NE(grad, kNoValue) << v.name;
    EXPECT_EQ(f.g.value(grad).kind, ValueKind::ParamGrad);
    ASSERT_GE(f.g.value(grad).producer, 0) << v.name;
    EXPECT_EQ(f.g.node(f.g.value(grad).producer).kind, NodeKind::Backward);
  }
  for (const auto& n : f.g.nodes) updates += n.kind == NodeKind::Update;
  EXPECT_EQ(params, 6);  // a, b, fc: weight and bias each
  EXPECT_EQ(updates, params);
  // The gradient with respect to the input batch is pruned: nothing needs it.
  for (const auto& n : f.g.nodes) {
    if (n.kind != NodeKind::Backward) continue;
    for (ValueId v : n.inputs) {
      EXPECT_NE(f.g.value(v).name, "b.grad_input");
    }
  }
  EXPECT_EQ(f.g.find_node("b.grad_input"), -1);
}

void expect_gradients_match_finite_differences(Fixture& f) {
  auto be = make_cpu_backend();
  Executor ex(f.g, f.ops, *be);
  ex.init_parameters(f.cfg.seed);
  ExecutionPlan plan = plan_keep_all(f.g, [&](NodeId n) { return ex.workspace_bytes(n); });
  auto data = make_data_source(f.cfg, f.g.value(f.g.input).desc, f.g.value(f.g.label).desc, "");
  std::vector<float> x(static_cast<size_t>(f.g.value(f.g.input).desc.numel()));
  std::vector<int32_t> y(static_cast<size_t>(f.g.value(f.g.label).desc.numel()));
  data->next_batch(0, x.data(), y.data());

  ex.run_step(plan, x.data(), y.data(), 0);  // lr = 0: parameters stay put
  int checked = 0;
  for (size_t pv = 0; pv < f.g.values.size(); ++pv) {
    const Value& p = f.g.values[pv];
    if (p.kind != ValueKind::Param) continue;
    std::vector<float> grad = ex.read(f.g.find_value(p.name + ".grad"));
    std::vector<float> w = ex.read(static_cast<ValueId>(pv));
    for (size_t i = 0; i < w.size(); i += 3) {  // every third entry keeps the test fast
      // Central differences err by eps^2 / 6 times the loss's third derivative (the split
      // graph's curves enough that 1e-2 misses by 7 %) and by the loss's FP32 rounding over
      // 2 eps: about 1e-7 / 2e-3, far inside the tolerance below.
      const float eps = 1e-3f;
      std::vector<float> wp = w, wm = w;
      wp[i] += eps;
      wm[i] -= eps;
      ex.write(static_cast<ValueId>(pv), wp);
      double lp = ex.run_step(plan, x.data(), y.data(), 0).loss;
      ex.write(static_cast<ValueId>(pv), wm);
      double lm = ex.run_step(plan, x.data(), y.data(), 0).loss;
      ex.write(static_cast<ValueId>(pv), w);
      double numeric = (lp - lm) / (2.0 * eps);
      double tol = 2e-3 + 2e-2 * std::max(std::fabs(numeric), std::fabs(double(grad[i])));
      EXPECT_NEAR(grad[i], numeric, tol) << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(Autodiff, WholeGraphGradientsMatchFiniteDifferences) {
  Fixture f;
  expect_gradients_match_finite_differences(f);
}

// Note [split gradients]: slices that tile an axis get one concat of their gradients (along
// the channels and along the rows), no zero-padded slice gradients and no sum; the gradients
// match finite differences. Slices that leave a gap are summed as before.
TEST(Autodiff, TheGradientsOfSlicesThatTileAnAxisAreJoined) {
  Fixture f(split_yaml(false));
  EXPECT_NE(f.g.find_node("a.grad_concat"), -1);
  EXPECT_NE(f.g.find_node("c.grad_concat"), -1);
  EXPECT_EQ(f.g.find_node("a.grad_sum"), -1);
  EXPECT_EQ(count_op(f.g, "channel_slice_grad"), 0);
  expect_gradients_match_finite_differences(f);
  Fixture gap(split_yaml(true));
  EXPECT_EQ(gap.g.find_node("a.grad_concat"), -1);
  EXPECT_NE(gap.g.find_node("a.grad_sum"), -1);
  EXPECT_NE(gap.g.find_node("c.grad_concat"), -1);
  EXPECT_EQ(count_op(gap.g, "channel_slice_grad"), 2);
  expect_gradients_match_finite_differences(gap);
}

// Note [running parameter sums]: each gradient contribution of a shared parameter is added to
// the running sum by the first node after the ones that wrote it; no add reads more than two
// values, so no more than the sum and one contribution are resident. The gradients match
// finite differences.
TEST(Autodiff, SharedParametersSumTheirGradientsAsTheyArrive) {
  Fixture f(kShared);
  for (const std::string param : {"b.weight", "b.bias"}) {
    const ValueId grad = f.g.find_value(param + ".grad");
    ASSERT_NE(grad, kNoValue);
    int adds = 0;
    for (size_t i = 0; i < f.g.nodes.size(); ++i) {
      const Node& n = f.g.nodes[i];
      if (n.op != "add" || n.name.rfind(param + ".grad", 0) != 0) continue;
      ++adds;
      ASSERT_EQ(n.inputs.size(), 2u) << n.name;
      // The newer input is a contribution written by the gradient rule of the same forward
      // node, and no node of another forward node's rule runs between them.
      const NodeId piece = f.g.value(n.inputs[1]).producer;
      ASSERT_GE(piece, 0);
      EXPECT_EQ(f.g.node(piece).forward, n.forward) << n.name;
      for (size_t k = static_cast<size_t>(piece) + 1; k < i; ++k)
        EXPECT_EQ(f.g.nodes[k].forward, n.forward) << n.name << " after " << f.g.nodes[k].name;
    }
    EXPECT_EQ(adds, 3) << param;  // four reads: three adds, the last writing the gradient
    EXPECT_EQ(f.g.node(f.g.value(grad).producer).op, "add");
  }
  expect_gradients_match_finite_differences(f);
}

TEST(Autodiff, RequiresALossNode) {
  Fixture f;
  Graph fwd = build_forward_graph(f.cfg, f.ops);
  fwd.loss = kNoValue;
  EXPECT_THROW(make_training_graph(fwd, f.ops, "sgd", {}), Error);
}

}  // namespace
}  // namespace remat
