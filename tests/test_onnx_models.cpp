// Imported torchvision convolutional networks against PyTorch on the CPU (the fixture and the
// checks: tests/onnx_models.h): ResNet, VGG, MobileNet, DenseNet, SqueezeNet, GoogLeNet, RegNet,
// EfficientNet, ConvNeXt, ShuffleNet, U-Net, FCN, and small networks of the ops between them.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <utility>

#include "models/build.h"
#include "models/config.h"
#include "models/initial_values.h"
#include "models/onnx/onnx_source.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/io/safetensors.h"
#include "tests/halfway_plan.h"
#include "tests/onnx_models.h"
#include "tests/model_test_util.h"
#include "tests/source_dir.h"
#include "tools/training/evaluation.h"

namespace remat {
namespace {

TEST_F(OnnxModels, ResNet18) {
  make("resnet18");
  check_model(dir_, "resnet18");
  check_eval(dir_, "resnet18");
}
// VGG-11 at 224 x 224: its adaptive pooling (7 x 7 to 7 x 7, an AveragePool) and the
// classifier's dropouts (p = 0, aliases).
TEST_F(OnnxModels, Vgg11) {
  make("vgg11");
  check_model(dir_, "vgg11");
}
TEST_F(OnnxModels, ResNet18EvalExportFoldsBatchNorm) {
  make("resnet18_eval");
  check_eval(dir_, "resnet18_eval");
}
TEST_F(OnnxModels, MobileNetV2) {
  make("mobilenet_v2");
  check_model(dir_, "mobilenet_v2");
  check_eval(dir_, "mobilenet_v2");
}
TEST_F(OnnxModels, DenseNet121) {
  make("densenet121");
  check_model(dir_, "densenet121");
  check_eval(dir_, "densenet121");
}
TEST_F(OnnxModels, SqueezeNet) {
  make("squeezenet1_0");
  check_model(dir_, "squeezenet1_0");
}
TEST_F(OnnxModels, GoogLeNetOpset17) {
  make("googlenet");
  check_model(dir_, "googlenet");
}
TEST_F(OnnxModels, RegNetOpset17) {
  make("regnet_x_400mf");
  check_model(dir_, "regnet_x_400mf");
}
// Squeeze-and-excitation with sigmoid gates (Sigmoid, Mul: channel_scale).
TEST_F(OnnxModels, RegNetYSqueezeExcitation) {
  make("regnet_y_400mf");
  check_model(dir_, "regnet_y_400mf");
}
// SiLU (x * Sigmoid(x)) throughout, sigmoid squeeze-and-excitation.
TEST_F(OnnxModels, EfficientNetSiluAndGates) {
  make("efficientnet_b0");
  check_model(dir_, "efficientnet_b0");
}
// Hard swish as opset 13 writes it (x * HardSigmoid(x)), hard-sigmoid gates.
TEST_F(OnnxModels, MobileNetV3HardSwishAndGates) {
  make("mobilenet_v3_small");
  check_model(dir_, "mobilenet_v3_small");
  check_eval(dir_, "mobilenet_v3_small");
}
// nn.GELU(): the exact GELU's five nodes read as gelu_erf, on images and on [N, F].
TEST_F(OnnxModels, ExactGelu) {
  make("gelu_net");
  check_model(dir_, "gelu_net");
}
// ConvNeXt: permutes of data to channels-last values and back (transpose), layer norms and
// linears over them, nn.GELU(), layer scales (depthwise 1 x 1 conv2d), LayerNorm2d after the
// pooling (a reshape).
TEST_F(OnnxModels, ConvNeXtPermutesAndLayerScale) {
  make("convnext_mini");
  check_model(dir_, "convnext_mini");
  check_eval(dir_, "convnext_mini");
}
// Arithmetic with Python scalars between layers (affine).
TEST_F(OnnxModels, ScalarArithmetic) {
  make("scalar_net");
  check_model(dir_, "scalar_net");
}
// Tensor constants the export computed, meeting data (Note [tensor constants]): Sub of a
// per-channel mean, a sinusoidal encoding added, a local attention mask of -inf before the
// softmax, a constant less data: add_constant layers whose tables are buffers, which `export`
// leaves out (check_model: the parameters are PyTorch's alone).
TEST_F(OnnxModels, TensorConstantsAreAddedTables) {
  make("constant_net");
  check_model(dir_, "constant_net");
}
// Products and quotients of data by per-channel constants, by a pooled map and by a norm's
// row statistics (row_mean), an RMSNorm's learned weight of the last axis, a gated linear unit,
// data less its row means and less data of its shape, a masked_fill with 0.25, a constant over
// data: mul_table, channel_scale and channel_shift by their axes, pow -1.
TEST_F(OnnxModels, BroadcastProductsAndRowMeans) {
  make("broadcast_net");
  check_model(dir_, "broadcast_net");
}
// Broadcasts that keep the last axes (Note [kept axes]): a learned [C, 1, 1] bias of an image, a
// spatial attention from the mean over channels, a learned offset subtracted, adaLN's scales
// and shifts [N, 1, D] of tokens from their mean over the tokens, a gated residual through erf,
// a quotient by [N, 1, D]: add_constant, row_mean, channel_scale and channel_shift with
// keep_last, the erf curve.
TEST_F(OnnxModels, ModulationsThatKeepTheLastAxes) {
  make("modulation_net");
  check_model(dir_, "modulation_net");
}
// Normalizations and pixel shuffles (Note [instance normalization], Note [parameter views]):
// nn.GroupNorm, nn.InstanceNorm2d with and without its affine, nn.LayerNorm over [C, H, W],
// nn.PixelShuffle (DepthToSpace) and nn.PixelUnshuffle.
TEST_F(OnnxModels, GroupInstanceAndImageLayerNormsAndPixelShuffles) {
  make("norm_net");
  check_model(dir_, "norm_net");
}
// F.interpolate by fractional and downsampling factors, with align_corners, bicubic, and
// PyTorch's nearest to a fractional size (Note [resize as linear maps]).
TEST_F(OnnxModels, InterpolationsAsLinearMaps) {
  make("resize_net");
  check_model(dir_, "resize_net");
}
// torch.chunk of channels read by two convolutions (Note [split gradients]) and torch.cat
// along H and W (concat with an axis).
TEST_F(OnnxModels, SplitsAndConcatenationsAlongEveryAxis) {
  make("split_net");
  check_model(dir_, "split_net");
}
// Float inputs that are not images: feature vectors [N, F] through a multilayer perceptron,
// signals [N, C, L] through a 1-D CNN (Note [signals]), float sequences [N, T, F] through a
// transformer.
TEST_F(OnnxModels, MultilayerPerceptronOverFeatures) {
  make("mlp_net");
  check_model(dir_, "mlp_net");
}
TEST_F(OnnxModels, OneDimensionalCnnOverSignals) {
  make("signal_net");
  check_model(dir_, "signal_net");
}
TEST_F(OnnxModels, TransformerOverFloatSequences) {
  make("sequence_net");
  check_model(dir_, "sequence_net");
}
// A class at each position (Note [per-position labels]): the same layers with the head at every
// token, logits [N, 16, 10] against labels [N, 16]. The file cannot say whether the classes are
// the last axis, so loss=token_xent says it; without it the import says how.
TEST_F(OnnxModels, TaggerOverFloatSequences) {
  make("tagger_net");
  const std::string e = import_error(exported("tagger_net"));
  EXPECT_NE(e.find("[16, 10] per sample of a float input [16, 6]: give `loss: token_xent`"),
            std::string::npos)
      << e;
  check_model(dir_, "tagger_net", {"loss=token_xent"});
}
// nn.LSTM unrolled over the steps (Note [unrolled recurrent layers]): two batch-first layers
// with biases and the head on the last step; two bidirectional layers without biases as a
// tagger (the first hands the second its steps, the directions joined per step).
// The import of `path` (with `overrides`): its `concat` layers, and its `channel_slice`s along T
// of anything but the model's input.
std::pair<int, int> joins_and_inner_slices(const std::string& path,
                                           std::vector<std::string> overrides = {}) {
  overrides.push_back("batch=4");
  const ModelConfig cfg = load_model_config(path, overrides);
  int joins = 0, inner_slices = 0;
  for (const LayerConfig& l : cfg.layers) {
    joins += l.op == "concat";
    const auto axis = l.attrs.values.find("axis");  // default 1
    if (l.op == "channel_slice" &&
        (axis == l.attrs.values.end() || std::get<int64_t>(axis->second) == 1))
      inner_slices += l.inputs.at(0) != kModelInputName;
  }
  return {joins, inner_slices};
}
TEST_F(OnnxModels, LstmLayersUnrolled) {
  make("lstm_net");
  check_model(dir_, "lstm_net");
  // The second layer reads the first one's steps as they are (Note [per-step sequences]): one
  // `concat` (the second layer's steps, for the head), and along T only the model's input and
  // that join (the head's last step) are sliced.
  const auto [joins, inner_slices] = joins_and_inner_slices(dir_ + "/lstm_net.onnx");
  EXPECT_EQ(joins, 1);
  EXPECT_LE(inner_slices, 1);
}
TEST_F(OnnxModels, BidirectionalLstmTagger) {
  make("bilstm_tagger");
  check_model(dir_, "bilstm_tagger", {"loss=token_xent"});
  // The first layer's directions joined per step (4 steps) for the second, whose directions are
  // joined along T and then along the features for the head; nothing sliced along T inside.
  const auto [joins, inner_slices] = joins_and_inner_slices(dir_ + "/bilstm_tagger.onnx",
                                                            {"loss=token_xent"});
  EXPECT_EQ(joins, 4 + 3);
  EXPECT_EQ(inner_slices, 0);
}
// What the unrolling does not take is an error naming the LSTM node and the reason.
TEST_F(OnnxModels, LstmFormsOutsideTheUnrollingAreNamed) {
  make("lstm_net");
  auto first_lstm = [](onnx::ModelProto& m) {
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "LSTM") return &n;
    ADD_FAILURE() << "no LSTM node";
    return static_cast<onnx::NodeProto*>(nullptr);
  };
  auto error_with = [&](const std::function<void(onnx::ModelProto&, onnx::NodeProto&)>& change) {
    onnx::ModelProto m = exported("lstm_net");
    onnx::NodeProto* n = first_lstm(m);
    if (!n) return std::string();
    change(m, *n);
    return import_error(m);
  };
  std::string e = error_with([](onnx::ModelProto&, onnx::NodeProto& n) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name("clip");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(3);
  });
  EXPECT_NE(e.find("(LSTM, opset 14): LSTM: attribute 'clip' is not supported"), std::string::npos)
      << e;
  e = error_with([](onnx::ModelProto&, onnx::NodeProto& n) { n.set_input(4, n.input(0)); });
  EXPECT_NE(e.find("sequence_lens (a packed sequence) is not supported"), std::string::npos) << e;
  e = error_with([](onnx::ModelProto& m, onnx::NodeProto&) {  // the states 1 rather than zeros
    for (auto& c : *m.mutable_graph()->mutable_node())
      if (c.op_type() == "ConstantOfShape") {  // (sliced per layer)
        c.clear_attribute();
        onnx::AttributeProto* a = c.add_attribute();
        a->set_name("value");
        a->set_type(onnx::AttributeProto::TENSOR);
        a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
        a->mutable_t()->add_dims(1);
        a->mutable_t()->add_float_data(1.0f);
      }
  });
  EXPECT_NE(e.find("initial_h is not zeros"), std::string::npos) << e;
  e = error_with([](onnx::ModelProto& m, onnx::NodeProto& n) {  // the final h read by a node
    const std::string h = n.output(1);  // (n moves when the graph's nodes grow)
    onnx::NodeProto* r = m.mutable_graph()->add_node();
    r->set_op_type("Relu");
    r->add_input(h);
    r->add_output("h_relu");
  });
  EXPECT_NE(e.find("Y_h (the final state"), std::string::npos) << e;
  // A bidirectional layer's weights joined along another axis than the directions'.
  make("bilstm_tagger");
  onnx::ModelProto m = exported("bilstm_tagger");
  onnx::NodeProto* n = first_lstm(m);
  ASSERT_NE(n, nullptr);
  const std::string w = n->input(1);
  for (auto& c : *m.mutable_graph()->mutable_node())
    if (c.op_type() == "Concat" && c.output(0) == w)
      for (auto& a : *c.mutable_attribute())
        if (a.name() == "axis") a.set_i(1);
  e = import_error(m);
  EXPECT_NE(e.find("its weights are not module parameters as PyTorch exports them"),
            std::string::npos) << e;
}
// nn.GRU unrolled the same way: two batch-first layers with biases (at the first step b_hh
// alone, for the reset gate's product), the head on the last step; two bidirectional GRU
// layers without biases as a tagger.
TEST_F(OnnxModels, GruLayersUnrolled) {
  make("gru_net");
  check_model(dir_, "gru_net");
}
TEST_F(OnnxModels, BidirectionalGruTagger) {
  make("bigru_tagger");
  check_model(dir_, "bigru_tagger", {"loss=token_xent"});
}
// The GRU's forms outside the unrolling: ONNX's default cell (the reset gate before R), a
// non-zero initial state (the fixed-batch export's zeros Constant, expanded to the batch), a
// read of Y_h.
TEST_F(OnnxModels, GruFormsOutsideTheUnrollingAreNamed) {
  make("bigru_tagger");
  auto error_with = [&](const std::function<void(onnx::ModelProto&, onnx::NodeProto&)>& change) {
    onnx::ModelProto m = exported("bigru_tagger");
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "GRU") {
        change(m, n);
        return import_error(m);
      }
    ADD_FAILURE() << "no GRU node";
    return std::string();
  };
  std::string e = error_with([](onnx::ModelProto&, onnx::NodeProto& n) {
    for (auto& a : *n.mutable_attribute())
      if (a.name() == "linear_before_reset") a.set_i(0);
  });
  EXPECT_NE(e.find("(GRU, opset 14): GRU: linear_before_reset 0"), std::string::npos) << e;
  e = error_with([](onnx::ModelProto& m, onnx::NodeProto&) {  // the zeros made ones
    for (auto& c : *m.mutable_graph()->mutable_node()) {
      if (c.op_type() != "Constant" || c.attribute_size() != 1) continue;
      onnx::TensorProto* t = c.mutable_attribute(0)->mutable_t();
      if (t->data_type() != onnx::TensorProto::FLOAT || t->dims_size() != 3) continue;
      const std::string raw = t->raw_data();
      std::vector<float> ones(raw.size() / sizeof(float), 1.0f);
      t->set_raw_data(std::string(reinterpret_cast<const char*>(ones.data()), raw.size()));
    }
  });
  EXPECT_NE(e.find("initial_h is not zeros (an initial state passed to nn.GRU"),
            std::string::npos) << e;
  e = error_with([](onnx::ModelProto& m, onnx::NodeProto& n) {  // the final h read by a node
    const std::string h = n.output(1);
    onnx::NodeProto* r = m.mutable_graph()->add_node();
    r->set_op_type("Relu");
    r->add_input(h);
    r->add_output("h_relu");
  });
  EXPECT_NE(e.find("Y_h (the final state, `_, h = gru(x)`)"), std::string::npos) << e;
}
// Transposed convolutions (stride 2, padding, output_padding; grouped without a bias) in a
// small U-Net with the per-pixel loss.
TEST_F(OnnxModels, UNetConvTranspose) {
  make("unet_tiny");
  check_model(dir_, "unet_tiny");
}
// A segmentation model: dilated convolutions, a bilinear Resize back to the input size
// (upsample), the per-pixel loss.
TEST_F(OnnxModels, FcnResNet50Segmentation) {
  make("fcn_resnet50");
  check_model(dir_, "fcn_resnet50");
}
// Channel shuffles become channel_shuffle, torch.chunk's Slices channel_slice.
TEST_F(OnnxModels, ShuffleNetV2) {
  make("shufflenet_v2_x0_5");
  check_model(dir_, "shufflenet_v2_x0_5");
  check_eval(dir_, "shufflenet_v2_x0_5");
}

}  // namespace
}  // namespace remat
