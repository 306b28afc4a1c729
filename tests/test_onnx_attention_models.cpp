// Imported attention and window networks against PyTorch on the CPU (the fixture and the checks:
// tests/onnx_models.h): torchvision's vision transformer, MaxViT and Swin's patch merging, an
// einsum attention, GPTs written with nn.TransformerEncoder (batch-first and sequence-first), and
// GPT-2 exported from PyTorch (against its YAML too).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <variant>

#include "models/build.h"
#include "models/config.h"
#include "models/initial_values.h"
#include "models/onnx/onnx_source.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/io/safetensors.h"
#include "tests/halfway_plan.h"
#include "tests/onnx_builder.h"
#include "tests/onnx_models.h"
#include "tests/model_test_util.h"
#include "tests/source_dir.h"
#include "tools/training/evaluation.h"

namespace remat {
namespace {

// A vision transformer: patches to tokens (transpose), the class token, the position table,
// nn.MultiheadAttention (dense + attention + dense), the class token's row for the head.
TEST_F(OnnxModels, VisionTransformer) {
  make("vit_mini");
  check_model(dir_, "vit_mini");
  check_eval(dir_, "vit_mini");
}
// Exported with a fixed batch, the heads' reshapes name 2 H rather than N H.
TEST_F(OnnxModels, VisionTransformerFixedBatch) {
  make("vit_mini_fixed_batch");
  check_model(dir_, "vit_mini_fixed_batch");
}
// The attention pattern checks the constants it reads: a query divided by other than sqrt(D)
// is refused at the group, and so is a Gather of data along other than the tokens.
TEST_F(OnnxModels, VisionTransformerConstantsAreChecked) {
  make("vit_mini");
  onnx::ModelProto m = exported("vit_mini");
  auto producer = [&](const std::string& v) -> onnx::NodeProto* {
    for (auto& n : *m.mutable_graph()->mutable_node())
      for (const auto& o : n.output())
        if (o == v) return &n;
    return nullptr;
  };
  onnx::NodeProto* softmax = nullptr;
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (n.op_type() == "Softmax" && !softmax) softmax = &n;
  ASSERT_NE(softmax, nullptr);
  onnx::NodeProto* div = producer(producer(softmax->input(0))->input(0));
  ASSERT_EQ(div->op_type(), "Div");
  onnx::NodeProto* divisor = producer(div->input(1));
  ASSERT_EQ(divisor->op_type(), "Constant");
  const onnx::ModelProto original = m;
  divisor->mutable_attribute(0)->mutable_t()->clear_raw_data();
  divisor->mutable_attribute(0)->mutable_t()->add_float_data(3.0f);
  EXPECT_NE(import_error(m).find("the query is divided by 3.000000, not sqrt(8)"), std::string::npos)
      << import_error(m);
  m = original;
  for (auto& n : *m.mutable_graph()->mutable_node())  // the class token's row for the head
    if (n.op_type() == "Gather" && producer(n.input(0))->op_type() != "Shape")
      for (auto& a : *n.mutable_attribute())
        if (a.name() == "axis") a.set_i(2);
  EXPECT_NE(import_error(m).find("only a Gather along the tokens (axis 1) of data is supported"),
            std::string::npos)
      << import_error(m);
}
// Attention written with torch.einsum over windows of tokens (matmul with either transpose
// flag), its heads split by a 5-D permute (transpose), MaxViT's relative position bias
// (relative_position_bias).
TEST_F(OnnxModels, EinsumAttention) {
  make("einsum_net");
  check_model(dir_, "einsum_net");
  // An equation that is not a matrix product (a sum over j) is refused by name.
  onnx::ModelProto m = exported("einsum_net");
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (n.op_type() == "Einsum") n.mutable_attribute(0)->set_s("bghij,bghjd->bghi");
  EXPECT_NE(import_error(m).find("(Einsum, opset 13): equation 'bghij,bghjd->bghi': only a batched "
                                 "matrix product of two tensors is supported"),
            std::string::npos)
      << import_error(m);
  // An index that is not torchvision's (two entries swapped) is refused at the bias.
  m = exported("einsum_net");
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == "relative_position_index") {
      ASSERT_EQ(t.int64_data_size(), 0);
      std::string raw = t.raw_data();
      std::swap_ranges(raw.begin(), raw.begin() + 8, raw.begin() + 8);
      t.set_raw_data(raw);
    }
  EXPECT_NE(import_error(m).find("(Gather + Reshape + Transpose + Add read as a relative position "
                                 "bias, opset 13): the index (16 values) is not torchvision's"),
            std::string::npos)
      << import_error(m);
}
// torchvision's PatchMerging (Swin's): strided Slices + Concat as reshape + transpose + reshape.
TEST_F(OnnxModels, SwinPatchMerging) {
  make("patch_merge_net");
  check_model(dir_, "patch_merge_net");
}
// torchvision's MaxViT: block and grid partitions (transposes), einsum attention with the
// relative position bias, MBConv with squeeze-excitation.
TEST_F(OnnxModels, MaxVit) {
  make("maxvit_mini");
  check_model(dir_, "maxvit_mini");
}
// torchvision's Swin Transformer without shifted windows: the windows folded into the batch
// (Note [folded batch] in models/onnx/onnx_translator.h) through the window attention, qkv[i]
// after a permute that moves the batch, the relative position bias, the patch merging.
TEST_F(OnnxModels, SwinWindowsFoldedIntoTheBatch) {
  make("swin_mini");
  check_model(dir_, "swin_mini");
}
// With shifted windows: the cyclic shifts (roll) and the mask torchvision builds from region ids
// (ScatterND and friends, folded at import) added with the bias.
TEST_F(OnnxModels, SwinShiftedWindows) {
  make("swin_shifted");
  check_model(dir_, "swin_shifted");
}
// CLIP's layout (Note [sequence-first values]): tokens permuted to [T, N, C] for layers of
// batch_first=False attention, a post-norm nn.TransformerEncoderLayer and a pre-norm block with
// QuickGELU, both under the causal mask, permuted back for the head; layer norms written out.
TEST_F(OnnxModels, SequenceFirstTransformer) {
  make("encoder_seq_first");
  check_model(dir_, "encoder_seq_first");
  // The Transposes into and out of the layers, by position.
  auto transposes = [](onnx::ModelProto& m) {
    std::vector<onnx::NodeProto*> found;
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "Transpose" && n.attribute_size() == 1 &&
          n.attribute(0).ints_size() == 3 && n.attribute(0).ints(0) == 1 &&
          n.attribute(0).ints(1) == 0 && n.input(0).rfind("/", 0) == 0 &&
          n.input(0).find("attn") == std::string::npos)
        found.push_back(&n);
    return found;
  };
  // Without the permute in, the first attention would run across the batch: refused.
  onnx::ModelProto in = exported("encoder_seq_first");
  ASSERT_GE(transposes(in).size(), 2u);
  onnx::NodeProto* first = transposes(in).front();
  first->set_op_type("Identity");
  first->clear_attribute();
  std::string e = import_error(in);
  EXPECT_NE(e.find("a sequence-first attention (batch_first=False) reads [T, N, C], but its "
                   "input is batch-first [N, T, C]"),
            std::string::npos)
      << e;
  // A permute back other than [1, 0, 2] is refused at the Transpose.
  onnx::ModelProto other = exported("encoder_seq_first");
  auto* perm = transposes(other).back()->mutable_attribute(0);
  perm->set_ints(0, 1);
  perm->set_ints(1, 2);
  perm->set_ints(2, 0);
  e = import_error(other);
  EXPECT_NE(e.find("perm [1, 2, 0] of sequence-first data: only [1, 0, 2] (back to the batch "
                   "first) is supported"),
            std::string::npos)
      << e;
}

// PyTorch's tutorial transformer, sequence-first from its token ids [T, N] (the batch the open
// second axis) to its logits [T, N, V]: remat reads the same ids batch-first, the position
// encoding pe[:T] of the buffer named in model.buffers (Note [module buffers]) and a learned
// table [T, 1, C] turn to [1, T, C], and the loss pairs each sample's positions with its labels.
TEST_F(OnnxModels, SequenceFirstInputAndOutput) {
  make("encoder_tutorial");
  check_model(dir_, "encoder_tutorial", {"model.buffers=[pe]"});
  // Unnamed, the buffer could be a parameter that a constant would freeze: refused by name.
  std::string e = import_error(exported("encoder_tutorial"));
  EXPECT_NE(e.find("a tensor of the module ('/Slice_output_0', [16, 1, 32]) with data"),
            std::string::npos)
      << e;
  // A table [8, 2, C] of the tokens [T, N, C] would vary along the batch: refused.
  onnx::ModelProto m = exported("encoder_tutorial");
  bool found = false;
  for (auto& init : *m.mutable_graph()->mutable_initializer()) {
    if (init.name() != "positions") continue;
    ASSERT_EQ(init.dims_size(), 3);
    init.set_dims(0, 8);
    init.set_dims(1, 2);
    found = true;
  }
  ASSERT_TRUE(found);
  e = import_error(m, {"model.buffers=[pe]"});
  EXPECT_NE(e.find("a tensor of shape [8, 2, 32] varies along the batch axis (axis 1 of "
                   "sequence-first data)"),
            std::string::npos)
      << e;
  // The logits' mean over the vocabulary, [T, N] (its last axis the batch), then a softmax over
  // that last axis: refused, where an elementwise op would not be.
  onnx::ModelProto r = exported("encoder_tutorial");
  onnx::GraphProto* g = r.mutable_graph();
  const std::string logits = g->output(0).name();
  onnx::NodeProto* mean = test::onnx_node(g, "ReduceMean", {logits}, {"mean"}, "/mean");
  test::onnx_attr(mean, "axes", std::vector<int64_t>{-1});
  test::onnx_attr(mean, "keepdims", int64_t{0});
  test::onnx_node(g, "Relu", {"mean"}, {"relu"}, "/relu");
  test::onnx_node(g, "Softmax", {"relu"}, {"probs"}, "/probs");
  g->mutable_output(0)->set_name("probs");
  auto* shape = g->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim()->RemoveLast();  // [T, N]
  e = import_error(r, {"model.buffers=[pe]"});
  EXPECT_NE(e.find("node '/probs' (Softmax, opset 13): input 0 ('relu') is sequence-first "
                   "[T, N], whose last axis is the batch"),
            std::string::npos)
      << e;
  // A buffer that is not an initializer of the file is an error naming it.
  e = import_error(exported("encoder_tutorial"), {"model.buffers=[pe, pos_encoder.pe]"});
  EXPECT_NE(e.find("buffer 'pos_encoder.pe' is not an initializer of the file"),
            std::string::npos)
      << e;
}

// nn.MultiheadAttention under masks other than the causal one (Note [attention masks]): a float
// band mask of nn.TransformerEncoderLayer and a boolean prefix mask, each the attention spelled
// out with the mask added to the scores; the same layers sequence-first.
TEST_F(OnnxModels, AttentionUnderOtherMasks) {
  make("masked_net");
  check_model(dir_, "masked_net");
  make("masked_seq_first");
  check_model(dir_, "masked_seq_first");
}

// A GPT written with nn.TransformerEncoder and PyTorch's causal attn_mask (Note [multi-head
// attention]): the masked scores become causal attention; pre-norm layers, F.gelu, a learned
// position table, the head over the vocabulary.
TEST_F(OnnxModels, TransformerEncoderWithACausalMask) {
  make("encoder_gpt");
  check_model(dir_, "encoder_gpt");
  // A mask that hides a key on the diagonal is not causal: the attention spelled out with the
  // mask added (Note [attention masks]); one that hides query 0's only key is refused.
  auto with_mask_entry = [&](int64_t at) {
    onnx::ModelProto m = exported("encoder_gpt");
    bool found = false;
    for (auto& init : *m.mutable_graph()->mutable_initializer()) {
      if (init.name() != "mask") continue;
      EXPECT_EQ(init.data_type(), onnx::TensorProto::FLOAT);
      std::string raw = init.raw_data();
      const float hidden = -std::numeric_limits<float>::infinity();
      std::memcpy(&raw[static_cast<size_t>(at) * sizeof(float)], &hidden, sizeof(float));
      init.set_raw_data(raw);
      found = true;
    }
    EXPECT_TRUE(found);
    return m;
  };
  const std::string banded = dir_ + "/banded.onnx";
  test::onnx_write(with_mask_entry(3 * 16 + 3), banded);  // mask[3][3]
  const ModelConfig spelled = load_model_config(banded, {"batch=2"});
  int attentions = 0, masks = 0;
  for (const LayerConfig& l : spelled.layers) {
    attentions += l.op == "attention";
    masks += l.op == "add_constant";
  }
  EXPECT_EQ(attentions, 0);
  EXPECT_EQ(masks, 2);
  const std::string e = import_error(with_mask_entry(0));  // mask[0][0]
  ASSERT_NE(e.find("(the nodes of nn.MultiheadAttention, opset 17): the attn_mask leaves query 0 "
                   "no key (every entry of its row is -inf): its output would be NaN"),
            std::string::npos)
      << e;
  // A training-mode export's Dropout of the probabilities (nn.TransformerEncoderLayer's default
  // 0.1), put between each Softmax and its MatMul: the attention's dropout.
  onnx::ModelProto d = exported("encoder_gpt");
  onnx::GraphProto* g = d.mutable_graph();
  *g->add_initializer() = test::onnx_floats("attn.ratio", {}, 0.1f);
  for (int k = g->node_size() - 1; k >= 0; --k) {
    if (g->node(k).op_type() != "Softmax") continue;
    const std::string probs = g->node(k).output(0), dropped = probs + ".dropped";
    for (auto& n : *g->mutable_node())
      for (auto& in : *n.mutable_input())
        if (in == probs) in = dropped;
    onnx::NodeProto* drop = g->add_node();
    drop->set_op_type("Dropout");
    drop->set_name(g->node(k).name() + ".dropout");
    *drop->add_input() = probs;
    *drop->add_input() = "attn.ratio";
    *drop->add_output() = dropped;
    for (int j = g->node_size() - 1; j > k + 1; --j) g->mutable_node()->SwapElements(j, j - 1);
  }
  const std::string path = dir_ + "/dropout.onnx";
  test::onnx_write(d, path);
  const ModelConfig cfg = load_model_config(path, {"batch=2"});
  attentions = 0;
  for (const LayerConfig& l : cfg.layers) {
    if (l.op != "attention") continue;
    ++attentions;
    EXPECT_EQ(std::get<double>(l.attrs.values.at("dropout")), 0.1);
    EXPECT_EQ(std::get<bool>(l.attrs.values.at("causal")), true);
  }
  EXPECT_EQ(attentions, 2);
}
// configs/gpt2_tiny.yaml built in PyTorch (tools/bench/bench_pytorch_gpt2.py) and exported:
// embeddings, attention written out (split heads, q k^T scaled, a causal mask, merge heads),
// GPT-2's gelu and the tied head all import (Note [ONNX patterns]) and agree with PyTorch.
TEST_F(OnnxModels, Gpt2TinyOpset17) {
  make("gpt2_tiny");
  check_model(dir_, "gpt2_tiny");
  check_eval(dir_, "gpt2_tiny");
}
// Opsets before 17 write layer norm as nine nodes (Note [ONNX patterns]).
TEST_F(OnnxModels, Gpt2TinyOpset14) {
  make("gpt2_tiny_opset14");
  check_model(dir_, "gpt2_tiny_opset14");
}
// The import of the YAML's own network is the YAML's graph: the same nodes, parameters and
// keep-everything peak, so it plans alike (every later stage sees the same problem).
TEST_F(OnnxModels, Gpt2TinyImportPlansLikeItsYaml) {
  make("gpt2_tiny");
  const OpRegistry ops = make_builtin_registry();
  std::unique_ptr<Backend> be = make_cpu_backend();
  auto graph_of = [&](const ModelConfig& cfg) {
    BuildOptions bo;
    bo.batch = 8;
    return make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                               cfg.optimizer.attrs);
  };
  const ModelConfig yaml_cfg = load_model_config(test_source_dir() + "/configs/gpt2_tiny.yaml");
  ModelConfig onnx_cfg = load_model_config(dir_ + "/gpt2_tiny.onnx", {"batch=8"});
  onnx_cfg.optimizer = yaml_cfg.optimizer;  // the default config's is sgd: no optimizer state
  const Graph imported = graph_of(onnx_cfg);
  const Graph yaml = graph_of(yaml_cfg);
  EXPECT_EQ(planned_nodes(imported), planned_nodes(yaml));
  int64_t params[2] = {0, 0};
  for (int k = 0; k < 2; ++k)
    for (const Value& v : (k ? yaml : imported).values) params[k] += v.kind == ValueKind::Param ? v.desc.numel() : 0;
  EXPECT_EQ(params[0], params[1]);
  auto ws = [&](const Graph& g) { return [&](NodeId n) { return node_workspace_bytes(g, ops, *be, n); }; };
  EXPECT_EQ(plan_keep_all(imported, ws(imported)).predicted_peak, plan_keep_all(yaml, ws(yaml)).predicted_peak);
}

}  // namespace
}  // namespace remat
