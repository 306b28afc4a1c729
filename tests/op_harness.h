// Op test harness: runs ONE op on the host without the engine (no autodiff, no executor) and
// checks its gradient rule against central finite differences (Caffe's checker style).
// Every op's tests use it; the gradient-check tolerances live in the one table below.
//
// What it builds (a tiny Graph, nodes in order):
//   values: the case's data inputs (Input kind; I32 ones Label kind), then the op's params
//           (op.params(): Param / Buffer, named "op.<suffix>"), then the output (Activation;
//           for Update ops the output IS input 0, Note [in-place updates]).
//   node 0: the forward node "op" (typed attrs from op.parse on the case's AttrMap,
//           seed = case.seed, kind = op.kind).
//   gradients() adds an Input value "dy" (absent for Loss ops) and appends the Backward nodes
//   the gradient rule emits through the harness's own GradEmitter (they copy the forward
//   node's attrs/typed/seed unless given their own; each emitted node's attrs are re-parsed
//   by its op, as loading a graph file would do).
// How it runs a node: host buffers (std::vector<float> / <int32_t> / <uint16_t> for bf16), an
// ExecContext with one TensorView per input, through the CPU backend (so bf16 nodes run as
// Note [bf16 execution] says) with the backend's workspace. Before every run the output and
// the workspace are filled with NaN, so a kernel that leaves an output element unwritten or
// reads workspace it did not write produces NaN and fails the test.
// bf16: a case's data inputs may be BF16 (bf16()); their values are set and read as floats,
// rounded to nearest even on the way in.
//
// Usage:
//   OpRegistry reg = make_builtin_registry();
//   OpCase c{"conv2d", attr_map({{"filters", 2}, {"kernel", 3}}), {f32({1, 1, 4, 4})}};
//   OpHarness h(reg, c);               // throws what parse / infer throw
//   h.set_input(0, {...});             // optional: inputs are random in [-1, 1) otherwise
//   h.set_param(0, {...});             // params: index among op.params() (weight = 0, ...)
//   std::vector<float> y = h.forward();
//   EXPECT_TRUE(h.check_gradients(kTolLinear));
//
// Values: data inputs and Params are uniform in [-1, 1) from case.seed; Buffers / OptState
// follow their InitKind (Zeros -> 0, Ones -> 1, otherwise uniform [0, 1)); I32 inputs are
// uniform integers in [0, case.int_max). Any of them can be overridden with set_input.
//
// Gradient check (check_gradients): L = sum(dy * y) accumulated in double, with dy random
// in [-1, 1) (or given); for Loss ops (kind Loss) the gradient rule gets dy = kNoValue and
// L = sum(y). For every F32 input of kind Input or Param, each element x_j is perturbed by
// +-eps and numeric = (L(x+eps) - L(x-eps)) / 2eps is compared with the analytic gradient:
//   |analytic - numeric| <= tol.rel * max(1, |analytic|, |numeric|).
// Inputs whose rule returns kNoValue must have a numeric gradient of ~0 (same test, analytic
// = 0). Buffers, labels and OptState are never perturbed.
// Non-smooth points (relu at 0, relu6 at 0 and 6, max-pool ties): an element whose central
// difference fails the test is excused as sitting within eps of a kink when its one-sided
// slopes (L(x+eps)-L(x))/eps and (L(x)-L(x-eps))/eps differ by more than tol.kink * scale and
// the analytic gradient matches one of them within tol.rel * scale (exact for piecewise-linear
// ops). The check fails when more than tol.max_skipped of one input's elements are excused.
// Tests should still pick inputs away from kinks where they can (e.g. set_input with values
// |x| >= 0.05, distinct values in each pooling window); the kink rule covers values the test
// cannot see, such as a fused activation's pre-activation.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/graph/op.h"

namespace remat {

struct OpCase {
  std::string op = {};
  AttrMap attrs = {};
  std::vector<TensorDesc> inputs = {};               // data inputs only (params come from op.params)
  std::vector<std::vector<float>> input_values = {};  // optional, per data input, then per
                                                 // parameter or buffer (empty = random);
                                                 // I32 inputs: integral floats
  uint64_t seed = 1;                             // random fill and the forward node's seed
  int32_t int_max = 1;                           // random I32 inputs drawn from [0, int_max)
};

// Tolerances of the gradient check; see the header comment for how each is used.
struct GradTolerance {
  double eps;          // central-difference step
  double rel;          // |a - n| <= rel * max(1, |a|, |n|)
  double kink;         // one-sided slopes differing by > kink * scale mark a kink
  double max_skipped;  // fail when more than this fraction of one input's elements is excused
};

// THE table of gradient-check tolerances, one entry per op family.
//                                      eps   rel   kink  max_skipped
inline constexpr GradTolerance kTolLinear{1e-2, 2e-3, 2e-3, 0.0};      // conv2d, dense, add, concat, flatten, upsample, avgpool
inline constexpr GradTolerance kTolPiecewise{1e-3, 3e-3, 3e-3, 0.15};  // relu, relu6, fused activations, maxpool, dropout
inline constexpr GradTolerance kTolNormalize{1e-2, 1e-2, 1e-2, 0.0};   // batchnorm
inline constexpr GradTolerance kTolLoss{1e-2, 1e-2, 1e-2, 0.0};        // softmax_xent*

// Small builders for test cases.
inline TensorDesc f32(Shape s) { return TensorDesc{std::move(s), DType::F32}; }
inline TensorDesc i32(Shape s) { return TensorDesc{std::move(s), DType::I32}; }
inline TensorDesc bf16(Shape s) { return TensorDesc{std::move(s), DType::BF16}; }
AttrMap attr_map(std::initializer_list<std::pair<std::string, AttrValue>> kv);

class OpHarness {
 public:
  // Copies the registry. Builds the graph; throws whatever op.parse / op.infer throw.
  OpHarness(const OpRegistry& ops, OpCase c);

  const Graph& graph() const { return graph_; }
  const OpDef& op() const;
  const Node& node() const { return graph_.nodes.at(0); }  // the forward node
  int num_data_inputs() const { return num_data_; }
  int num_inputs() const;                                   // data inputs + params
  const TensorDesc& input_desc(int i) const;
  const TensorDesc& output_desc() const;
  std::vector<ParamSpec> param_specs() const;               // op.params() as built

  // Host values of input i of the forward node (data inputs first, then params); F32 only.
  std::vector<float>& input(int i);
  std::vector<int32_t>& input_i32(int i);
  // Size checked; I32 inputs: integral floats; BF16 inputs: rounded to nearest even.
  void set_input(int i, std::vector<float> v);
  // The values of any graph value as floats (BF16 widened, I32 converted).
  std::vector<float> value(ValueId v) const;
  void set_param(int p, std::vector<float> v) { set_input(num_data_ + p, std::move(v)); }

  // Passed to every kernel in ExecContext.
  int64_t step = 0;
  bool first_compute = true;

  // Runs the forward node; returns its output (F32; I32 outputs converted).
  std::vector<float> forward();
  // Runs forward, then the backward nodes (emitted on the first call). `dy` has the output's
  // size (ignored for Loss ops). One vector per forward input; empty where the rule gave
  // kNoValue.
  std::vector<std::vector<float>> gradients(const std::vector<float>& dy);
  // Central differences of L for every input (empty for inputs that are not perturbed).
  std::vector<std::vector<float>> numeric_gradients(const std::vector<float>& dy, double eps);
  // Analytic vs numeric for every perturbable input; `dy` random when empty.
  ::testing::AssertionResult check_gradients(const GradTolerance& tol,
                                             std::vector<float> dy = {});

  std::vector<float> random_dy(uint64_t seed) const;  // uniform [-1, 1), the output's size
  std::vector<NodeId> backward_nodes() const;         // emitted nodes (after gradients())
  bool is_loss() const;

 private:
  struct Buffer {
    std::vector<float> f;
    std::vector<int32_t> i;
    std::vector<uint16_t> h;  // BF16
  };
  static void* data_of(Buffer& b, DType t);  // the host memory of b for dtype t
  void run_node(NodeId n);
  void emit_backward();
  double loss_value(const std::vector<float>& dy);
  bool perturbable(int i) const;
  Buffer& buf(ValueId v) { return bufs_.at(static_cast<size_t>(v)); }

  OpRegistry ops_;
  std::unique_ptr<Backend> cpu_;
  OpCase case_;
  Graph graph_;
  std::vector<Buffer> bufs_;  // one per value
  int num_data_ = 0;
  ValueId dy_ = kNoValue;
  bool emitted_ = false;
  std::vector<ValueId> grad_ids_;
};

}  // namespace remat
