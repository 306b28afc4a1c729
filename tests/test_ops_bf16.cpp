// Every op in bf16 on the CPU (Note [bf16 execution] in runtime/backends/bf16_staging.h):
//  1. the emulation is what the Note says: each node of a bf16 forward + backward graph equals
//     its FP32 kernel run on that node's own inputs (BF16 widened, bf16 operands rounded),
//     rounded once to nearest even — bit for bit (dense: to the neighbouring bf16 value, its
//     GEMMs being blocked);
//  2. against the FP32 reference on the same (bf16-representable) data, outputs and gradients
//     stay within bounds derived from bf16's unit roundoff u = 2^-8 (below, per op family).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/bf16.h"
#include "tests/op_cases.h"
#include "tests/op_harness.h"
#include "tests/op_test_util.h"

namespace remat {
namespace {

using Floats = std::vector<float>;
constexpr double kU = kBf16UnitRoundoff;

// The harness's random inputs and parameters, rounded to bf16, so that the FP32 and bf16 runs
// start from the same values (data inputs first, then params).
std::vector<Floats> bf16_representable_inputs(const OpHarness& h) {
  std::vector<Floats> v;
  for (int i = 0; i < h.num_inputs(); ++i) {
    Floats x = h.value(h.node().inputs[static_cast<size_t>(i)]);
    if (dtype_is_float(h.input_desc(i).dtype))
      for (float& e : x) e = bf16_round(e);
    v.push_back(std::move(x));
  }
  return v;
}

void set_all(OpHarness& h, const std::vector<Floats>& v) {
  for (int i = 0; i < h.num_inputs(); ++i) {
    const ValueKind k = h.graph().value(h.node().inputs[static_cast<size_t>(i)]).kind;
    if (k == ValueKind::Buffer || k == ValueKind::OptState) continue;  // keep their init
    h.set_input(i, v[static_cast<size_t>(i)]);
  }
}

// How many bf16 values lie between a and b (both bf16 values): 0 when equal, 1 for neighbours.
int64_t bf16_steps_apart(float a, float b) {
  auto ordered = [](float x) {  // bf16 bit patterns as integers in the order of their values
    const int32_t h = bf16_from_float(x);
    return h & 0x8000 ? -(h & 0x7FFF) : h;
  };
  return std::abs(static_cast<int64_t>(ordered(a)) - ordered(b));
}

// 1. Each node of the bf16 graph of `c` (forward and backward) equals its FP32 kernel on that
// node's own inputs, rounded once.
void expect_emulation_exact(const OpCase& c32) {
  OpHarness h(builtin_registry(), as_bf16(c32));
  const Floats dy = h.random_dy(99);
  Floats dyr = dy;
  for (float& e : dyr) e = bf16_round(e);
  h.gradients(dyr);
  const Graph& g = h.graph();
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes.size()); ++id) {
    const Node& n = g.node(id);
    SCOPED_TRACE("node " + n.name + " (" + n.op + ")");
    const OpDef& def = builtin_registry().get(n.op);
    OpCase single{n.op, n.attrs, {}};
    single.seed = n.seed;
    std::vector<Floats> values;
    // The forward node's parameters are made by the harness from op.params; backward nodes
    // take every input as data.
    const size_t data = id == 0 ? static_cast<size_t>(h.num_data_inputs()) : n.inputs.size();
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      TensorDesc d = g.value(n.inputs[k]).desc;
      Floats x = h.value(n.inputs[k]);
      const bool operand =
          d.dtype == DType::F32 &&
          std::find(def.bf16_operands.begin(), def.bf16_operands.end(), static_cast<int>(k)) !=
              def.bf16_operands.end();
      if (operand)
        for (float& e : x) e = bf16_round(e);
      if (d.dtype == DType::BF16) d.dtype = DType::F32;
      if (k < data) single.inputs.push_back(d);
      values.push_back(std::move(x));
    }
    OpHarness r(builtin_registry(), single);
    // conv2d_grad_input infers the smallest input size that gives dy's size; with stride > 1
    // the emitted node carries a larger one (other cases cover the op at their exact sizes).
    if (r.output_desc().shape != g.value(n.output).desc.shape) continue;
    for (size_t k = 0; k < values.size(); ++k) r.set_input(static_cast<int>(k), values[k]);
    const Floats want32 = r.forward();
    const Floats got = h.value(n.output);
    const DType out = g.value(n.output).desc.dtype;
    ASSERT_EQ(got.size(), want32.size());
    // dense's bf16 kernels run their GEMMs a block of rows or columns at a time
    // (ops/gemm_bf16_cpu.h): OpenBLAS's sums for a block can differ from the whole GEMM's in the
    // last FP32 bits, so the rounding may land on the neighbouring bf16 value.
    const bool blocked = n.op == "dense" || n.op == "linear" || n.op == "dense_grad_input" ||
                         n.op == "dense_grad_weight";
    int bad = 0;
    for (size_t e = 0; e < got.size() && bad < 5; ++e) {
      const bool rounded = out == DType::BF16 || def.bf16_rounds_output;
      const float want = rounded ? bf16_round(want32[e]) : want32[e];
      if (blocked && rounded && bf16_steps_apart(got[e], want) <= 1) continue;
      if (!(got[e] == want || (std::isnan(got[e]) && std::isnan(want)))) {
        ++bad;
        ADD_FAILURE() << "element " << e << ": bf16 run " << got[e] << ", FP32 kernel "
                      << want32[e] << (rounded ? " rounded to " + std::to_string(want) : "");
      }
    }
  }
}

// 2. Against the FP32 reference on the same data.
void expect_within_bounds(const Bf16OpCase& bc) {
  OpHarness h32(builtin_registry(), bc.c), h16(builtin_registry(), as_bf16(bc.c));
  const std::vector<Floats> in = bf16_representable_inputs(h32);
  set_all(h32, in);
  set_all(h16, in);
  Floats dy = h32.random_dy(bc.c.seed * 13 + 5);
  for (float& e : dy) e = bf16_round(e);
  const Floats y32 = h32.forward(), y16 = h16.forward();
  const std::vector<Floats> g32 = h32.gradients(dy), g16 = h16.gradients(dy);
  // Magnitudes: the FP32 graph on absolute values of every input, parameter and dy.
  std::vector<Floats> mag_in = in;
  for (Floats& v : mag_in)
    for (float& e : v) e = std::fabs(e);
  Floats mag_dy = dy;
  for (float& e : mag_dy) e = std::fabs(e);
  OpHarness hm(builtin_registry(), bc.c);
  set_all(hm, mag_in);
  const Floats ym = hm.forward();
  const std::vector<Floats> gm = hm.gradients(mag_dy);

  // Exact: bit-equal to the reference rounded once (BF16 results) or equal (F32 results);
  // Gemm: |bf16 - fp32| <= u |fp32| + u mag (Bf16Family::Gemm).
  auto check = [&](const std::string& what, const Floats& ref, const Floats& got,
                   const Floats& mag, bool bf16_result, Bf16Family rule) {
    SCOPED_TRACE(what);
    ASSERT_EQ(ref.size(), got.size());
    int bad = 0;
    for (size_t e = 0; e < ref.size() && bad < 5; ++e) {
      const double r = ref[e], x = got[e];
      if (rule == Bf16Family::Exact) {
        const float want = bf16_result ? bf16_round(ref[e]) : ref[e];
        if (got[e] == want) continue;
        ++bad;
        ADD_FAILURE() << "element " << e << ": bf16 " << x << ", FP32 " << r << " (rounded "
                      << want << ")";
        continue;
      }
      const double bound = kU * std::fabs(r) + kU * std::fabs(mag[e]);
      if (std::fabs(x - r) <= bound) continue;
      ++bad;
      ADD_FAILURE() << "element " << e << ": bf16 " << x << ", FP32 " << r << ", bound " << bound;
    }
  };
  const Bf16Family forward_rule = bc.family == Bf16Family::Gemm ? Bf16Family::Gemm : Bf16Family::Exact;
  check("output", y32, y16, ym, h16.output_desc().dtype == DType::BF16, forward_rule);
  for (size_t i = 0; i < g32.size() && bc.family != Bf16Family::Softmax; ++i) {
    if (g32[i].empty()) continue;
    const bool bf16_grad = h16.input_desc(static_cast<int>(i)).dtype == DType::BF16;
    check("gradient of input " + std::to_string(i), g32[i], g16[i], gm[i], bf16_grad, bc.family);
  }
  if (bc.family != Bf16Family::Softmax) return;
  // The softmax gradient's bound (Bf16Family::Softmax) from the FP32 probabilities and dy.
  const int64_t len = h32.output_desc().shape.back();
  const Floats& dx32 = g32[0];
  const Floats& dx16 = g16[0];
  int bad = 0;
  for (size_t row = 0; row * len < y32.size(); ++row) {
    double s = 0, sabs = 0;
    for (int64_t j = 0; j < len; ++j) {
      const size_t e = row * len + j;
      s += static_cast<double>(dy[e]) * y32[e];
      sabs += std::fabs(static_cast<double>(dy[e])) * y32[e];
    }
    for (int64_t j = 0; j < len && bad < 5; ++j) {
      const size_t e = row * len + j;
      const double E = kU * y32[e] * std::fabs(dy[e] - s) + (1 + kU) * kU * y32[e] * sabs;
      const double bound = kU * std::fabs(dx32[e]) + (1 + kU) * E;
      if (std::fabs(static_cast<double>(dx16[e]) - dx32[e]) <= bound) continue;
      ++bad;
      ADD_FAILURE() << "softmax gradient element " << e << ": bf16 " << dx16[e] << ", FP32 "
                    << dx32[e] << ", bound " << bound;
    }
  }
}

TEST(Bf16Ops, EveryNodeIsItsFp32KernelRoundedOnce) {
  for (const Bf16OpCase& bc : bf16_op_cases()) {
    SCOPED_TRACE(bc.name);
    expect_emulation_exact(bc.c);
  }
}

TEST(Bf16Ops, WithinTheDerivedBoundsOfTheFp32Reference) {
  for (const Bf16OpCase& bc : bf16_op_cases()) {
    if (!bc.compare_fp32) continue;
    SCOPED_TRACE(bc.name);
    expect_within_bounds(bc);
  }
}

// The checks can fail: an FP32 result that was not rounded (a kernel writing FP32 bits into a
// bf16 tensor's neighbour) is caught by the exact comparison, and a result off by two bf16 steps
// breaks the Gemm bound when mag is small.
TEST(Bf16Ops, RoundingIsToNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_float(bf16_from_float(1.0f + 1.0f / 256)), 1.0f);       // tie: to even
  EXPECT_EQ(bf16_to_float(bf16_from_float(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);  // tie: up
  EXPECT_EQ(bf16_to_float(bf16_from_float(1.0f + 1.5f / 256)), 1.0f + 2.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(NAN))));
  EXPECT_EQ(bf16_to_float(bf16_from_float(-0.0f)), 0.0f);
  EXPECT_TRUE(std::signbit(bf16_to_float(bf16_from_float(-0.0f))));
  // Relative error at most u over a sweep of magnitudes.
  for (float x = 1e-30f; x < 1e30f; x *= 1.37f) {
    const double r = bf16_round(x);
    EXPECT_LE(std::fabs(r - x), kU * std::fabs(x)) << x;
  }
}

// A bf16 graph's values are half the bytes; casts count like any value.
TEST(Bf16Ops, OutputsAreBf16AndHalfTheBytes) {
  OpHarness h(builtin_registry(), as_bf16({"conv2d", attr_map({{"filters", 4}, {"kernel", 3}}),
                                           {f32({2, 3, 6, 6})}}));
  EXPECT_EQ(h.output_desc().dtype, DType::BF16);
  EXPECT_EQ(h.output_desc().bytes(), 2 * 4 * 4 * 4 * 2);
  EXPECT_EQ(h.input_desc(1).dtype, DType::F32);  // the weight: FP32 master copy
  EXPECT_HAS(case_error({"add", {}, {f32({2, 3}), bf16({2, 3})}}),
             "expects float inputs (f32 or bf16) of one dtype, input 1 is bf16");
}

}  // namespace
}  // namespace remat
