// Op test harness implementation: a one-op graph on host buffers, its own GradEmitter, and a
// central-difference gradient checker (see op_harness.h for the contract).
#include "tests/op_harness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>

#include "runtime/core/bf16.h"
#include "runtime/core/check.h"

namespace remat {
namespace {

// splitmix64: a tiny, platform-independent generator so test inputs are the same everywhere.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {  // [lo, hi)
    float u = static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
  }
};

// Appends Backward nodes to the harness graph. Each emitted node's attrs are re-parsed by
// its own op, as graph_from_json_text would do, so a rule that shares attrs its op cannot
// read fails here rather than when a graph file is loaded.
class HarnessEmitter : public GradEmitter {
 public:
  HarnessEmitter(Graph& g, const OpRegistry& ops, NodeId fwd) : g_(g), ops_(ops), fwd_(fwd) {}

  ValueId emit(const std::string& suffix, const std::string& op, std::vector<ValueId> inputs,
               const TensorDesc& out) override {
    const Node& f = g_.node(fwd_);
    return emit(suffix, op, std::move(inputs), out, f.attrs, f.typed);
  }

  ValueId emit(const std::string& suffix, const std::string& op, std::vector<ValueId> inputs,
               const TensorDesc& out, AttrMap attrs, OpAttrsPtr typed) override {
    const OpDef& def = ops_.get(op);
    REMAT_CHECK(typed != nullptr, "emit '" << op << "': typed attrs are null");
    AttrReader reader(attrs);
    def.parse(reader);  // throws if `op` cannot read these attrs
    for (ValueId v : inputs)
      REMAT_CHECK(v >= 0 && v < static_cast<ValueId>(g_.values.size()),
                  "emit '" << op << "': input value " << v << " out of range");
    const Node& f = g_.node(fwd_);
    Node n;
    n.name = f.name + "." + suffix;
    n.op = op;
    n.kind = NodeKind::Backward;
    n.attrs = std::move(attrs);
    n.typed = std::move(typed);
    n.inputs = std::move(inputs);
    n.forward = fwd_;
    n.seed = f.seed;
    Value v;
    v.name = n.name;
    v.desc = out;
    v.kind = ValueKind::Activation;
    v.producer = static_cast<NodeId>(g_.nodes.size());
    g_.values.push_back(v);
    n.output = static_cast<ValueId>(g_.values.size() - 1);
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back().output;
  }

  const Graph& graph() const override { return g_; }

 private:
  Graph& g_;
  const OpRegistry& ops_;
  NodeId fwd_;
};

}  // namespace

AttrMap attr_map(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  AttrMap m;
  for (const auto& p : kv) m.set(p.first, p.second);
  m.origin = "test";
  return m;
}

OpHarness::OpHarness(const OpRegistry& ops, OpCase c)
    : ops_(ops), cpu_(make_cpu_backend()), case_(std::move(c)) {
  const OpDef& def = ops_.get(case_.op);
  num_data_ = static_cast<int>(case_.inputs.size());
  REMAT_CHECK(case_.input_values.empty() || case_.input_values.size() >= case_.inputs.size(),
              "input_values must be empty or have one entry per data input (then per parameter)");
  AttrReader reader(case_.attrs);
  OpAttrsPtr typed = def.parse(reader);
  REMAT_CHECK(typed != nullptr, "op '" << def.name << "' parse returned null");
  TensorDesc out = def.infer(*typed, case_.inputs);
  std::vector<ParamSpec> params;
  if (def.params) params = def.params(*typed, case_.inputs);

  graph_.name = "harness";
  Rng rng{case_.seed};
  Node n;
  n.name = case_.op;
  n.op = case_.op;
  n.kind = def.kind;
  n.attrs = case_.attrs;
  n.typed = typed;
  n.seed = case_.seed;
  for (int i = 0; i < num_data_; ++i) {
    Value v;
    v.name = "in" + std::to_string(i);
    v.desc = case_.inputs[static_cast<size_t>(i)];
    v.kind = v.desc.dtype == DType::I32 ? ValueKind::Label : ValueKind::Input;
    graph_.values.push_back(v);
    n.inputs.push_back(static_cast<ValueId>(graph_.values.size() - 1));
  }
  for (const ParamSpec& p : params) {
    graph_.values.push_back(param_value(case_.op, p));
    n.inputs.push_back(static_cast<ValueId>(graph_.values.size() - 1));
  }
  if (def.kind == NodeKind::Update) {
    REMAT_CHECK(!n.inputs.empty(), "update op without inputs");
    n.output = n.inputs[0];  // Note [in-place updates]
  } else {
    Value v;
    v.name = case_.op;
    v.desc = out;
    v.kind = ValueKind::Activation;
    v.producer = 0;
    graph_.values.push_back(v);
    n.output = static_cast<ValueId>(graph_.values.size() - 1);
  }
  graph_.nodes.push_back(std::move(n));

  // Host buffers and their initial values.
  bufs_.resize(graph_.values.size());
  for (size_t v = 0; v < graph_.values.size(); ++v) {
    const Value& val = graph_.values[v];
    Buffer& b = bufs_[v];
    int64_t numel = val.desc.numel();
    if (val.desc.dtype == DType::I32) {
      b.i.resize(static_cast<size_t>(numel));
      for (auto& x : b.i)
        x = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(std::max(1, case_.int_max)));
      continue;
    }
    b.f.resize(static_cast<size_t>(numel));
    bool state = val.kind == ValueKind::Buffer || val.kind == ValueKind::OptState;
    for (auto& x : b.f) {
      if (state && val.init == InitKind::Zeros) x = 0.0f;
      else if (state && val.init == InitKind::Ones) x = 1.0f;
      else if (state) x = rng.uniform(0.0f, 1.0f);
      else x = rng.uniform(-1.0f, 1.0f);
    }
    if (val.desc.dtype == DType::BF16) {
      b.h.resize(b.f.size());
      bf16_narrow(b.f.data(), b.h.data(), numel);
      b.f.clear();
    }
  }
  REMAT_CHECK(case_.input_values.size() <= node().inputs.size(),
              "input_values has " << case_.input_values.size() << " entries for "
                                  << node().inputs.size() << " inputs and parameters");
  for (size_t i = 0; i < case_.input_values.size(); ++i)
    if (!case_.input_values[i].empty()) set_input(static_cast<int>(i), case_.input_values[i]);
}

const OpDef& OpHarness::op() const { return ops_.get(case_.op); }
int OpHarness::num_inputs() const { return static_cast<int>(node().inputs.size()); }
bool OpHarness::is_loss() const { return op().kind == NodeKind::Loss; }

const TensorDesc& OpHarness::input_desc(int i) const {
  return graph_.value(node().inputs.at(static_cast<size_t>(i))).desc;
}
const TensorDesc& OpHarness::output_desc() const { return graph_.value(node().output).desc; }

std::vector<ParamSpec> OpHarness::param_specs() const {
  if (!op().params) return {};
  return op().params(*node().typed, case_.inputs);
}

std::vector<float>& OpHarness::input(int i) {
  ValueId v = node().inputs.at(static_cast<size_t>(i));
  REMAT_CHECK(graph_.value(v).desc.dtype == DType::F32, "input " << i << " is not F32");
  return buf(v).f;
}

std::vector<int32_t>& OpHarness::input_i32(int i) {
  ValueId v = node().inputs.at(static_cast<size_t>(i));
  REMAT_CHECK(graph_.value(v).desc.dtype == DType::I32, "input " << i << " is not I32");
  return buf(v).i;
}

void OpHarness::set_input(int i, std::vector<float> v) {
  const TensorDesc& d = input_desc(i);
  REMAT_CHECK(static_cast<int64_t>(v.size()) == d.numel(),
              "set_input(" << i << "): " << v.size() << " values for shape " << shape_str(d.shape));
  if (d.dtype == DType::F32) {
    input(i) = std::move(v);
  } else if (d.dtype == DType::BF16) {
    auto& dst = buf(node().inputs.at(static_cast<size_t>(i))).h;
    dst.resize(v.size());
    bf16_narrow(v.data(), dst.data(), static_cast<int64_t>(v.size()));
  } else {
    auto& dst = input_i32(i);
    for (size_t k = 0; k < v.size(); ++k) dst[k] = static_cast<int32_t>(std::lround(v[k]));
  }
}

void* OpHarness::data_of(Buffer& b, DType t) {
  switch (t) {
    case DType::F32: return b.f.data();
    case DType::I32: return b.i.data();
    case DType::BF16: return b.h.data();
  }
  return nullptr;
}

std::vector<float> OpHarness::value(ValueId v) const {
  const Buffer& b = bufs_.at(static_cast<size_t>(v));
  switch (graph_.value(v).desc.dtype) {
    case DType::F32: return b.f;
    case DType::I32: return std::vector<float>(b.i.begin(), b.i.end());
    case DType::BF16: {
      std::vector<float> out(b.h.size());
      bf16_widen(b.h.data(), out.data(), static_cast<int64_t>(out.size()));
      return out;
    }
  }
  return {};
}

void OpHarness::run_node(NodeId id) {
  const Node& n = graph_.node(id);
  const OpDef& def = ops_.get(n.op);
  std::vector<TensorDesc> in_descs;
  ExecContext ctx;
  ctx.node = &n;
  for (ValueId v : n.inputs) {
    in_descs.push_back(graph_.value(v).desc);
    TensorView t;
    t.desc = &graph_.value(v).desc;
    t.data = data_of(buf(v), t.desc->dtype);
    ctx.inputs.push_back(t);
  }
  const TensorDesc& od = graph_.value(n.output).desc;
  Buffer& ob = buf(n.output);
  bool in_place = std::find(n.inputs.begin(), n.inputs.end(), n.output) != n.inputs.end();
  const size_t count = static_cast<size_t>(od.numel());
  if (od.dtype == DType::F32) {
    ob.f.resize(count);
    if (!in_place) std::fill(ob.f.begin(), ob.f.end(), std::numeric_limits<float>::quiet_NaN());
  } else if (od.dtype == DType::BF16) {
    ob.h.resize(count);
    if (!in_place) std::fill(ob.h.begin(), ob.h.end(), uint16_t{0x7FC0});  // a bf16 NaN
  } else {
    ob.i.resize(count);
    if (!in_place) std::fill(ob.i.begin(), ob.i.end(), INT32_MIN);
  }
  ctx.output.desc = &od;
  ctx.output.data = data_of(ob, od.dtype);
  ctx.step = step;
  ctx.first_compute = first_compute;
  const int64_t ws_bytes = cpu_->workspace_bytes(def, ctx);
  REMAT_CHECK(ws_bytes >= 0, "negative workspace");
  // Workspace filled with NaN: kernels must write before they read (Note in op_harness.h).
  std::vector<float> ws(static_cast<size_t>((ws_bytes + 3) / 4),
                        std::numeric_limits<float>::quiet_NaN());
  ctx.workspace = ws.empty() ? nullptr : ws.data();
  ctx.workspace_bytes = ws_bytes;
  cpu_->run(def, ctx);
}

std::vector<float> OpHarness::forward() {
  run_node(0);
  return value(node().output);
}

void OpHarness::emit_backward() {
  if (emitted_) return;
  const OpDef& def = op();
  REMAT_CHECK(def.gradient, "op '" << def.name << "' has no gradient rule");
  if (!is_loss()) {
    Value v;
    v.name = "dy";
    v.desc = output_desc();
    v.kind = ValueKind::Input;
    graph_.values.push_back(v);
    dy_ = static_cast<ValueId>(graph_.values.size() - 1);
  }
  HarnessEmitter em(graph_, ops_, 0);
  Node fwd = node();  // a copy: emitting appends to graph_.nodes
  grad_ids_ = def.gradient(em, fwd, dy_);
  REMAT_CHECK(grad_ids_.size() == fwd.inputs.size(),
              "gradient rule of '" << def.name << "' returned " << grad_ids_.size()
                                   << " gradients for " << fwd.inputs.size() << " inputs");
  for (size_t i = 0; i < grad_ids_.size(); ++i) {
    ValueId g = grad_ids_[i];
    if (g == kNoValue) continue;
    REMAT_CHECK(graph_.value(g).desc == graph_.value(fwd.inputs[i]).desc,
                "gradient " << i << " of '" << def.name << "' has shape "
                            << shape_str(graph_.value(g).desc.shape) << ", input has "
                            << shape_str(graph_.value(fwd.inputs[i]).desc.shape));
  }
  bufs_.resize(graph_.values.size());
  emitted_ = true;
}

std::vector<NodeId> OpHarness::backward_nodes() const {
  std::vector<NodeId> out;
  for (NodeId n = 1; n < static_cast<NodeId>(graph_.nodes.size()); ++n) out.push_back(n);
  return out;
}

std::vector<std::vector<float>> OpHarness::gradients(const std::vector<float>& dy) {
  emit_backward();
  if (dy_ != kNoValue) {
    REMAT_CHECK(static_cast<int64_t>(dy.size()) == output_desc().numel(),
                "dy has " << dy.size() << " values, output has " << output_desc().numel());
    if (output_desc().dtype == DType::BF16) {
      buf(dy_).h.resize(dy.size());
      bf16_narrow(dy.data(), buf(dy_).h.data(), static_cast<int64_t>(dy.size()));
    } else {
      buf(dy_).f = dy;
    }
  }
  run_node(0);
  for (NodeId n = 1; n < static_cast<NodeId>(graph_.nodes.size()); ++n) run_node(n);
  std::vector<std::vector<float>> out(grad_ids_.size());
  for (size_t i = 0; i < grad_ids_.size(); ++i)
    if (grad_ids_[i] != kNoValue) out[i] = value(grad_ids_[i]);
  return out;
}

double OpHarness::loss_value(const std::vector<float>& dy) {
  std::vector<float> y = forward();
  double l = 0;
  for (size_t k = 0; k < y.size(); ++k)
    l += is_loss() ? static_cast<double>(y[k]) : static_cast<double>(dy[k]) * y[k];
  return l;
}

bool OpHarness::perturbable(int i) const {
  const Value& v = graph_.value(node().inputs.at(static_cast<size_t>(i)));
  return v.desc.dtype == DType::F32 && (v.kind == ValueKind::Input || v.kind == ValueKind::Param);
}

std::vector<std::vector<float>> OpHarness::numeric_gradients(const std::vector<float>& dy,
                                                             double eps) {
  std::vector<std::vector<float>> out(static_cast<size_t>(num_inputs()));
  for (int i = 0; i < num_inputs(); ++i) {
    if (!perturbable(i)) continue;
    std::vector<float>& x = input(i);
    for (size_t j = 0; j < x.size(); ++j) {
      float x0 = x[j];
      float xp = static_cast<float>(x0 + eps), xm = static_cast<float>(x0 - eps);
      x[j] = xp;
      double lp = loss_value(dy);
      x[j] = xm;
      double lm = loss_value(dy);
      x[j] = x0;
      double h = static_cast<double>(xp) - static_cast<double>(xm);
      out[static_cast<size_t>(i)].push_back(static_cast<float>((lp - lm) / h));
    }
  }
  return out;
}

std::vector<float> OpHarness::random_dy(uint64_t seed) const {
  Rng rng{seed};
  std::vector<float> dy(static_cast<size_t>(output_desc().numel()));
  for (auto& x : dy) x = rng.uniform(-1.0f, 1.0f);
  return dy;
}

::testing::AssertionResult OpHarness::check_gradients(const GradTolerance& tol,
                                                      std::vector<float> dy) {
  if (!op().gradient) return ::testing::AssertionFailure() << case_.op << ": no gradient rule";
  if (dy.empty() && !is_loss()) dy = random_dy(case_.seed * 7919 + 13);
  std::vector<std::vector<float>> analytic = gradients(dy);
  std::ostringstream err;
  int failures = 0;
  for (int i = 0; i < num_inputs(); ++i) {
    if (!perturbable(i)) continue;
    const std::vector<float>& a = analytic[static_cast<size_t>(i)];
    std::vector<float>& x = input(i);
    int skipped = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      float x0 = x[j];
      double l0 = loss_value(dy);
      // Step by the float actually representable, so the divisor matches the perturbation.
      float xp = static_cast<float>(x0 + tol.eps), xm = static_cast<float>(x0 - tol.eps);
      x[j] = xp;
      double lp = loss_value(dy);
      x[j] = xm;
      double lm = loss_value(dy);
      x[j] = x0;
      double hp = static_cast<double>(xp) - x0, hm = x0 - static_cast<double>(xm);
      double numeric = (lp - lm) / (hp + hm);
      double right = (lp - l0) / hp, left = (l0 - lm) / hm;
      double an = a.empty() ? 0.0 : static_cast<double>(a[j]);
      double scale = std::max({1.0, std::fabs(an), std::fabs(numeric)});
      if (std::fabs(an - numeric) <= tol.rel * scale) continue;
      // Within eps of a kink: the one-sided slopes disagree and the analytic gradient is one
      // of them (exact for piecewise-linear ops).
      bool kink = std::fabs(right - left) > tol.kink * scale;
      bool one_sided = std::fabs(an - left) <= tol.rel * scale ||
                       std::fabs(an - right) <= tol.rel * scale;
      if (kink && one_sided) {
        ++skipped;
        continue;
      }
      if (++failures <= 10)
        err << "\n  input " << i << " (" << graph_.value(node().inputs[static_cast<size_t>(i)]).name
            << ") element " << j << ": analytic " << an << ", numeric " << numeric
            << " (one-sided " << left << ", " << right << ")"
            << (a.empty() ? " (rule returned no gradient)" : "");
    }
    if (skipped > tol.max_skipped * static_cast<double>(x.size())) {
      ++failures;
      err << "\n  input " << i << ": " << skipped << " of " << x.size()
          << " elements sit on a kink (max fraction " << tol.max_skipped << ")";
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << case_.op << ": " << failures
                                       << " gradient mismatches" << err.str();
}

}  // namespace remat
