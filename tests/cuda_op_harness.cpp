// CUDA-vs-CPU op harness implementation: a generic "run this small graph on a backend" routine
// shared by both sides, and value-by-value comparison with the tolerances of cuda_tolerance.cpp.
#include "tests/cuda_op_harness.h"

#include "runtime/core/bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/backends/cuda_backend.h"
#include "tests/cuda_tolerance.h"

namespace remat {

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

// Uploads `bytes` of 0xFF (a NaN in F32 and in BF16) so unwritten elements are visible.
void fill_nan(Backend& b, void* dst, int64_t bytes) {
  std::vector<unsigned char> nan(static_cast<size_t>(bytes), 0xFF);
  b.copy_from_host(dst, nan.data(), bytes);
}

// Uploads floats as a tensor of dtype `t` (F32, or BF16 rounded to nearest even).
void upload(Backend& b, void* dst, const std::vector<float>& host, DType t) {
  if (t == DType::BF16) {
    std::vector<uint16_t> h(host.size());
    bf16_narrow(host.data(), h.data(), static_cast<int64_t>(h.size()));
    b.copy_from_host(dst, h.data(), static_cast<int64_t>(h.size() * 2));
    return;
  }
  b.copy_from_host(dst, host.data(), static_cast<int64_t>(host.size() * 4));
}

// The bf16 part of a tolerance (Note [bf16 CUDA tolerance]).
constexpr double kBf16Rel = 3.0 * kBf16UnitRoundoff;

bool node_runs_in_bf16(const Graph& g, const Node& n) {
  if (g.value(n.output).desc.dtype == DType::BF16) return true;
  for (ValueId v : n.inputs)
    if (g.value(v).desc.dtype == DType::BF16) return true;
  return false;
}

// The node whose op's tolerance applies to value v: its producer, else the first node writing
// it (Update nodes write their param), else the forward node.
const Node& writer_node(const Graph& g, ValueId v) {
  for (const Node& n : g.nodes)
    if (n.output == v) return n;
  return g.nodes.at(0);
}

// The node whose op's tolerance value v gets: its writer, or for a copy out of another value
// (concat's gradient slices) the writer of that value, whose error the copy carries.
const Node& tolerance_node(const Graph& g, ValueId v) {
  const Node* n = &writer_node(g, v);
  while (n->op == "concat_slice" && !n->inputs.empty() && g.value(n->inputs[0]).producer >= 0)
    n = &writer_node(g, n->inputs[0]);
  return *n;
}

// Ops whose CUDA path rounds the GEMM's result to bf16 before a bias / activation epilogue
// kernel rounds it again (Note [bf16 GEMMs] in ops/dense.cpp, Note [bf16 convolutions];
// conv2d_transpose: cuDNN's backward-data pass writes bf16, then the bias epilogue).
bool has_bf16_epilogue(const std::string& op) {
  return op == "conv2d" || op == "conv2d_transpose" || op == "dense" || op == "linear";
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

GraphRun CudaOpHarness::run_graph(Backend& b, int steps, const GraphRun* inputs_from) {
  const Graph& g = host_.graph();
  REMAT_CHECK(!inputs_from || steps == 1, "run_graph: inputs_from needs a single step");
  std::vector<bool> written(g.values.size(), false);  // by an earlier node (inputs_from)
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
    if (d.dtype == DType::I32)
      b.copy_from_host(data[static_cast<size_t>(v)], host_.input_i32(static_cast<int>(k)).data(),
                       d.bytes());
    else
      upload(b, data[static_cast<size_t>(v)], host_.value(v), d.dtype);
  }
  if (dy_id != kNoValue) {
    REMAT_CHECK(static_cast<int64_t>(dy_.size()) == g.value(dy_id).desc.numel(), "dy size");
    upload(b, data[static_cast<size_t>(dy_id)], dy_, g.value(dy_id).desc.dtype);
  }
  for (int s = 0; s < steps; ++s)
    for (const Node& n : g.nodes) {
      const OpDef& def = reg.get(n.op);
      if (inputs_from) {
        for (ValueId v : n.inputs) {
          const auto i = static_cast<size_t>(v);
          if (!written[i]) continue;
          const TensorDesc& d = g.value(v).desc;
          if (d.dtype == DType::I32)
            b.copy_from_host(data[i], inputs_from->i[i].data(), d.bytes());
          else
            upload(b, data[i], inputs_from->f[i], d.dtype);
        }
        written[static_cast<size_t>(n.output)] = true;
      }
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
    } else if (d.dtype == DType::BF16) {
      std::vector<uint16_t> h(static_cast<size_t>(d.numel()));
      b.copy_to_host(h.data(), data[v], d.bytes());
      out.f[v].resize(h.size());
      bf16_widen(h.data(), out.f[v].data(), d.numel());
    } else {
      out.i[v].resize(static_cast<size_t>(d.numel()));
      b.copy_to_host(out.i[v].data(), data[v], d.bytes());
    }
  }
  return out;
}

::testing::AssertionResult compare_runs(const Graph& g, const GraphRun& want, const GraphRun& got,
                                        bool bitwise, const GraphRun* magnitude) {
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
    const Node& writer = tolerance_node(g, static_cast<ValueId>(v));
    const std::string& op = writer.op;
    CudaTolerance tol = bitwise ? kCudaExact : cuda_tolerance(op);
    const std::vector<float>* mag = nullptr;
    double per_magnitude = 0, transform = 0;  // Note [GEMM tolerance]
    if (tol.by_magnitude && writer.output == static_cast<ValueId>(v)) {
      REMAT_CHECK(magnitude, "value '" << name << "' needs a magnitude run (Note [GEMM tolerance])");
      mag = &magnitude->f[v];
      const double u = std::ldexp(1.0, -24);
      per_magnitude = 2.0 * std::sqrt(static_cast<double>(gemm_reduction_length(writer, g))) * u;
      double largest = 0;
      for (float m : *mag) largest = std::max(largest, std::fabs(static_cast<double>(m)));
      transform = 64.0 * u * largest;
    } else if (tol.by_magnitude) {
      tol = kCudaBatchNorm;  // a value the op only passes through (an update's param)
    }
    if (!bitwise && node_runs_in_bf16(g, writer)) {
      tol.rel += kBf16Rel;
      if (mag && has_bf16_epilogue(writer.op)) per_magnitude += kBf16UnitRoundoff;
    }
    int64_t mismatches = 0;
    double max_abs = 0;
    std::ostringstream first;
    for (size_t j = 0; j < a.size(); ++j) {
      CudaTolerance t = tol;
      if (mag) t.abs += transform + per_magnitude * std::fabs(static_cast<double>((*mag)[j]));
      const bool ok = bitwise ? std::memcmp(&a[j], &b[j], sizeof(float)) == 0
                              : within(a[j], b[j], t);
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
  return compare_runs(host_.graph(), want, got, false, &magnitude_run(*cpu, steps));
}

// Note [node-wise comparison]
// compare_with_cpu runs the whole graph on each backend, so a node's inputs are its own
// backend's results. Where a node thresholds its input (relu's mask taken from y > 0, a max),
// an input within a rounding of the threshold may fall on either side: on an H200 a bf16
// convolution with a relu epilogue at 64 channels put 11 of 131,072 pre-activations on the other
// side of 0 from the CPU, and every gradient downstream of them then differed by the full
// gradient (errors up to 1.2), although each op was within its tolerance of the CPU given the
// same inputs. The node-wise comparison gives each CUDA node the CPU's inputs (those an earlier
// node wrote; the forward inputs and dy are the same host values on both sides anyway), so each
// value is checked against the CPU for the very inputs it was computed from.
::testing::AssertionResult CudaOpHarness::compare_nodewise_with_cpu(Backend& cuda) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const GraphRun want = run_graph(*cpu, 1);
  const GraphRun got = run_graph(cuda, 1, &want);
  return compare_runs(host_.graph(), want, got, false, &magnitude_run(*cpu, 1));
}

const GraphRun& CudaOpHarness::magnitude_run(Backend& cpu, int steps) {
  // The same graph on |inputs| and |dy|: every sum of products becomes a sum of magnitudes.
  // (|x| of a bf16 value is a bf16 value: the magnitudes are exact.)
  std::vector<std::vector<float>> saved;
  for (int i = 0; i < host_.num_inputs(); ++i) {
    const ValueId v = host_.node().inputs[static_cast<size_t>(i)];
    if (!dtype_is_float(host_.input_desc(i).dtype)) {
      saved.emplace_back();
      continue;
    }
    saved.push_back(host_.value(v));
    std::vector<float> abs = saved.back();
    for (float& x : abs) x = std::fabs(x);
    host_.set_input(i, abs);
  }
  const std::vector<float> saved_dy = dy_;
  for (float& x : dy_) x = std::fabs(x);
  magnitude_ = run_graph(cpu, steps);
  dy_ = saved_dy;
  for (int i = 0; i < host_.num_inputs(); ++i)
    if (dtype_is_float(host_.input_desc(i).dtype))
      host_.set_input(i, saved[static_cast<size_t>(i)]);
  return magnitude_;
}

::testing::AssertionResult CudaOpHarness::check_rerun_identical(Backend& b, int steps) {
  const GraphRun first = run_graph(b, steps);
  const GraphRun second = run_graph(b, steps);
  return compare_runs(host_.graph(), first, second, true);
}

std::unique_ptr<Backend> cuda_backend_with(const CudaOptions& opt) {
  std::string why;
  std::unique_ptr<Backend> b = make_cuda_backend(0, &why, opt);
  EXPECT_TRUE(b) << "a CUDA backend with other options cannot start: " << why;
  return b;
}

std::unique_ptr<Backend> staged_nhwc_backend(int64_t workspace_limit) {
  CudaOptions o;
  o.conv_layout = ConvLayout::Nhwc;
  o.workspace_limit = workspace_limit;
  return cuda_backend_with(o);
}

std::unique_ptr<Backend> gemm_conv_backend() {
  CudaOptions o;
  o.conv_gemm = ConvGemm::On;
  return cuda_backend_with(o);
}

std::unique_ptr<Backend> bn_kernels_backend(BnKernels k) {
  CudaOptions o;
  o.bn_kernels = k;
  return cuda_backend_with(o);
}

void CudaOpTest::SetUp() {
  // Skip only where no device exists: with a device present, a backend that cannot start
  // (a wrong cuDNN, a failed handle) is a failure, not a skip.
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  // The row attention kernels, whose results the tolerance table's `attention` entry bounds;
  // the flash kernels (the default) have their own bound and suite (test_cuda_attention_flash).
  CudaOptions o;
  o.attention_kernel = AttentionKernel::Rows;
  cuda_ = make_cuda_backend(0, &why, o);
  ASSERT_TRUE(cuda_) << "a CUDA device is present but the backend cannot start: " << why;
}

}  // namespace remat
