// A fake op registry for the builder tests: shape rules and parameters like the real ops, no
// kernels. Lets the models/ suites check the builder independently of ops/.
#include "tests/model_test_util.h"

#include <memory>

namespace remat::test {

namespace {

struct FakeAttrs : OpAttrs {
  int64_t filters = 0, kernel = 1, padding = 0, units = 0;
  bool relu = false;
};

OpDef fake_op(const std::string& name, int min_in, int max_in, NodeKind kind = NodeKind::Forward) {
  OpDef op;
  op.name = name;
  op.min_inputs = min_in;
  op.max_inputs = max_in;
  op.kind = kind;
  op.parse = [name](AttrReader& r) -> OpAttrsPtr {
    r.finish(name);
    return std::make_shared<FakeAttrs>();
  };
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>&, const TensorDesc&) {
    return OpCost{};
  };
  op.cpu = [](const ExecContext&) {};
  op.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) { return in.at(0); };
  return op;
}

void need_rank(const std::string& op, const TensorDesc& x, size_t rank) {
  if (x.shape.size() != rank)
    REMAT_USER_ERROR(op << " expects a rank-" << rank << " input, got " << shape_str(x.shape));
}

}  // namespace

OpRegistry make_fake_registry() {
  OpRegistry r;
  OpDef conv = fake_op("conv2d", 1, 1);
  conv.parse = [](AttrReader& rd) -> OpAttrsPtr {
    auto a = std::make_shared<FakeAttrs>();
    a->filters = rd.require_int("filters", 1, 1 << 20);
    a->kernel = rd.require_int("kernel", 1, 64);
    a->padding = rd.get_int("padding", 0, 0, 64);
    a->relu = rd.get_choice("activation", "none", {"none", "relu"}) == "relu";
    rd.finish("conv2d");
    return a;
  };
  conv.infer = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    const auto& a = static_cast<const FakeAttrs&>(at);
    need_rank("conv2d", in[0], 4);
    const Shape& s = in[0].shape;
    int64_t h = s[2] + 2 * a.padding - a.kernel + 1, w = s[3] + 2 * a.padding - a.kernel + 1;
    if (h < 1 || w < 1) REMAT_USER_ERROR("conv2d kernel larger than input " << shape_str(s));
    return TensorDesc{{s[0], a.filters, h, w}, DType::F32};
  };
  conv.params = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    const auto& a = static_cast<const FakeAttrs&>(at);
    const int64_t c = in[0].shape[1], k = a.kernel;
    ParamSpec w{"weight", {{a.filters, c, k, k}, DType::F32}, ValueKind::Param,
                InitKind::HeNormal, c * k * k, a.filters * k * k};
    ParamSpec b{"bias", {{a.filters}, DType::F32}, ValueKind::Param, InitKind::Zeros, 0, 0};
    return std::vector<ParamSpec>{w, b};
  };
  r.add(conv);

  OpDef dense = fake_op("dense", 1, 1);
  dense.parse = [](AttrReader& rd) -> OpAttrsPtr {
    auto a = std::make_shared<FakeAttrs>();
    a->units = rd.require_int("units", 1, 1 << 24);
    rd.finish("dense");
    return a;
  };
  dense.infer = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    need_rank("dense", in[0], 2);
    return TensorDesc{{in[0].shape[0], static_cast<const FakeAttrs&>(at).units}, DType::F32};
  };
  dense.params = [](const OpAttrs& at, const std::vector<TensorDesc>& in) {
    const int64_t u = static_cast<const FakeAttrs&>(at).units, k = in[0].shape[1];
    return std::vector<ParamSpec>{
        {"weight", {{u, k}, DType::F32}, ValueKind::Param, InitKind::GlorotUniform, k, u},
        {"bias", {{u}, DType::F32}, ValueKind::Param, InitKind::Zeros, 0, 0}};
  };
  r.add(dense);

  r.add(fake_op("relu", 1, 1));

  OpDef add = fake_op("add", 2, -1);
  add.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    for (const auto& x : in)
      if (!(x == in[0]))
        REMAT_USER_ERROR("add: input shapes differ: " << shape_str(in[0].shape) << " vs "
                                                      << shape_str(x.shape));
    return in[0];
  };
  r.add(add);

  OpDef cat = fake_op("concat", 2, -1);
  cat.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    TensorDesc out = in[0];
    need_rank("concat", out, 4);
    for (size_t k = 1; k < in.size(); ++k) {
      need_rank("concat", in[k], 4);
      out.shape[1] += in[k].shape[1];
    }
    return out;
  };
  r.add(cat);

  OpDef bn = fake_op("batchnorm", 1, 1);
  bn.params = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    const TensorDesc c{{in[0].shape[1]}, DType::F32};
    return std::vector<ParamSpec>{{"gamma", c, ValueKind::Param, InitKind::Ones, 0, 0},
                                  {"beta", c, ValueKind::Param, InitKind::Zeros, 0, 0},
                                  {"running_mean", c, ValueKind::Buffer, InitKind::Zeros, 0, 0},
                                  {"running_var", c, ValueKind::Buffer, InitKind::Ones, 0, 0}};
  };
  r.add(bn);

  OpDef gap = fake_op("global_avgpool", 1, 1);
  gap.infer = [](const OpAttrs&, const std::vector<TensorDesc>& in) {
    need_rank("global_avgpool", in[0], 4);
    return TensorDesc{{in[0].shape[0], in[0].shape[1]}, DType::F32};
  };
  r.add(gap);

  for (const char* name : {"softmax_xent", "softmax_xent_pixel"}) {
    OpDef loss = fake_op(name, 2, 2, NodeKind::Loss);
    loss.infer = [](const OpAttrs&, const std::vector<TensorDesc>&) {
      return TensorDesc{{1}, DType::F32};
    };
    r.add(loss);
  }

  OpDef sgd = fake_op("sgd", 2, 3, NodeKind::Update);
  sgd.parse = [](AttrReader& rd) -> OpAttrsPtr {
    rd.get_double("lr", 0.01, 0.0, 1e6);
    rd.get_double("momentum", 0.0, 0.0, 1.0);
    rd.get_double("weight_decay", 0.0, 0.0, 1e6);
    rd.finish("sgd");
    return std::make_shared<FakeAttrs>();
  };
  r.add(sgd);

  OpDef internal = fake_op("conv2d_grad_input", 2, 2, NodeKind::Backward);
  internal.user_visible = false;
  r.add(internal);
  return r;
}

}  // namespace remat::test
