// The model zoo (configs/*.yaml): every network loads, builds its forward and training graphs at
// full size (shapes only), has the reference parameter count and structure, and trains one CPU
// step at a small input size with a finite loss. linear16.yaml is make_chain's output.
#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/source_dir.h"
#include "tests/zoo_reference_counts.h"
#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/backends/backend.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "runtime/memory/plan.h"
#include "tools/planning/chain_yaml.h"

namespace remat {
namespace {

std::string config_path(const std::string& name) {
  return test_source_dir() + "/configs/" + name + ".yaml";
}

using namespace test;  // the reference counts (tests/zoo_reference_counts.h)

struct ZooCase {
  std::string name;
  int64_t trainable;   // sum of Param numel
  int64_t buffers;     // sum of Buffer numel (batch-norm running statistics)
  Shape full_output;   // last layer's output at full size and the config's batch
  std::map<std::string, int> forward_ops;  // forward node counts by op
  Shape small_input;   // per-sample [C, H, W] for the CPU step
  int64_t small_batch;
};

std::vector<ZooCase> zoo_cases() {
  std::vector<ZooCase> z;
  // Keras: VGG16 138,357,544; VGG19 143,667,240 (no batch-norm).
  z.push_back({"vgg16", 138357544, 0, {64, 1000},
               {{"conv2d", 13}, {"maxpool", 5}, {"dense", 3}, {"flatten", 1}}, {3, 32, 32}, 2});
  z.push_back({"vgg19", 143667240, 0, {64, 1000},
               {{"conv2d", 16}, {"maxpool", 5}, {"dense", 3}, {"flatten", 1}}, {3, 32, 32}, 2});
  // Keras MobileNet: 4,253,864 total = 4,231,976 trainable + 21,888 non-trainable (the moving
  // mean/variance). Our Params are the trainable ones; running statistics are Buffers.
  z.push_back({"mobilenet", 4231976, 21888, {64, 1000},
               {{"conv2d", 27}, {"batchnorm", 27}, {"relu6", 27}, {"global_avgpool", 1},
                {"dropout", 1}, {"dense", 1}},
               {3, 32, 32}, 2});
  // Keras ResNet50: 25,636,712 total = 25,583,592 trainable + 53,120 non-trainable.
  z.push_back({"resnet50", 25583592, 53120, {64, 1000},
               {{"conv2d", 53}, {"batchnorm", 53}, {"add", 16}, {"relu", 49}, {"maxpool", 1},
                {"global_avgpool", 1}, {"dense", 1}},
               {3, 32, 32}, 2});
  z.push_back({"unet", unet_conv_params() + 2 * kSegDecoderBnChannels, 2 * kSegDecoderBnChannels,
               {8, kSegClasses, 208, 304},
               {{"conv2d", 15}, {"maxpool", 4}, {"batchnorm", 4}, {"upsample", 3}, {"concat", 3}},
               {3, 32, 32}, 2});
  z.push_back({"segnet", segnet_conv_params() + 2 * kSegDecoderBnChannels,
               2 * kSegDecoderBnChannels, {8, kSegClasses, 208, 304},
               {{"conv2d", 15}, {"maxpool", 4}, {"batchnorm", 4}, {"relu", 4}, {"upsample", 3}},
               {3, 32, 32}, 2});
  z.push_back({"fcn8", fcn8_params(), 0, {8, kSegClasses, 416, 608},
               {{"conv2d", 21}, {"maxpool", 5}, {"upsample", 3}, {"add", 2}, {"dropout", 2}},
               {3, 32, 32}, 1});
  // Keras's applications (model.summary(): trainable, non-trainable = the BN moving statistics).
  // DenseNet121: 8,062,504 = 7,978,856 + 83,648; 169: 14,307,880 = 14,149,480 + 158,400;
  // 201: 20,242,984 = 20,013,928 + 229,056. Convs: the stem, 2 per conv block, 3 transitions.
  const Shape s32 = {3, 32, 32};
  z.push_back({"densenet121", 7978856, 83648, {64, 1000},
               {{"conv2d", 120}, {"batchnorm", 121}, {"concat", 58}, {"avgpool", 3}, {"maxpool", 1}},
               s32, 2});
  z.push_back({"densenet169", 14149480, 158400, {64, 1000},
               {{"conv2d", 168}, {"batchnorm", 169}, {"concat", 82}, {"avgpool", 3}}, s32, 2});
  z.push_back({"densenet201", 20013928, 229056, {64, 1000},
               {{"conv2d", 200}, {"batchnorm", 201}, {"concat", 98}, {"avgpool", 3}}, s32, 2});
  // ResNet101: 44,707,176 = 44,601,832 + 105,344; ResNet152: 60,419,944 = 60,268,520 + 151,424.
  z.push_back({"resnet101", 44601832, 105344, {64, 1000},
               {{"conv2d", 104}, {"batchnorm", 104}, {"add", 33}, {"relu", 100}}, s32, 2});
  z.push_back({"resnet152", 60268520, 151424, {64, 1000},
               {{"conv2d", 155}, {"batchnorm", 155}, {"add", 50}, {"relu", 151}}, s32, 2});
  // ResNet50V2: 25,613,800 = 25,568,360 + 45,440; 101V2: 44,675,560 = 44,577,896 + 97,664;
  // 152V2: 60,380,648 = 60,236,904 + 143,744. One zero padding (before the first max pool),
  // and a 1x1 max pool as the shortcut of each stage's strided last block.
  z.push_back({"resnet50_v2", 25568360, 45440, {64, 1000},
               {{"conv2d", 53}, {"batchnorm", 49}, {"add", 16}, {"zeropad", 1}, {"maxpool", 4}}, s32, 2});
  z.push_back({"resnet101_v2", 44577896, 97664, {64, 1000},
               {{"conv2d", 104}, {"batchnorm", 100}, {"add", 33}, {"zeropad", 1}, {"maxpool", 4}}, s32, 2});
  z.push_back({"resnet152_v2", 60236904, 143744, {64, 1000},
               {{"conv2d", 155}, {"batchnorm", 151}, {"add", 50}, {"zeropad", 1}, {"maxpool", 4}}, s32, 2});
  // MobileNetV2: 3,538,984 = 3,504,872 + 34,112 (17 inverted residual blocks, 10 of them added
  // to their input).
  z.push_back({"mobilenet_v2", 3504872, 34112, {512, 1000},
               {{"conv2d", 52}, {"batchnorm", 52}, {"relu6", 35}, {"add", 10}}, s32, 2});
  // InceptionV3: 23,851,784 = 23,817,352 + 34,432 (94 conv2d_bn, 11 mixed blocks; Keras needs an
  // input of at least 75x75).
  z.push_back({"inception_v3", 23817352, 34432, {64, 1000},
               {{"conv2d", 94}, {"batchnorm", 94}, {"relu", 94}, {"concat", 15}, {"avgpool", 9},
                {"maxpool", 4}},
               {3, 75, 75}, 2});
  // Xception: 22,910,480 = 22,855,952 + 54,528 (34 separable convs as depthwise + pointwise
  // pairs, 4 strided 1x1 shortcuts, 2 stem convs; at least 71x71).
  z.push_back({"xception", 22855952, 54528, {64, 1000},
               {{"conv2d", 74}, {"batchnorm", 40}, {"maxpool", 4}, {"add", 12}}, {3, 71, 71}, 2});
  // NASNetMobile: 5,326,716 = 5,289,978 + 36,738; NASNetLarge: 88,949,818 = 88,753,150 + 196,668.
  // Convs: each cell has a 1x1 conv and 5 separable blocks of 2 separable convs (4 conv2d); p's
  // adjustment adds 2 convs when it halves p (the first cell after a reduction, stem_2), 1 when
  // it projects p (every other cell but stem_1). Mobile: stem 1, stem_1 21, stem_2 23, 3 x 23,
  // 9 x 22, 2 reductions x 22 = 356; Large (6 cells per stage): 1 + 21 + 23 + 3 x 23 + 15 x 22 +
  // 2 x 22 = 488. A concat per cell and per halving adjustment, which pads and crops once; each
  // of the 4 reduction cells zero-pads h once for its two max pools and its strided average pool;
  // average pools: 2 per halving adjustment and per reduction cell, 3 per normal cell. Other
  // input sizes: Zoo.NasnetBuildsAtOtherSizesAsKeras.
  z.push_back({"nasnet_mobile", 5289978, 36738, {64, 1000},
               {{"conv2d", 356}, {"concat", 20}, {"zeropad", 8}, {"crop", 4}, {"maxpool", 8},
                {"avgpool", 8 + 8 + 12 * 3}},
               s32, 2});
  z.push_back({"nasnet_large", 88753150, 196668, {16, 1000},
               {{"conv2d", 488}, {"concat", 26}, {"zeropad", 8}, {"crop", 4}, {"maxpool", 8},
                {"avgpool", 8 + 8 + 18 * 3}},
               {3, 43, 43}, 2});
  // keras_segmentation's networks with 19 classes (counts worked out above, layer by layer).
  z.push_back({"fcn32", fcn32_params(), 0, {8, kSegClasses, 416, 608},
               {{"conv2d", 17}, {"maxpool", 5}, {"upsample", 1}, {"dropout", 2}}, s32, 1});
  const SegCount psp = vgg_pspnet_count(), rpsp = resnet50_pspnet_count();
  const Shape s192 = {3, 192, 192};
  z.push_back({"pspnet", psp.trainable, psp.buffers, {8, kSegClasses, 96, 144},
               {{"conv2d", 19}, {"batchnorm", 5}, {"avgpool", 4}, {"upsample", 5}, {"concat", 1}},
               s192, 2});
  z.push_back({"resnet50_pspnet", rpsp.trainable, rpsp.buffers, {8, kSegClasses, 96, 144},
               {{"conv2d", 59}, {"batchnorm", 58}, {"add", 16}, {"avgpool", 4}, {"upsample", 5}},
               s192, 2});
  const SegCount ru = resnet50_unet_count(true), rs = resnet50_unet_count(false);
  z.push_back({"resnet50_unet", ru.trainable, ru.buffers, {8, kSegClasses, 208, 304},
               {{"conv2d", 48}, {"batchnorm", 47}, {"add", 13}, {"zeropad", 1}, {"upsample", 3},
                {"concat", 3}},
               s32, 2});
  z.push_back({"resnet50_segnet", rs.trainable, rs.buffers, {8, kSegClasses, 208, 304},
               {{"conv2d", 48}, {"batchnorm", 47}, {"add", 13}, {"upsample", 3}, {"relu", 40}}, s32, 2});
  const SegCount mu = mobilenet_unet_count(true), ms = mobilenet_unet_count(false);
  z.push_back({"mobilenet_unet", mu.trainable, mu.buffers, {32, kSegClasses, 112, 112},
               {{"conv2d", 28}, {"batchnorm", 27}, {"relu6", 23}, {"upsample", 3}, {"concat", 3}},
               s32, 2});
  z.push_back({"mobilenet_segnet", ms.trainable, ms.buffers, {32, kSegClasses, 112, 112},
               {{"conv2d", 28}, {"batchnorm", 27}, {"relu6", 23}, {"upsample", 3}}, s32, 2});
  // Checkmate's linear_model(16): 16 convs 64x3x3 without bias, dense 64 -> 1000.
  z.push_back({"linear16", conv_params(3, 64, 3, false) + 15 * conv_params(64, 64, 3, false) +
                               dense_params(64, 1000),
               0, {32, 1000}, {{"conv2d", 16}, {"global_avgpool", 1}, {"dense", 1}}, {3, 36, 36},
               2});
  // vit_tiny: 4 x 4 patches of 3 channels to C = 64 (a conv with bias), the class token [C], a
  // position table [65, C]; each of 2 blocks two layer norms (2 C), qkv [3C, C] + 3C, the
  // projection [C, C] + C, the MLP [4C, C] + 4C and [C, 4C] + C; the final layer norm; the head
  // [10, C] + 10.
  const int64_t c = 64;
  const int64_t vit_block = 4 * c + dense_params(c, 3 * c) + dense_params(c, c) +
                            dense_params(c, 4 * c) + dense_params(4 * c, c);
  z.push_back({"vit_tiny", conv_params(3, c, 4) + c + 65 * c + 2 * vit_block + 2 * c + dense_params(c, 10),
               0, {16, 10},
               {{"conv2d", 1}, {"transpose", 1}, {"class_token", 1}, {"position_embedding", 1},
                {"attention", 2}, {"layernorm", 5}, {"gelu_erf", 2}, {"channel_slice", 1}},
               {3, 32, 32}, 2});
  return z;
}

int64_t numel_of_kind(const Graph& g, ValueKind kind) {
  int64_t n = 0;
  for (const auto& v : g.values)
    if (v.kind == kind) n += v.desc.numel();
  return n;
}

int count_nodes(const Graph& g, NodeKind kind, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes)
    if (node.kind == kind && (op.empty() || node.op == op)) ++n;
  return n;
}

class Zoo : public ::testing::TestWithParam<ZooCase> {};

TEST_P(Zoo, FullSizeGraphsHaveReferenceParamsAndStructure) {
  const ZooCase& z = GetParam();
  const OpRegistry ops = make_builtin_registry();
  ModelConfig cfg = load_model_config(config_path(z.name));
  EXPECT_EQ(cfg.name, z.name);
  Graph fwd = build_forward_graph(cfg, ops);
  Graph g = make_training_graph(fwd, ops, cfg.optimizer.op, cfg.optimizer.attrs);

  EXPECT_EQ(numel_of_kind(g, ValueKind::Param), z.trainable);
  EXPECT_EQ(numel_of_kind(g, ValueKind::Buffer), z.buffers);

  // The last layer feeds the loss: [N, classes] or [N, classes, H, W] at full size.
  const Node& loss = g.node(g.find_node("loss"));
  EXPECT_EQ(g.value(loss.inputs.at(0)).desc.shape, z.full_output);
  EXPECT_EQ(g.value(g.input).desc.shape,
            (Shape{cfg.batch, cfg.input[0], cfg.input[1], cfg.input[2]}));

  for (const auto& [op, count] : z.forward_ops)
    EXPECT_EQ(count_nodes(g, NodeKind::Forward, op), count) << "forward '" << op << "' nodes";
  EXPECT_EQ(count_nodes(g, NodeKind::Forward, ""), static_cast<int>(cfg.layers.size()));

  // Autodiff: every conv has a weight gradient; every conv but the first (which reads only the
  // input batch, whose gradient is pruned) passes a gradient to its input; one update per Param.
  const int convs = z.forward_ops.at("conv2d");
  EXPECT_EQ(count_nodes(g, NodeKind::Backward, "conv2d_grad_weight"), convs);
  EXPECT_EQ(count_nodes(g, NodeKind::Backward, "conv2d_grad_input"), convs - 1);
  int params = 0;
  for (const auto& v : g.values) params += v.kind == ValueKind::Param;
  EXPECT_EQ(count_nodes(g, NodeKind::Update, ""), params);
  EXPECT_EQ(count_nodes(g, NodeKind::Loss, ""), 1);
}

TEST_P(Zoo, OneCpuTrainingStepAtSmallInputHasFiniteLoss) {
  const ZooCase& z = GetParam();
  const OpRegistry ops = make_builtin_registry();
  ModelConfig cfg = load_model_config(config_path(z.name));
  BuildOptions bo;
  bo.batch = z.small_batch;
  bo.input = z.small_input;
  Graph g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                                cfg.optimizer.attrs);
  // The builder re-infers every shape: the parameters of the layers before flatten do not change.
  if (z.name != "vgg16" && z.name != "vgg19") {
    EXPECT_EQ(numel_of_kind(g, ValueKind::Param), z.trainable);
  }

  auto backend = make_cpu_backend();
  Executor ex(g, ops, *backend);
  ex.init_parameters(cfg.seed);
  ExecutionPlan plan = plan_keep_all(g, [&](NodeId n) { return ex.workspace_bytes(n); });
  const TensorDesc& in = g.value(g.input).desc;
  const TensorDesc& lab = g.value(g.label).desc;
  auto data = make_data_source(cfg, in, lab, cfg.dir);
  std::vector<float> images(static_cast<size_t>(in.numel()));
  std::vector<int32_t> labels(static_cast<size_t>(lab.numel()));
  data->next_batch(0, images.data(), labels.data());
  StepResult r = ex.run_step(plan, images.data(), labels.data(), 0);
  ASSERT_TRUE(std::isfinite(r.loss)) << z.name << ": loss " << r.loss;
  EXPECT_GT(r.loss, 0.0f);
  // Random init: the loss is of the order of ln(classes), not blown up.
  EXPECT_LT(r.loss, 10.0f * std::log(static_cast<float>(cfg.classes)));
  EXPECT_EQ(r.peak_bytes, plan.predicted_peak);
}

INSTANTIATE_TEST_SUITE_P(Configs, Zoo, ::testing::ValuesIn(zoo_cases()),
                         [](const ::testing::TestParamInfo<ZooCase>& i) { return i.param.name; });

TEST(Zoo, Vgg16DenseHeadFollowsTheInputSize) {
  // At 32x32 the flatten has 512 features instead of 25088: fc1 shrinks, nothing else changes.
  const OpRegistry ops = make_builtin_registry();
  ModelConfig cfg = load_model_config(config_path("vgg16"));
  BuildOptions bo;
  bo.batch = 2;
  bo.input = Shape{3, 32, 32};
  Graph g = build_forward_graph(cfg, ops, bo);
  EXPECT_EQ(numel_of_kind(g, ValueKind::Param), 138357544 - (25088 - 512) * 4096);
  EXPECT_EQ(g.value(g.find_value("flatten")).desc.shape, (Shape{2, 512}));
}

// Keras's NASNet at an input side of n: the stem conv (3x3/2, 'valid') leaves (n - 3) / 2 + 1,
// each of the 4 reduction cells (stem_1, stem_2 and the two between the stages) halves, rounding
// up. Returns h's side at each reduction cell and the last cells' side.
std::vector<int64_t> nasnet_keras_sides(int64_t n) {
  std::vector<int64_t> sides = {(n - 3) / 2 + 1};
  for (int r = 0; r < 4; ++r) sides.push_back((sides.back() + 1) / 2);
  return sides;
}

// NASNet at sizes other than its own, as Keras builds them: each reduction cell zero-pads h by
// correct_pad(h, 3), (1, 1) on an odd side and (0, 1) on an even one, so that its 3x3/2 'valid'
// pools match its strided separable convolutions ('same') at every size of at least 32x32. A
// fixed pad fails at 75x75 (stem_2's h is 19: [0, 1, 0, 1] leaves its pools 9x9 against the
// convolutions' 10x10) or pads other than Keras (33x33).
struct NasnetSize {
  const char* name;
  int64_t h, w, trainable;
};

void expect_nasnet_as_keras(const OpRegistry& ops, const NasnetSize& s) {
  ModelConfig cfg = load_model_config(config_path(s.name));
  BuildOptions bo;
  bo.batch = 2;  // batch norm in train mode needs 2 values per channel at 1x1 (33x33)
  bo.input = Shape{3, s.h, s.w};
  const Graph g = build_forward_graph(cfg, ops, bo);
  const Node& loss = g.node(g.find_node("loss"));
  EXPECT_EQ(g.value(loss.inputs.at(0)).desc.shape, (Shape{2, 1000}));
  EXPECT_EQ(numel_of_kind(g, ValueKind::Param), s.trainable);

  const std::vector<int64_t> hs = nasnet_keras_sides(s.h), ws = nasnet_keras_sides(s.w);
  size_t cell = 0;
  for (const Node& n : g.nodes) {
    const bool reduction_pad = n.op == "zeropad" && n.name.find(".h3") != std::string::npos;
    if (n.kind != NodeKind::Forward || !reduction_pad) continue;
    ASSERT_LT(cell, 4u) << n.name;
    const Shape& in = g.value(n.inputs.at(0)).desc.shape;
    const Shape& out = g.value(n.output).desc.shape;
    EXPECT_EQ(in[2], hs[cell]) << n.name;
    EXPECT_EQ(in[3], ws[cell]) << n.name;
    EXPECT_EQ(out[2], hs[cell] + (hs[cell] % 2 == 1 ? 2 : 1)) << n.name;
    EXPECT_EQ(out[3], ws[cell] + (ws[cell] % 2 == 1 ? 2 : 1)) << n.name;
    ++cell;
  }
  EXPECT_EQ(cell, 4u);
  const Node& gap = g.node(g.find_node("avg_pool"));
  const Shape& last = g.value(gap.inputs.at(0)).desc.shape;
  EXPECT_EQ(last[2], hs[4]);
  EXPECT_EQ(last[3], ws[4]);
}

TEST(Zoo, NasnetBuildsAtOtherSizesAsKeras) {
  // Written out for 75x75: h is 37, 19, 10 and 5 at the reductions, the last cells 3x3.
  EXPECT_EQ(nasnet_keras_sides(75), (std::vector<int64_t>{37, 19, 10, 5, 3}));
  const OpRegistry ops = make_builtin_registry();
  const NasnetSize sizes[] = {
      {"nasnet_mobile", 75, 75, 5289978},   {"nasnet_mobile", 33, 33, 5289978},
      {"nasnet_mobile", 331, 331, 5289978}, {"nasnet_mobile", 75, 40, 5289978},
      {"nasnet_mobile", 224, 224, 5289978}, {"nasnet_large", 99, 99, 88753150},
      {"nasnet_large", 224, 224, 88753150}};
  for (const NasnetSize& s : sizes) {
    SCOPED_TRACE(std::string(s.name) + " at " + std::to_string(s.h) + "x" + std::to_string(s.w));
    try {
      expect_nasnet_as_keras(ops, s);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(Zoo, Linear16IsMakeChainOutput) {
  ChainOptions opt;
  opt.layers = 16;
  opt.command = "make_chain --layers 16 -o configs/linear16.yaml";
  std::ifstream f(config_path("linear16"));
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str(), chain_yaml(opt));
}

TEST(Zoo, MakeChainVariantsBuild) {
  const OpRegistry ops = make_builtin_registry();
  ChainOptions opt;
  opt.layers = 4;
  opt.width = 8;
  opt.height = opt.width_px = 16;
  opt.same_padding = true;
  opt.relu = true;
  opt.classes = 10;
  Graph g = build_forward_graph(parse_model_config(chain_yaml(opt), "chain4.yaml"), ops);
  EXPECT_EQ(count_nodes(g, NodeKind::Forward, "conv2d"), 4);
  EXPECT_EQ(g.value(g.find_value("conv3")).desc.shape, (Shape{32, 8, 16, 16}));
  EXPECT_EQ(numel_of_kind(g, ValueKind::Param),
            conv_params(3, 8, 3, false) + 3 * conv_params(8, 8, 3, false) + dense_params(8, 10));
}

TEST(Zoo, MakeChainRejectsChainsThatShrinkToNothing) {
  ChainOptions opt;
  opt.layers = 20;
  opt.height = opt.width_px = 40;  // 20 'valid' convs need more than 40 pixels
  try {
    chain_yaml(opt);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(chain_parse_size("224", &opt), UserError);
  chain_parse_size("64x48", &opt);
  EXPECT_EQ(opt.height, 64);
  EXPECT_EQ(opt.width_px, 48);
}

}  // namespace
}  // namespace remat
