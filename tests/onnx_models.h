// The whole-model ONNX tests against PyTorch on the CPU (Note [ONNX import]), their fixture and
// checks: tests/onnx/make_references.py exports each network with torch.onnx.export and writes
// what PyTorch computes on one batch; the export is imported, and one training step's loss,
// logits, every parameter gradient and every running statistic, and the eval-mode logits, are
// compared with PyTorch's within Note [ONNX model tolerance]. Every parameter PyTorch has is a
// remat parameter of the same name and shape (and no other). A plan that recomputes (checkmate,
// halfway between the smallest budget and keeping everything) gives bit-identical gradients,
// running statistics and weights, and its measured peak is the predicted one. The networks:
// test_onnx_models.cpp (convolutional), test_onnx_attention_models.cpp (attention, windows).
#pragma once

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace remat {

class OnnxModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  // The export and PyTorch's numbers of `name`: those ctest made for every test, or made here
  // once per process.
  static void make(const std::string& name);
  // The export of `name` (made), to change.
  static onnx::ModelProto exported(const std::string& name);
  // The import's error on `changed` (written next to the exports), with `overrides`.
  static std::string import_error(const onnx::ModelProto& changed,
                                  const std::vector<std::string>& overrides = {});
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  static std::string dir_, skip_;
};

// One training step of the export `name` in `dir` against PyTorch's, and the recomputing plan
// (above); the eval-mode logits. `overrides` (KEY=VALUE) go to its default config.
void check_model(const std::string& dir, const std::string& name,
                 const std::vector<std::string>& overrides = {});
void check_eval(const std::string& dir, const std::string& name);

}  // namespace remat
