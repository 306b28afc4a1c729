// The image batch of a bf16 model (Note [bf16 input batch] in models/build.cpp): bf16 where
// every layer reads it through the bf16 cast, with no cast node; F32 with the cast where some
// layer reads it in F32; and a bf16 batch is the F32 batch of the same source rounded to
// nearest even, pixel for pixel, as the cast would round it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/core/bf16.h"

namespace remat {
namespace {

const OpRegistry& registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

const std::string kHead =
    "name: m\ninput: [3, 8, 8]\nclasses: 3\nbatch: 4\nprecision: bf16\nlayers:\n";
const std::string kTail =
    "  - {name: f, op: flatten}\n  - {name: d, op: dense, units: 3}\n";

Graph build_yaml(const std::string& layers, DType precision = DType::BF16) {
  BuildOptions bo;
  bo.precision = precision;
  return build_forward_graph(parse_model_config(kHead + layers + kTail, "m.yaml"), registry(),
                             bo);
}

DType batch_dtype(const Graph& g) { return g.value(g.input).desc.dtype; }

TEST(Bf16InputBatch, AConvolutionFirstTakesTheBatchInBf16) {
  const std::string conv = "  - {name: c, op: conv2d, filters: 2, kernel: 3}\n";
  const Graph g = build_yaml(conv);
  EXPECT_EQ(batch_dtype(g), DType::BF16);
  EXPECT_EQ(g.find_value("input.to_bf16"), kNoValue);
  const std::vector<NodeId> readers = g.users()[static_cast<size_t>(g.input)];
  ASSERT_EQ(readers.size(), 1u);
  EXPECT_EQ(g.node(readers[0]).name, "c");
  EXPECT_EQ(g.value(g.input).desc.bytes(), 4 * 3 * 8 * 8 * 2);
  // In fp32 nothing changes.
  EXPECT_EQ(batch_dtype(build_yaml(conv, DType::F32)), DType::F32);
  // Two convolutions reading the batch share it as they shared the cast.
  const Graph two = build_yaml(conv + "  - {name: e, op: conv2d, filters: 2, kernel: 3, "
                                      "inputs: [input]}\n  - {name: a, op: add, inputs: [c, e]}\n");
  EXPECT_EQ(batch_dtype(two), DType::BF16);
  EXPECT_EQ(two.find_value("input.to_bf16"), kNoValue);
}

TEST(Bf16InputBatch, ALayerReadingItInFp32KeepsItFp32) {
  // A pooling first runs in its input's dtype: F32, and the convolution after it casts.
  const Graph pool = build_yaml(
      "  - {name: p, op: maxpool, kernel: 2}\n  - {name: c, op: conv2d, filters: 2, kernel: 3}\n");
  EXPECT_EQ(batch_dtype(pool), DType::F32);
  EXPECT_NE(pool.find_value("p.to_bf16"), kNoValue);
  // One convolution forced to fp32 beside a bf16 one: the batch stays F32 and the cast stays.
  const Graph mixed = build_yaml(
      "  - {name: c, op: conv2d, filters: 2, kernel: 3}\n"
      "  - {name: e, op: conv2d, filters: 2, kernel: 3, precision: fp32, inputs: [input]}\n"
      "  - {name: a, op: add, inputs: [c, e]}\n");
  EXPECT_EQ(batch_dtype(mixed), DType::F32);
  EXPECT_NE(mixed.find_value("input.to_bf16"), kNoValue);
}

TEST(Bf16InputBatch, TheBf16BatchIsTheF32BatchRoundedToNearestEven) {
  const ModelConfig cfg =
      parse_model_config(kHead + "  - {name: c, op: conv2d, filters: 2, kernel: 3}\n" + kTail,
                         "m.yaml");
  const Graph g = build_forward_graph(cfg, registry());
  const TensorDesc in16 = g.value(g.input).desc;
  ASSERT_EQ(in16.dtype, DType::BF16);
  const TensorDesc in32{in16.shape, DType::F32};
  const TensorDesc& lab = g.value(g.label).desc;
  auto f32 = make_data_source(cfg, in32, lab, "");
  LoaderOptions three;
  three.threads = 3;  // the 4 samples rounded on three threads, one of them twice
  auto bf16 = make_data_source(cfg, in16, lab, "", {}, three);
  EXPECT_EQ(bf16->describe(), f32->describe() + ", rounded to bf16");
  const size_t n = static_cast<size_t>(in16.numel());
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<float> x(n);
    std::vector<uint16_t> h(n + 1, 0xABCD);  // one element past the batch: untouched
    std::vector<int32_t> y32(static_cast<size_t>(lab.numel())), y16(y32.size());
    f32->next_batch(step, x.data(), y32.data());
    bf16->next_batch(step, h.data(), y16.data());
    EXPECT_EQ(y16, y32);
    int rounded = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], bf16_from_float(x[i])) << "step " << step << ", pixel " << i;
      rounded += bf16_to_float(h[i]) != x[i];
    }
    EXPECT_GT(rounded, 0);  // the synthetic pixels are not bf16 numbers already
    EXPECT_EQ(h[n], 0xABCD);
  }
}

}  // namespace
}  // namespace remat
