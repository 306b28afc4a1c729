// The importer against ONNX's own node cases (Debian's libonnx-testdata: one operator per model,
// with its inputs and the expected outputs). Every case either imports and its forward output
// equals the expected one within Note [node case tolerance], or is refused with a UserError
// naming the file (never a crash, never silent wrong output). The cases that must import are
// listed, so that a case the importer stops reading fails here.
//
// A case is made into what an export looks like: its inputs after the first become
// initializers with their test values (an export's weights), and an opset below the importer's
// is raised to it where no node's operator changed in between (the same definition, by ONNX's
// own schema registry), since most convolution and pooling cases were written at opset 11.
// An elementwise case's [3, 4, 5] or [3] input is read as an image [3, 4, 5, 1] or [3, 1, 1, 1].
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "models/build.h"
#include "models/config.h"
#include "models/initial_values.h"
#include "models/onnx/onnx_const.h"
#include "models/onnx/onnx_source.h"
#include "ops/registry.h"
#include "tests/halfway_plan.h"
#include "tools/training/evaluation.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

// The node cases that import today, each checked against its expected output.
const std::set<std::string> kMustImport = {
    "test_averagepool_2d_default", "test_averagepool_2d_precomputed_pads",
    "test_averagepool_2d_precomputed_pads_count_include_pad",
    "test_averagepool_2d_precomputed_same_upper", "test_averagepool_2d_precomputed_strides",
    "test_averagepool_2d_same_lower", "test_averagepool_2d_same_upper",
    "test_averagepool_2d_strides", "test_basic_conv_with_padding",
    "test_basic_conv_without_padding", "test_batchnorm_epsilon", "test_batchnorm_example",
    "test_conv_with_autopad_same", "test_erf", "test_conv_with_strides_and_asymmetric_padding",
    "test_convtranspose", "test_convtranspose_autopad_same", "test_convtranspose_dilations",
    "test_convtranspose_kernel_shape", "test_convtranspose_output_shape", "test_convtranspose_pad",
    "test_convtranspose_pads",
    "test_conv_with_strides_no_padding", "test_conv_with_strides_padding", "test_flatten_axis1",
    "test_flatten_default_axis", "test_flatten_negative_axis3", "test_gemm_default_no_bias",
    "test_gemm_default_vector_bias", "test_gemm_default_zero_bias", "test_gemm_transposeB",
    "test_matmul_2d", "test_reduce_mean_do_not_keepdims_example",
    "test_reduce_mean_do_not_keepdims_random", "test_reshape_extended_dims",
    "test_reshape_reduced_dims", "test_reshape_zero_and_negative_dim", "test_softmax_example",
    "test_softmax_large_number", "test_unsqueeze_axis_1", "test_unsqueeze_axis_2", "test_hardsigmoid",
    "test_depthtospace_crd_mode_example", "test_depthtospace_example",
    "test_hardsigmoid_default", "test_hardsigmoid_example", "test_hardswish",
    "test_instancenorm_epsilon", "test_instancenorm_example", "test_leakyrelu",
    "test_leakyrelu_default", "test_leakyrelu_example", "test_maxpool_2d_ceil",
    "test_maxpool_2d_default", "test_maxpool_2d_precomputed_pads",
    "test_maxpool_2d_precomputed_same_upper", "test_maxpool_2d_precomputed_strides",
    "test_maxpool_2d_same_lower", "test_maxpool_2d_same_upper", "test_maxpool_2d_strides",
    "test_neg", "test_neg_example", "test_reciprocal", "test_reciprocal_example", "test_relu",
    "test_resize_downsample_scales_cubic",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_downsample_scales_cubic_align_corners", "test_resize_downsample_scales_linear",
    "test_resize_downsample_scales_linear_align_corners", "test_resize_downsample_scales_nearest",
    "test_resize_downsample_sizes_cubic", "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_resize_downsample_sizes_nearest",
    "test_resize_upsample_scales_cubic", "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_upsample_scales_cubic_align_corners",
    "test_resize_upsample_scales_cubic_asymmetric", "test_resize_upsample_scales_linear",
    "test_resize_upsample_scales_linear_align_corners", "test_resize_upsample_scales_nearest",
    "test_resize_upsample_sizes_cubic", "test_resize_upsample_sizes_nearest",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel",
    "test_resize_upsample_sizes_nearest_floor_align_corners",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric",
    "test_sigmoid", "test_sigmoid_example", "test_spacetodepth", "test_spacetodepth_example",
    "test_sqrt", "test_sqrt_example", "test_tanh",
    "test_tanh_example"};

template <typename M>
bool parse_file(const fs::path& p, M* m) {
  std::ifstream f(p, std::ios::binary);
  return f && m->ParseFromIstream(&f);
}

std::vector<float> floats_of(const onnx::TensorProto& t) {
  return floats_from_proto(t, "node case tensor '" + t.name() + "'");
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// Raises the model's default-domain opset to kOnnxMinOpset where every node's operator has the
// same definition at both (false: it changed, the case stays as written).
bool raise_opset(onnx::ModelProto& m) {
  for (auto& op : *m.mutable_opset_import()) {
    if (!op.domain().empty() || op.version() >= kOnnxMinOpset) continue;
    for (const auto& n : m.graph().node()) {
      const auto* was = onnx::OpSchemaRegistry::Schema(n.op_type(), int(op.version()), "");
      const auto* now = onnx::OpSchemaRegistry::Schema(n.op_type(), int(kOnnxMinOpset), "");
      if (!was || !now || was->since_version() != now->since_version()) return false;
    }
    op.set_version(kOnnxMinOpset);
  }
  return true;
}

// Note [node case tolerance]
// The expected outputs come from ONNX's reference implementations in numpy, float32 unless the case
// says otherwise. An output element is a sum of at most R products (R: the length of the node's
// reduction, its weight's elements per output channel for Conv, the window for a pooling, C_in kH
// kW for ConvTranspose, 1 for elementwise nodes) followed by at most 4 more roundings (a bias,
// batch normalization's centring, scaling and shift); evaluated in float32 in any order it errs by
// at most (R + 4) u S, where u = 2^-24 and S bounds the sum of the absolute values of its terms.
// Two such evaluations (remat's and numpy's) differ by at most twice that. S is at most R max(X, 1)
// P + P + Y: X the largest input magnitude, P the largest parameter magnitude (1 for a node without
// parameters; for batch normalization, per channel, f (1 + |mean|) + |bias| with f = |scale| /
// sqrt(var + epsilon), the factor an input is multiplied by), so that R X P bounds the products (or
// a window's inputs), P a bias, and Y, the largest expected magnitude, the result itself. A
// mistranslation (a padding on the wrong side, a window one off, a weight transposed) moves outputs
// by the size of the inputs, far beyond this bound. InstanceNormalization's y = s (x - m) r + b
// (m and 1 / r the mean and deviation of the L elements of x's channel) takes R = L and P the
// largest |s| r + |b| over the channels of each sample: the mean errs by at most L u X, which
// moves y by |s| r L u X <= R u X P; the variance, a sum of L squares, by a relative (L + 4) u
// at most, which moves r by half that relative and y by (L + 4) u (Y + P) / 2; both are within
// (R + 4) u S. Resize (Note [resize as linear maps]) is a map per axis of n taps (1 nearest, 2
// linear, 4 cubic), applied one axis after the other: R = n^2 products of the two axes'
// coefficients and an input, and P the product of the two axes' largest sums of |c| over a
// row, 1 for nearest and linear (convex weights) and at most 1.38^2 < 2 for cubic with
// cubic_coeff_a in [-0.75, -0.5] (1.375 at ratio 1/2 for -0.75, 1.377 renormalized by
// exclude_outside; computed over 10^4 ratios).
struct NodeCase {
  std::string name;
  onnx::ModelProto model;
  std::vector<float> input;
  std::vector<int64_t> input_dims;
  std::vector<float> expected;
  bool float_data = false;  // input and output are float tensors (else only the import is tried)
  double reduction = 1;  // R
  double param_scale = 1;  // P
};

double attr_product(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) {
      double p = 1;
      for (int64_t x : a.ints()) p *= double(x);
      return p;
    }
  return 1;
}

// R and P of Note [node case tolerance] for a single-node case.
void set_magnitudes(NodeCase& c) {
  const onnx::GraphProto& g = c.model.graph();
  std::map<std::string, std::vector<float>> init;
  std::map<std::string, std::vector<int64_t>> dims;
  for (const auto& t : g.initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT) continue;
    init[t.name()] = floats_of(t);
    dims[t.name()] = {t.dims().begin(), t.dims().end()};
  }
  const onnx::NodeProto& n = g.node(0);
  const std::string& op = n.op_type();
  if (op == "Conv" && n.input_size() > 1 && dims.count(n.input(1))) {
    const auto& w = dims[n.input(1)];
    c.reduction = 1;
    for (size_t k = 1; k < w.size(); ++k) c.reduction *= double(w[k]);
  } else if (op == "ConvTranspose" && n.input_size() > 1 && dims.count(n.input(1))) {
    const auto& w = dims[n.input(1)];  // [C_in, C_out / g, k...]: at most C_in k... terms
    c.reduction = w.empty() ? 1 : double(w[0]);
    for (size_t k = 2; k < w.size(); ++k) c.reduction *= double(w[k]);
  } else if (op == "AveragePool" || op == "MaxPool") {
    c.reduction = attr_product(n, "kernel_shape");
  } else if (op == "Resize") {
    std::string mode = "nearest";
    for (const auto& a : n.attribute())
      if (a.name() == "mode") mode = a.s();
    const double taps = mode == "cubic" ? 4 : mode == "linear" ? 2 : 1;
    c.reduction = taps * taps;
    c.param_scale = mode == "cubic" ? 2 : 1;
    return;
  }
  if (op == "BatchNormalization" && n.input_size() == 5) {
    double eps = 1e-5;
    for (const auto& a : n.attribute())
      if (a.name() == "epsilon") eps = a.f();
    const auto &scale = init[n.input(1)], &bias = init[n.input(2)], &mean = init[n.input(3)],
               &var = init[n.input(4)];
    double p = 0;
    for (size_t k = 0; k < scale.size() && k < bias.size() && k < mean.size() && k < var.size();
         ++k) {
      const double f = std::fabs(scale[k]) / std::sqrt(double(var[k]) + eps);
      p = std::max(p, f * (1 + std::fabs(mean[k])) + std::fabs(bias[k]));
    }
    c.param_scale = p;
    return;
  }
  if (op == "InstanceNormalization" && n.input_size() == 3 && c.input_dims.size() >= 3 &&
      !c.input.empty()) {
    double eps = 1e-5;
    for (const auto& a : n.attribute())
      if (a.name() == "epsilon") eps = a.f();
    const auto &scale = init[n.input(1)], &bias = init[n.input(2)];
    const size_t ch = size_t(c.input_dims[1]), rows = size_t(c.input_dims[0]) * ch;
    const size_t len = c.input.size() / rows;
    c.reduction = double(len);
    double p = 0;
    for (size_t r = 0; r < rows && scale.size() == ch && bias.size() == ch; ++r) {
      double m = 0, v = 0;
      for (size_t k = 0; k < len; ++k) m += c.input[r * len + k];
      m /= double(len);
      for (size_t k = 0; k < len; ++k) v += (c.input[r * len + k] - m) * (c.input[r * len + k] - m);
      const double rstd = 1 / std::sqrt(v / double(len) + eps);
      p = std::max(p, std::fabs(scale[r % ch]) * rstd + std::fabs(bias[r % ch]));
    }
    c.param_scale = p;
    return;
  }
  double p = 0;
  for (const auto& kv : init) p = std::max(p, max_abs(kv.second));
  if (p > 0) c.param_scale = p;
}

// An elementwise case of rank 1 to 3 (ONNX's are [3, 4, 5] and [3]) read as an image: its input
// and output get trailing dimensions of 1 up to [N, C, H, W], the values unchanged (remat's
// model input is an image or token ids).
void as_image_case(onnx::GraphProto* g) {
  static const std::set<std::string> kElementwise = {
      "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Relu", "Sqrt", "Reciprocal",
      "Neg"};
  if (g->node_size() != 1 || !kElementwise.count(g->node(0).op_type())) return;
  for (onnx::ValueInfoProto* v : {g->mutable_input(0), g->mutable_output(0)}) {
    if (!v->type().has_tensor_type() || !v->type().tensor_type().has_shape()) return;
    auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    while (shape->dim_size() < 4) shape->add_dim()->set_dim_value(1);
  }
}

// The case in `dir` made into an export-like model (false: it has no data set or no input).
bool load_case(const fs::path& dir, NodeCase* c) {
  c->name = dir.filename().string();
  const fs::path data = dir / "test_data_set_0";
  if (!parse_file(dir / "model.onnx", &c->model) || !fs::exists(data / "input_0.pb")) return false;
  onnx::GraphProto* g = c->model.mutable_graph();
  if (g->input_size() == 0 || g->output_size() != 1) return false;
  for (int k = 1; k < g->input_size(); ++k) {
    onnx::TensorProto t;
    if (!g->input(k).type().has_tensor_type() ||
        !parse_file(data / ("input_" + std::to_string(k) + ".pb"), &t))
      return false;
    t.set_name(g->input(k).name());
    *g->add_initializer() = t;
  }
  while (g->input_size() > 1) g->mutable_input()->RemoveLast();
  // Before IR version 4 an initializer had to be a graph input too; an export's are not.
  if (c->model.ir_version() < 4) c->model.set_ir_version(4);
  as_image_case(g);
  raise_opset(c->model);
  onnx::TensorProto in, out;
  if (!parse_file(data / "input_0.pb", &in) || !parse_file(data / "output_0.pb", &out)) return false;
  c->input_dims = {in.dims().begin(), in.dims().end()};
  c->float_data = g->input(0).type().has_tensor_type() && g->output(0).type().has_tensor_type() &&
                  in.data_type() == onnx::TensorProto::FLOAT &&
                  out.data_type() == onnx::TensorProto::FLOAT;
  try {
    if (c->float_data) c->input = floats_of(in), c->expected = floats_of(out);
  } catch (const UserError&) {
    c->float_data = false;  // not a tensor after all (a sequence's file)
  }
  if (g->node_size() == 1) set_magnitudes(*c);
  return true;
}

ModelConfig import_case(const std::string& path, const NodeCase& c) {
  const int64_t batch = c.input_dims.empty() ? 1 : std::max<int64_t>(1, c.input_dims[0]);
  return inference_config(load_model_config(path, {"batch=" + std::to_string(batch)}));
}

// The imported model's eval-mode forward output on the case's input.
std::vector<float> forward(const ModelConfig& cfg, const NodeCase& c) {
  const OpRegistry ops = make_builtin_registry();
  Graph g = build_forward_graph(cfg, ops);
  std::unique_ptr<Backend> be = make_cpu_backend();
  Executor ex(g, ops, *be);
  ex.init_parameters(cfg.seed);
  write_initial_values(ex, cfg);
  const ValueId out = g.node(g.value(g.loss).producer).inputs[0];
  std::vector<float> got(static_cast<size_t>(g.value(out).desc.numel()));
  ex.capture(out, got.data());
  int64_t labels = 1;
  for (const Value& v : g.values)
    if (v.kind == ValueKind::Label) labels = std::max(labels, v.desc.numel());
  const std::vector<int32_t> zeros(static_cast<size_t>(labels), 0);
  ex.run_step(halfway_plan(g, ops, *be, "keep"), c.input.data(), zeros.data(), 0);
  return got;
}

class OnnxNodeCases : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onnx_import_built()) GTEST_SKIP() << "built without ONNX";
    if (!fs::is_directory(REMAT_ONNX_NODE_CASES))
      GTEST_SKIP() << REMAT_ONNX_NODE_CASES << " is missing (Debian's libonnx-testdata)";
    char tmpl[] = "/tmp/remat-onnx-nodes-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(OnnxNodeCases, EveryCaseMatchesOrIsAClearError) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(REMAT_ONNX_NODE_CASES))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::set<std::string> imported;
  int refused = 0;
  double closest = 0;  // the largest difference over its bound, and where
  std::string closest_case;
  for (const fs::path& d : dirs) {
    NodeCase c;
    if (!load_case(d, &c)) continue;
    SCOPED_TRACE(c.name);
    const std::string path = dir_ + "/" + c.name + ".onnx";
    {
      std::ofstream f(path, std::ios::binary);
      ASSERT_TRUE(c.model.SerializeToOstream(&f));
    }
    ModelConfig cfg;
    try {
      cfg = import_case(path, c);
    } catch (const UserError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos)
          << "the error does not name the file: " << e.what();
      EXPECT_EQ(kMustImport.count(c.name), 0u) << "no longer imports: " << e.what();
      continue;
    }
    imported.insert(c.name);
    if (!c.float_data) {
      ADD_FAILURE() << "imports, but its data is not float32: compare it here";
      continue;
    }
    const std::vector<float> got = forward(cfg, c);
    ASSERT_EQ(got.size(), c.expected.size());
    const double u = std::ldexp(1.0, -24);
    const double scale = c.reduction * std::max(max_abs(c.input), 1.0) * c.param_scale +
                         c.param_scale + max_abs(c.expected);
    const double bound = 2 * (c.reduction + 4) * u * scale;
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) {  // a NaN where none is expected is no match
      if (std::isnan(got[k]) && std::isnan(c.expected[k])) continue;
      const double d = std::fabs(double(got[k]) - double(c.expected[k]));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
    EXPECT_LE(worst, bound) << "largest difference " << worst << " against the bound " << bound;
    if (worst / bound >= closest) closest = worst / bound, closest_case = c.name;
  }
  for (const std::string& name : kMustImport)
    EXPECT_EQ(imported.count(name), 1u) << name << " did not import";
  std::printf("node cases: %zu imported and matched their expected outputs (the largest "
              "difference %.3g of its bound, %s), %d refused with an error naming the file\n",
              imported.size(), closest, closest_case.c_str(), refused);
}

}  // namespace
}  // namespace remat
