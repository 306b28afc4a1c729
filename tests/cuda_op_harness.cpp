// CUDA-vs-CPU op harness implementation: the tolerance table, a generic "run this small graph
// on a backend" routine shared by both sides, and value-by-value comparison.
#include "tests/cuda_op_harness.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "runtime/check.h"

namespace remat {

namespace {

constexpr CudaTolerance kCudaExact{0.0, 0.0};
constexpr CudaTolerance kCudaReduction{1e-6, 1e-5};
constexpr CudaTolerance kCudaOptimizer{1e-7, 1e-6};  // exact when both sides avoid FMA
constexpr CudaTolerance kCudaGemm{1e-5, 1e-4};

}  // namespace

CudaTolerance cuda_tolerance(const std::string& op) {
  const std::map<std::string, CudaTolerance> table{
          // elementwise and data movement (kernels/elementwise.cu, upsample.cu, dropout.cu)
          {"relu", kCudaExact},
          {"relu6", kCudaExact},
          {"relu_grad", kCudaExact},
          {"relu6_grad", kCudaExact},
          {"add", kCudaExact},
          {"concat", kCudaExact},
          {"concat_slice", kCudaExact},
          {"flatten", kCudaExact},
          {"flatten_grad", kCudaExact},
          {"upsample", kCudaExact},
          {"upsample_grad", kCudaExact},
          {"dropout", kCudaExact},
          {"dropout_grad", kCudaExact},
          {"global_avgpool_grad", kCudaExact},
          {"maxpool", kCudaExact},
          // reductions in a different order than the CPU
          {"global_avgpool", kCudaReduction},
          {"softmax_xent", kCudaReduction},
          {"softmax_xent_grad", kCudaReduction},
          {"softmax_xent_pixel", kCudaReduction},
          {"softmax_xent_pixel_grad", kCudaReduction},
          {"conv2d_grad_bias", kCudaReduction},
          {"dense_grad_bias", kCudaReduction},
          {"maxpool_grad", kCudaReduction},
          {"avgpool", kCudaReduction},
          {"avgpool_grad", kCudaReduction},
          // optimizer updates
          {"sgd", kCudaOptimizer},
          {"adam", kCudaOptimizer},
          // cuDNN / cuBLAS (TF32 off)
          {"conv2d", kCudaGemm},
          {"conv2d_grad_input", kCudaGemm},
          {"conv2d_grad_weight", kCudaGemm},
          {"dense", kCudaGemm},
          {"dense_grad_input", kCudaGemm},
          {"dense_grad_weight", kCudaGemm},
          {"batchnorm", kCudaGemm},
          {"batchnorm_grad_input", kCudaGemm},
          {"batchnorm_grad_weight", kCudaGemm},
          {"batchnorm_grad_bias", kCudaGemm},
      };
  auto it = table.find(op);
  REMAT_CHECK(it != table.end(),
              "no CUDA tolerance for op '" << op << "': add it to cuda_tolerance()");
  return it->second;
}

namespace {

// One backend allocation per value, freed on scope exit (also when a kernel throws).
class BackendBuffers {
 public:
  explicit BackendBuffers(Backend& b) : b_(b) {}
  ~BackendBuffers() {
    for (void* p : ptrs_) b_.raw_free(p);
  }
  void* alloc(int64_t bytes) {
    ptrs_.push_back(b_.raw_alloc(std::max<int64_t>(bytes, 4)));
    return ptrs_.back();
  }
  void release(void* p) {
    for (auto& q : ptrs_)
      if (q == p) {
        b_.raw_free(q);
        q = ptrs_.back();
        ptrs_.pop_back();
        return;
      }
  }

 private:
  Backend& b_;
  std::vector<void*> ptrs_;
};

// Uploads `bytes` of NaN (F32) so unwritten elements are visible.
void fill_nan(Backend& b, void* dst, int64_t bytes) {
  std::vector<float> nan(static_cast<size_t>((bytes + 3) / 4),
                         std::numeric_limits<float>::quiet_NaN());
  b.copy_from_host(dst, nan.data(), bytes);
}

// The op whose tolerance applies to value v: its producer's op, else the op of the first node
// writing it (Update nodes write their param), else the forward node's op.
std::string writer_op(const Graph& g, ValueId v) {
  for (const Node& n : g.nodes)
    if (n.output == v) return n.op;
  return g.nodes.at(0).op;
}

bool within(float want, float got, const CudaTolerance& tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  const double d = std::fabs(static_cast<double>(want) - static_cast<double>(got));
  return d <= tol.abs + tol.rel * std::fabs(static_cast<double>(want));
}

}  // namespace

CudaOpHarness::CudaOpHarness(const OpRegistry& ops, OpCase c) : host_(ops, std::move(c)) {
  if (host_.op().gradient) {
    if (!host_.is_loss()) dy_ = host_.random_dy(977);
    host_.gradients(dy_);  // emits the backward nodes
  }
}

void CudaOpHarness::set_dy(std::vector<float> dy) {
  REMAT_CHECK(static_cast<int64_t>(dy.size()) == host_.output_desc().numel(),
              "set_dy: " << dy.size() << " values, output has " << host_.output_desc().numel());
  dy_ = std::move(dy);
}

GraphRun CudaOpHarness::run_graph(Backend& b, int steps) {
  const Graph& g = host_.graph();
  const OpRegistry reg = make_builtin_registry();
  BackendBuffers mem(b);
  std::vector<void*> data(g.values.size(), nullptr);
  const Node& fwd = g.nodes.at(0);
  const ValueId dy_id = g.find_value("dy");
  for (size_t v = 0; v < g.values.size(); ++v) {
    const TensorDesc& d = g.values[v].desc;
    data[v] = mem.alloc(d.bytes());
    fill_nan(b, data[v], d.bytes());
  }
  for (size_t k = 0; k < fwd.inputs.size(); ++k) {
    const ValueId v = fwd.inputs[k];
    const TensorDesc& d = g.value(v).desc;
    const void* src = d.dtype == DType::F32
                          ? static_cast<const void*>(host_.input(static_cast<int>(k)).data())
                          : host_.input_i32(static_cast<int>(k)).data();
    b.copy_from_host(data[static_cast<size_t>(v)], src, d.bytes());
  }
  if (dy_id != kNoValue) {
    REMAT_CHECK(static_cast<int64_t>(dy_.size()) == g.value(dy_id).desc.numel(), "dy size");
    b.copy_from_host(data[static_cast<size_t>(dy_id)], dy_.data(), g.value(dy_id).desc.bytes());
  }
  for (int s = 0; s < steps; ++s)
    for (const Node& n : g.nodes) {
      const OpDef& def = reg.get(n.op);
      ExecContext ctx;
      ctx.node = &n;
      for (ValueId v : n.inputs)
        ctx.inputs.push_back(TensorView{&g.value(v).desc, data[static_cast<size_t>(v)]});
      ctx.output = TensorView{&g.value(n.output).desc, data[static_cast<size_t>(n.output)]};
      ctx.step = step + s;
      ctx.first_compute = first_compute;
      const int64_t ws = b.workspace_bytes(def, ctx);
      REMAT_CHECK(ws >= 0, "node '" << n.name << "': negative workspace " << ws);
      void* wsp = ws > 0 ? mem.alloc(ws) : nullptr;
      if (wsp) fill_nan(b, wsp, ws);
      ctx.workspace = wsp;
      ctx.workspace_bytes = ws;
      b.run(def, ctx);
      b.synchronize();
      if (wsp) mem.release(wsp);
    }
  b.synchronize();
  GraphRun out;
  out.f.resize(g.values.size());
  out.i.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    const TensorDesc& d = g.values[v].desc;
    if (d.dtype == DType::F32) {
      out.f[v].resize(static_cast<size_t>(d.numel()));
      b.copy_to_host(out.f[v].data(), data[v], d.bytes());
    } else {
      out.i[v].resize(static_cast<size_t>(d.numel()));
      b.copy_to_host(out.i[v].data(), data[v], d.bytes());
    }
  }
  return out;
}

::testing::AssertionResult compare_runs(const Graph& g, const GraphRun& want, const GraphRun& got,
                                        bool bitwise) {
  std::ostringstream err;
  int bad_values = 0;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const std::string& name = g.values[v].name;
    if (want.i[v] != got.i[v]) {
      ++bad_values;
      err << "\n  value '" << name << "' (i32) differs";
      continue;
    }
    const std::vector<float>& a = want.f[v];
    const std::vector<float>& b = got.f[v];
    if (a.size() != b.size()) {
      ++bad_values;
      err << "\n  value '" << name << "': " << a.size() << " vs " << b.size() << " elements";
      continue;
    }
    const std::string op = writer_op(g, static_cast<ValueId>(v));
    const CudaTolerance tol = bitwise ? kCudaExact : cuda_tolerance(op);
    int64_t mismatches = 0;
    double max_abs = 0;
    std::ostringstream first;
    for (size_t j = 0; j < a.size(); ++j) {
      const bool ok = bitwise ? std::memcmp(&a[j], &b[j], sizeof(float)) == 0
                              : within(a[j], b[j], tol);
      if (!std::isnan(a[j]) && !std::isnan(b[j]))
        max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[j]) - b[j]));
      if (ok) continue;
      if (mismatches++ < 3)
        first << " [" << j << "] " << a[j] << " vs " << b[j] << ";";
    }
    if (mismatches) {
      ++bad_values;
      err << "\n  value '" << name << "' (" << op << ", tol abs " << tol.abs << " rel " << tol.rel
          << (bitwise ? ", bitwise" : "") << "): " << mismatches << " of " << a.size()
          << " elements differ, max abs error " << max_abs << ";" << first.str();
    }
  }
  if (bad_values == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << g.nodes.at(0).op << ": " << bad_values
                                       << " values differ" << err.str();
}

::testing::AssertionResult CudaOpHarness::compare_with_cpu(Backend& cuda, int steps) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const GraphRun want = run_graph(*cpu, steps);
  const GraphRun got = run_graph(cuda, steps);
  return compare_runs(host_.graph(), want, got, false);
}

::testing::AssertionResult CudaOpHarness::check_rerun_identical(Backend& b, int steps) {
  const GraphRun first = run_graph(b, steps);
  const GraphRun second = run_graph(b, steps);
  return compare_runs(host_.graph(), first, second, true);
}

void CudaOpTest::SetUp() {
  std::string why;
  cuda_ = make_cuda_backend(0, &why);
  if (!cuda_) GTEST_SKIP() << "CUDA backend unavailable: " << why;
}

}  // namespace remat
