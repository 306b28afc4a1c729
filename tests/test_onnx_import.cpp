// The ONNX importer on models built here with ONNX's own messages (tests/onnx_builder.h): the
// layers, names and weights of an import; a batch the import leaves open (Note [ONNX constant
// folding]); the default config; and one clear error for each kind of bad file or model.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "models/build.h"
#include "models/config.h"
#include "models/initial_values.h"
#include "models/onnx/onnx_const.h"
#include "models/onnx/onnx_source.h"
#include "ops/registry.h"
#include "runtime/executor.h"
#include "runtime/graph/autodiff.h"
#include "tests/model_test_util.h"
#include "tests/onnx_builder.h"

namespace remat {
namespace {

using test::onnx_node;
using test::onnx_small_cnn;

// small_cnn's model with its graph emptied but for the input x and output y of these dims: a
// graph the test fills.
onnx::ModelProto bare_model(std::vector<std::string> x, std::vector<std::string> y) {
  onnx::ModelProto m = onnx_small_cnn();
  onnx::GraphProto* g = m.mutable_graph();
  g->clear_node();
  g->clear_initializer();
  g->clear_input();
  g->clear_output();
  test::onnx_value(g->add_input(), "x", x);
  test::onnx_value(g->add_output(), "y", y);
  return m;
}

class OnnxImport : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/remat-onnx-import-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const onnx::ModelProto& m, const std::string& name = "m.onnx") {
    const std::string p = dir_ + "/" + name;
    test::onnx_write(m, p);
    return p;
  }
  // The UserError loading `m` raises ("" and a failure when it loads).
  std::string error_of(const onnx::ModelProto& m, std::vector<std::string> overrides = {"batch=2"}) {
    const std::string p = write(m);
    return test::user_error([&] { load_model_config(p, overrides); });
  }
  std::string dir_;
};

TEST_F(OnnxImport, SmallCnnBecomesLayersWithItsNamesAndWeights) {
  const ModelConfig cfg = load_model_config(write(onnx_small_cnn()), {"batch=4"});
  std::vector<std::string> ops;
  for (const LayerConfig& l : cfg.layers) ops.push_back(l.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"conv2d", "relu", "maxpool", "global_avgpool", "dense"}));
  EXPECT_EQ(cfg.layers[0].name, "conv");
  EXPECT_EQ(cfg.layers.back().name, "fc");
  EXPECT_EQ(cfg.input, (Shape{3, 8, 8}));
  EXPECT_EQ(cfg.classes, 10);
  EXPECT_EQ(cfg.loss, "softmax_xent");
  EXPECT_EQ(cfg.batch, 4);
  ASSERT_TRUE(cfg.initial_values);
  EXPECT_EQ(cfg.initial_values->size(), 4u);

  // The weights are the file's, under the file's names.
  const OpRegistry ops_r = make_builtin_registry();
  const Graph g = make_training_graph(build_forward_graph(cfg, ops_r), ops_r, cfg.optimizer.op,
                                      cfg.optimizer.attrs);
  for (const char* p : {"conv.weight", "conv.bias", "fc.weight", "fc.bias"}) {
    const ValueId v = g.find_value(p);
    ASSERT_NE(v, kNoValue) << p;
    EXPECT_EQ(g.value(v).kind, ValueKind::Param) << p;
  }
  std::unique_ptr<Backend> be = make_cpu_backend();
  Executor ex(g, ops_r, *be);
  ex.init_parameters(cfg.seed);
  EXPECT_EQ(write_initial_values(ex, cfg), 4);
  const onnx::TensorProto w = test::onnx_floats("conv.weight", {4, 3, 3, 3}, -0.2f);
  const std::vector<float> got = ex.read(g.find_value("conv.weight"));
  ASSERT_EQ(got.size(), static_cast<size_t>(w.float_data_size()));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], w.float_data(static_cast<int>(i)));
}

// torch's x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat and Reshape fold into a
// flatten that keeps the batch, so one import serves every batch.
TEST_F(OnnxImport, ShapeArithmeticFoldsAndTheBatchStaysOpen) {
  onnx::ModelProto m = onnx_small_cnn();
  onnx::GraphProto* g = m.mutable_graph();
  for (auto& n : *g->mutable_node())
    if (n.op_type() == "Flatten") {  // becomes Reshape(gap, Concat(Unsqueeze(Shape(gap)[0]), [-1]))
      n.set_op_type("Reshape");
      n.clear_attribute();
      n.add_input("target");
    }
  *g->add_initializer() = test::onnx_ints("zero", {0});
  *g->add_initializer() = test::onnx_ints("minus_one", {-1});
  onnx::GraphProto nodes;
  onnx_node(&nodes, "Shape", {"gap"}, {"shape"});
  onnx_node(&nodes, "Gather", {"shape", "zero"}, {"n"});
  test::onnx_attr(onnx_node(&nodes, "Concat", {"n", "minus_one"}, {"target"}), "axis", int64_t{0});
  // Insert the shape nodes before the Reshape (index of Flatten's place: 4).
  auto* all = g->mutable_node();
  for (int k = 0; k < nodes.node_size(); ++k) {
    *all->Add() = nodes.node(k);
    for (int j = all->size() - 1; j > 4 + k; --j) all->SwapElements(j, j - 1);
  }
  const ModelConfig cfg = load_model_config(write(m), {"batch=2"});
  const OpRegistry ops = make_builtin_registry();
  for (int64_t n : {2, 5}) {
    BuildOptions bo;
    bo.batch = n;
    const Graph g2 = build_forward_graph(cfg, ops, bo);
    EXPECT_EQ(g2.value(g2.find_value("fc")).desc.shape, (Shape{n, 10}));
  }
}

// The batch N (>= 1) never equals -1 or 0: such an Equal folds to false (the exporter tests an
// expanded size against -1); one that holds for some N cannot fold.
TEST(OnnxFold, EqualOfTheBatchAndAValueItNeverTakesIsFalse) {
  const OnnxConst n = const_ints({{1, 0}}, {});
  for (int64_t never : {-1, 0}) {
    const OnnxConst r = fold_binary("Equal", n, const_ints({{0, never}}, {}), "test");
    ASSERT_EQ(r.i.size(), 1u);
    EXPECT_EQ(r.i[0], (SymInt{0, 0})) << never;
  }
  EXPECT_EQ(fold_binary("Equal", const_ints({{2, 1}}, {}), const_ints({{0, 4}}, {}), "test").i[0],
            (SymInt{0, 0}));  // 2N + 1 is odd
  const std::string e = test::user_error([&] { fold_binary("Equal", n, const_ints({{0, 4}}, {}), "test"); });
  EXPECT_NE(e.find("Equal of N and 4 cannot be folded"), std::string::npos) << e;
}

TEST_F(OnnxImport, DefaultConfigTakesTheBatchFromTheCommandLineOrTheExport) {
  const std::string dynamic = write(onnx_small_cnn());
  EXPECT_NE(test::user_error([&] { load_model_config(dynamic); }).find("give --batch N"),
            std::string::npos);
  onnx::ModelProto m = onnx_small_cnn();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(0)->set_dim_value(3);
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(0)->set_dim_value(3);
  const ModelConfig cfg = load_model_config(write(m, "static.onnx"));
  EXPECT_EQ(cfg.batch, 3);
  EXPECT_EQ(cfg.name, "static");
}

TEST_F(OnnxImport, ConfigFileNamesTheModelAndKeepsItsOtherSections) {
  write(onnx_small_cnn(), "net.onnx");
  const std::string yaml = dir_ + "/net.yaml";
  std::ofstream(yaml) << "name: net\nmodel: {onnx: net.onnx}\nbatch: 8\nprecision: bf16\n"
                         "layout: channels_last\noptimizer: {op: adam, lr: 0.001}\n";
  const ModelConfig cfg = load_model_config(yaml);
  EXPECT_EQ(cfg.batch, 8);
  EXPECT_EQ(cfg.optimizer.op, "adam");
  const OpRegistry ops = make_builtin_registry();
  const Graph g = build_forward_graph(cfg, ops);  // bf16 and channels-last build over it
  EXPECT_EQ(g.activation_precision(), DType::BF16);
  std::ofstream(yaml) << "name: net\nmodel: {onnx: net.onnx}\nbatch: 8\nlayers: []\n";
  EXPECT_NE(test::user_error([&] { load_model_config(yaml); }).find("not both"), std::string::npos);
  std::ofstream(yaml) << "name: net\nmodel: {onnx: net.onnx}\nbatch: 8\nclasses: 3\n";
  EXPECT_NE(test::user_error([&] { load_model_config(yaml); }).find("comes from the ONNX model"),
            std::string::npos);
  // model.buffers (Note [module buffers]): a list of the file's initializers.
  std::ofstream(yaml) << "name: net\nmodel: {onnx: net.onnx, buffers: conv1.weight}\nbatch: 8\n";
  EXPECT_NE(test::user_error([&] { load_model_config(yaml); })
                .find("net.yaml:2:34: model: buffers: expected a list of initializer names"),
            std::string::npos);
  std::ofstream(yaml) << "name: net\nmodel: {onnx: net.onnx, buffers: [gamma]}\nbatch: 8\n";
  EXPECT_NE(test::user_error([&] { load_model_config(yaml); })
                .find("buffer 'gamma' is not an initializer of the file"),
            std::string::npos);
  std::ofstream(yaml) << "name: net\nmodel: {onnx: net.onnx, weights: [a]}\nbatch: 8\n";
  EXPECT_NE(test::user_error([&] { load_model_config(yaml); })
                .find("unknown key 'weights' (known: onnx, buffers)"),
            std::string::npos);
}

TEST_F(OnnxImport, PerPixelOutputTrainsWithThePixelLoss) {
  onnx::ModelProto m = onnx_small_cnn();
  onnx::GraphProto* g = m.mutable_graph();
  while (g->node_size() > 1) g->mutable_node()->RemoveLast();  // Conv alone: [N, 4, 8, 8]
  g->mutable_node(0)->set_output(0, "y");
  g->clear_output();
  test::onnx_value(g->add_output(), "y", {"batch", "4", "8", "8"});
  const ModelConfig cfg = load_model_config(write(m), {"batch=2"});
  EXPECT_EQ(cfg.loss, "softmax_xent_pixel");
  EXPECT_EQ(cfg.classes, 4);
}

// A classifier that ends in F.log_softmax (trained with nll_loss in PyTorch): the LogSoftmax
// output is its input, the same layers as without it (Note [log-softmax output]); a LogSoftmax
// that the graph reads further, or over another axis, is an error.
TEST_F(OnnxImport, ALogSoftmaxOutputIsTheLogitsTheLossReads) {
  const auto with_log_softmax = [](int64_t axis, bool read_after) {
    onnx::ModelProto m = onnx_small_cnn();
    onnx::GraphProto* g = m.mutable_graph();
    g->mutable_node(g->node_size() - 1)->set_output(0, "logits");
    onnx::NodeProto* ls = onnx_node(g, "LogSoftmax", {"logits"}, {read_after ? "ls" : "y"},
                                    "/LogSoftmax");
    test::onnx_attr(ls, "axis", axis);
    if (read_after) onnx_node(g, "Relu", {"ls"}, {"y"}, "/Relu");
    return m;
  };
  const ModelConfig plain = load_model_config(write(onnx_small_cnn(), "plain.onnx"), {"batch=2"});
  const ModelConfig cfg = load_model_config(write(with_log_softmax(1, false)), {"batch=2"});
  ASSERT_EQ(cfg.layers.size(), plain.layers.size());
  for (size_t k = 0; k < cfg.layers.size(); ++k) EXPECT_EQ(cfg.layers[k].op, plain.layers[k].op);
  EXPECT_EQ(cfg.loss, "softmax_xent");
  EXPECT_EQ(cfg.classes, 10);
  EXPECT_EQ(load_model_config(write(with_log_softmax(-1, false)), {"batch=2"}).layers.size(),
            plain.layers.size());
  EXPECT_NE(error_of(with_log_softmax(1, true))
                .find("node '/LogSoftmax' (LogSoftmax, opset 13): a LogSoftmax is supported only "
                      "as the model's output"),
            std::string::npos);
  EXPECT_NE(error_of(with_log_softmax(0, false)).find("a LogSoftmax over axis 0 of the output [10]"),
            std::string::npos);
}

// A signal [N, 4, 16] (Note [signals]): Conv with a 1-D kernel, MaxPool, Resize by [1, 1, 2] and
// GlobalAveragePool run as the 2-D ops on [N, C, 1, L] without reshapes between them; a 2-D
// weight or window of a signal is an error.
TEST_F(OnnxImport, OneDimensionalOpsOfASignalAreTheTwoDimensionalOnes) {
  const auto signal_model = [](std::vector<int64_t> weight, std::vector<int64_t> window) {
    onnx::ModelProto m = bare_model({"batch", "4", "16"}, {"batch", "5"});
    onnx::GraphProto* g = m.mutable_graph();
    *g->add_initializer() = test::onnx_floats("conv.weight", weight, -0.2f);
    *g->add_initializer() = test::onnx_floats("fc.weight", {5, 8}, -0.1f);
    *g->add_initializer() = test::onnx_float_list("onnx::Resize_1", {1, 1, 2});
    test::onnx_attr(onnx_node(g, "Conv", {"x", "conv.weight"}, {"c"}, "/conv/Conv"), "pads",
                    std::vector<int64_t>{1, 1});
    test::onnx_attr(onnx_node(g, "MaxPool", {"c"}, {"p"}, "/pool/MaxPool"), "kernel_shape", window);
    onnx_node(g, "Resize", {"p", "", "onnx::Resize_1"}, {"u"}, "/Resize");
    onnx_node(g, "GlobalAveragePool", {"u"}, {"gap"}, "/gap/GlobalAveragePool");
    test::onnx_attr(onnx_node(g, "Flatten", {"gap"}, {"flat"}, "/Flatten"), "axis", int64_t{1});
    test::onnx_attr(onnx_node(g, "Gemm", {"flat", "fc.weight"}, {"y"}, "/fc/Gemm"), "transB",
                    int64_t{1});
    return m;
  };
  const ModelConfig cfg = load_model_config(write(signal_model({8, 4, 3}, {2})), {"batch=2"});
  std::vector<std::string> ops;
  for (const LayerConfig& l : cfg.layers) ops.push_back(l.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"reshape", "conv2d", "maxpool", "upsample",
                                           "global_avgpool", "dense"}));
  EXPECT_EQ(cfg.input, (Shape{4, 16}));
  EXPECT_EQ(cfg.export_dims.at("conv.weight"), (Shape{8, 4, 3}));
  EXPECT_NE(error_of(signal_model({8, 4, 3, 3}, {2})).find("only 1-D convolutions of such data"),
            std::string::npos);
  EXPECT_NE(error_of(signal_model({8, 4, 3}, {2, 2}))
                .find("kernel_shape must have one size (a 1-D pooling of [N, C, L])"),
            std::string::npos);
}

TEST_F(OnnxImport, OpenSpatialAxesNeedAnInputSize) {
  onnx::ModelProto m = onnx_small_cnn();
  auto* shape = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(2)->set_dim_param("height");
  shape->mutable_dim(3)->set_dim_param("width");
  const std::string e = error_of(m);
  EXPECT_NE(e.find("dynamic axis 2 ('height')"), std::string::npos) << e;
  EXPECT_NE(e.find("--input CxHxW"), std::string::npos) << e;
  const ModelConfig cfg = load_model_config(write(m), {"batch=2", "input=[3,16,16]"});
  EXPECT_EQ(cfg.input, (Shape{3, 16, 16}));
  BuildOptions bo;
  bo.input = Shape{3, 12, 12};  // another size imports again
  const OpRegistry ops = make_builtin_registry();
  const Graph g = build_forward_graph(cfg, ops, bo);
  EXPECT_EQ(g.value(g.input).desc.shape, (Shape{2, 3, 12, 12}));
}

TEST_F(OnnxImport, BadFilesAreClearErrors) {
  const std::string text = dir_ + "/text.onnx";
  std::ofstream(text) << "name: not a model\n";
  std::string e = test::user_error([&] { load_model_config(text, {"batch=2"}); });
  EXPECT_NE(e.find("text.onnx: not an ONNX model"), std::string::npos) << e;

  std::string bytes;
  onnx_small_cnn().SerializeToString(&bytes);
  const std::string cut = dir_ + "/cut.onnx";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  e = test::user_error([&] { load_model_config(cut, {"batch=2"}); });
  EXPECT_NE(e.find("cut.onnx"), std::string::npos) << e;

  const std::string fifo = dir_ + "/fifo.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  e = test::user_error([&] { load_model_config(fifo, {"batch=2"}); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;

  e = error_of(onnx_small_cnn(18));
  EXPECT_NE(e.find("opset 18"), std::string::npos) << e;
  EXPECT_NE(e.find("13 to 17"), std::string::npos) << e;
  e = error_of(onnx_small_cnn(12));
  EXPECT_NE(e.find("opset 12"), std::string::npos) << e;
}

TEST_F(OnnxImport, AnInitializerWhoseBytesDisagreeWithItsDims) {
  onnx::ModelProto m = onnx_small_cnn();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(10, '\0'));
  const std::string e = error_of(m);
  EXPECT_NE(e.find("conv.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("10 bytes"), std::string::npos) << e;
}

TEST_F(OnnxImport, ACycleOrAnInputNothingProducesIsRefusedByTheChecker) {
  onnx::ModelProto cycle = onnx_small_cnn();
  cycle.mutable_graph()->mutable_node(1)->set_input(0, "p");  // Relu reads MaxPool's output
  std::string e = error_of(cycle);
  EXPECT_NE(e.find("invalid ONNX model"), std::string::npos) << e;
  EXPECT_NE(e.find("topologically sorted"), std::string::npos) << e;
  onnx::ModelProto dangling = onnx_small_cnn();
  dangling.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  e = error_of(dangling);
  EXPECT_NE(e.find("nowhere"), std::string::npos) << e;
}

TEST_F(OnnxImport, AnUnsupportedOpNamesTheNodeAndListsWhatIsSupported) {
  onnx::ModelProto m = onnx_small_cnn();
  m.mutable_graph()->mutable_node(1)->set_op_type("Selu");
  const std::string e = error_of(m);
  EXPECT_NE(e.find("node '/relu/Relu' (Selu, opset 13): unsupported op"), std::string::npos) << e;
  EXPECT_NE(e.find("supported: "), std::string::npos) << e;
  EXPECT_NE(e.find("Conv"), std::string::npos) << e;
}

// The domain "remat" is the importer's own (its pattern nodes): a file's node of it is refused by
// name, whatever its op type.
TEST_F(OnnxImport, AFilesNodeOfTheRematDomainIsRefused) {
  for (const char* op : {"Dense", "MultiheadAttention", "Bogus"}) {
    onnx::ModelProto m = onnx_small_cnn();
    auto* d = m.add_opset_import();
    d->set_domain("remat");
    d->set_version(1);
    m.mutable_graph()->mutable_node(1)->set_op_type(op);
    m.mutable_graph()->mutable_node(1)->set_domain("remat");
    const std::string e = error_of(m);
    EXPECT_NE(e.find(std::string("node '/relu/Relu' (") + op + "): ops of domain 'remat' are not supported"),
              std::string::npos) << e;
  }
}

// N * N cannot be a dimension of a static plan: the error names the node.
TEST_F(OnnxImport, AShapeThatIsNotAffineInTheBatchIsRefused) {
  onnx::ModelProto m = onnx_small_cnn();
  onnx::GraphProto* g = m.mutable_graph();
  *g->add_initializer() = test::onnx_ints("zero", {0});
  g->mutable_node(4)->set_op_type("Reshape");  // the Flatten
  g->mutable_node(4)->clear_attribute();
  g->mutable_node(4)->add_input("target");
  onnx::GraphProto extra;
  onnx_node(&extra, "Shape", {"gap"}, {"shape"});
  onnx_node(&extra, "Gather", {"shape", "zero"}, {"n"});
  onnx_node(&extra, "Mul", {"n", "n"}, {"target"}, "/squared");
  auto* all = g->mutable_node();
  for (int k = 0; k < extra.node_size(); ++k) {
    *all->Add() = extra.node(k);
    for (int j = all->size() - 1; j > 4 + k; --j) all->SwapElements(j, j - 1);
  }
  const std::string e = error_of(m);
  EXPECT_NE(e.find("node '/squared' (Mul, opset 13)"), std::string::npos) << e;
  EXPECT_NE(e.find("batch"), std::string::npos) << e;
}

// Logits per position of a float sequence ([N, 16, 6] in, [N, 16, 10] out): [T, K] or [K, T]
// cannot be told from the file, so the config says it (Note [per-position labels]); without
// `loss` the error says how. With `loss: token_xent` the classes are the last axis and the labels
// [N, T].
TEST_F(OnnxImport, PerPositionLogitsOfAFloatSequenceTakeTokenXentWhenTheConfigSaysSo) {
  onnx::ModelProto m = bare_model({"batch", "16", "6"}, {"batch", "16", "10"});
  onnx::GraphProto* g = m.mutable_graph();
  *g->add_initializer() = test::onnx_floats("fc.weight", {6, 10}, -0.1f);
  test::onnx_node(g, "MatMul", {"x", "fc.weight"}, {"y"}, "/fc/MatMul");
  const std::string e = error_of(m);
  EXPECT_NE(e.find("the output is [16, 10] per sample of a float input [16, 6]: give `loss: "
                   "token_xent` (a config's key, or loss=token_xent) to read it as [T, K]"),
            std::string::npos)
      << e;
  const ModelConfig cfg = load_model_config(write(m), {"batch=2", "loss=token_xent"});
  EXPECT_EQ(cfg.loss, "token_xent");
  EXPECT_EQ(cfg.classes, 10);
  EXPECT_EQ(cfg.input, (Shape{16, 6}));
  const Graph fwd = build_forward_graph(cfg, make_builtin_registry());
  EXPECT_EQ(fwd.value(fwd.label).desc.shape, (Shape{2, 16}));
}

TEST_F(OnnxImport, ModelsOfSeveralOutputsOrInputsAreRefused) {
  onnx::ModelProto m = onnx_small_cnn();
  test::onnx_value(m.mutable_graph()->add_output(), "gap", {"batch", "4", "1", "1"});
  std::string e = error_of(m);
  EXPECT_NE(e.find("2 outputs"), std::string::npos) << e;
  onnx::ModelProto two = onnx_small_cnn();
  test::onnx_value(two.mutable_graph()->add_input(), "mask", {"batch", "10"});
  e = error_of(two);
  EXPECT_NE(e.find("2 inputs"), std::string::npos) << e;
}

}  // namespace
}  // namespace remat
