// Executor: walks an ExecutionPlan with a backend. Activations live in backend memory only
// between their Compute and Free steps; persistent values live for the executor's lifetime.
#include "runtime/executor.h"

#include <algorithm>
#include <chrono>

#include "runtime/check.h"
#include "runtime/init.h"

namespace remat {

Executor::Executor(const Graph& g, const OpRegistry& ops, Backend& backend)
    : g_(g), ops_(ops), be_(backend), ptr_(g.values.size(), nullptr) {
  for (size_t v = 0; v < g_.values.size(); ++v) {
    const Value& val = g_.values[v];
    if (!value_is_persistent(val.kind)) continue;
    ptr_[v] = be_.raw_alloc(val.desc.bytes());
    be_.fill_zero(ptr_[v], val.desc.bytes());
    in_use_ += val.desc.bytes();
  }
  peak_ = in_use_;
}

Executor::~Executor() {
  for (void* p : ptr_)
    if (p) be_.raw_free(p);
}

void Executor::init_parameters(uint64_t seed) {
  for (size_t v = 0; v < g_.values.size(); ++v) {
    const Value& val = g_.values[v];
    if (!value_is_persistent(val.kind) || val.kind == ValueKind::Input ||
        val.kind == ValueKind::Label)
      continue;
    std::vector<float> host = init_values(val, seed);
    be_.copy_from_host(ptr_[v], host.data(), val.desc.bytes());
  }
}

std::vector<float> Executor::read(ValueId v) const {
  const Value& val = g_.value(v);
  REMAT_CHECK(ptr_[static_cast<size_t>(v)], "value '" << val.name << "' is not resident");
  std::vector<float> host(static_cast<size_t>(val.desc.numel()));
  be_.copy_to_host(host.data(), ptr_[static_cast<size_t>(v)], val.desc.bytes());
  return host;
}

void Executor::write(ValueId v, const std::vector<float>& host) {
  const Value& val = g_.value(v);
  REMAT_CHECK(static_cast<int64_t>(host.size()) == val.desc.numel(),
              "write to '" << val.name << "': " << host.size() << " values for "
                           << val.desc.numel());
  REMAT_CHECK(ptr_[static_cast<size_t>(v)], "value '" << val.name << "' is not resident");
  be_.copy_from_host(ptr_[static_cast<size_t>(v)], host.data(), val.desc.bytes());
}

ExecContext Executor::make_context(NodeId n, bool require_resident) {
  const Node& node = g_.node(n);
  ExecContext ctx;
  ctx.node = &node;
  for (ValueId v : node.inputs) {
    REMAT_CHECK(!require_resident || ptr_[static_cast<size_t>(v)], "node '" << node.name << "' reads '"
                                                       << g_.value(v).name
                                                       << "', which is not resident");
    ctx.inputs.push_back(TensorView{&g_.value(v).desc, ptr_[static_cast<size_t>(v)]});
  }
  ctx.output = TensorView{&g_.value(node.output).desc, ptr_[static_cast<size_t>(node.output)]};
  return ctx;
}

int64_t Executor::workspace_bytes(NodeId n) {
  ExecContext ctx = make_context(n, /*require_resident=*/false);
  return be_.workspace_bytes(ops_.get(g_.node(n).op), ctx);
}

void Executor::run_node(NodeId n, bool recompute, int64_t step) {
  const Node& node = g_.node(n);
  const Value& out = g_.value(node.output);
  const bool activation = out.kind == ValueKind::Activation;
  void*& out_ptr = ptr_[static_cast<size_t>(node.output)];
  if (activation) {
    REMAT_CHECK(!out_ptr, "node '" << node.name << "' computed while its value is resident");
    out_ptr = be_.raw_alloc(out.desc.bytes());
    in_use_ += out.desc.bytes();
  }
  const OpDef& op = ops_.get(node.op);
  ExecContext ctx = make_context(n, /*require_resident=*/true);
  ctx.step = step;
  ctx.first_compute = !recompute;
  ctx.workspace_bytes = be_.workspace_bytes(op, ctx);
  void* ws = ctx.workspace_bytes > 0 ? be_.raw_alloc(ctx.workspace_bytes) : nullptr;
  ctx.workspace = ws;
  peak_ = std::max(peak_, in_use_ + ctx.workspace_bytes);
  be_.run(op, ctx);
  if (ws) be_.raw_free(ws);
}

StepResult Executor::run_step(const ExecutionPlan& plan, const float* images,
                              const int32_t* labels, int64_t step) {
  auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  be_.copy_from_host(ptr_[static_cast<size_t>(g_.input)], images, g_.value(g_.input).desc.bytes());
  be_.copy_from_host(ptr_[static_cast<size_t>(g_.label)], labels, g_.value(g_.label).desc.bytes());
  peak_ = in_use_;
  bool loss_read = false;
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStepKind::Free) {
      void*& p = ptr_[static_cast<size_t>(s.value)];
      REMAT_CHECK(p, "plan frees '" << g_.value(s.value).name << "', which is not resident");
      be_.raw_free(p);
      p = nullptr;
      in_use_ -= g_.value(s.value).desc.bytes();
      continue;
    }
    run_node(s.node, s.recompute, step);
    ++(s.recompute ? r.recomputes : r.computes);
    if (g_.node(s.node).output == g_.loss && !loss_read) {
      be_.copy_to_host(&r.loss, ptr_[static_cast<size_t>(g_.loss)], sizeof(float));
      loss_read = true;
    }
  }
  REMAT_CHECK(loss_read, "plan for '" << plan.graph_name << "' never computes the loss");
  for (size_t n = 0; n < g_.nodes.size(); ++n)
    if (g_.nodes[n].kind == NodeKind::Update) run_node(static_cast<NodeId>(n), false, step);
  be_.synchronize();
  for (size_t v = 0; v < g_.values.size(); ++v)
    REMAT_CHECK(value_is_persistent(g_.values[v].kind) || !ptr_[v],
                "activation '" << g_.values[v].name << "' still resident after the step (plan "
                               << plan.strategy << " leaks it)");
  r.peak_bytes = peak_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace remat
