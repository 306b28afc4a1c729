// What the executor reports about a step besides running it: the finite check that locates the
// first non-finite output (Note [finite check]) and the Chrome-trace spans and memory counters.
#include <cmath>
#include <sstream>

#include "runtime/comm/communicator.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "runtime/io/trace.h"

namespace remat {

void Executor::trace_span(TraceWriter* trace, NodeId n, const char* category, double start_us) {
  const Node& node = g_.node(n);
  const TensorDesc& out = g_.value(node.output).desc;
  trace_span(trace, node.name, category, start_us,
             {{"op", node.op},
              {"output", g_.value(node.output).name},
              {"shape", shape_str(out.shape)},
              {"bytes", std::to_string(out.alloc_bytes())},
              {"recompute", std::string(category) == "recompute" ? "yes" : "no"}});
}

void Executor::trace_span(TraceWriter* trace, const std::string& name, const char* category,
                          double start_us, const std::map<std::string, std::string>& args) {
  be_.synchronize();
  const double end = step_elapsed_us();
  trace->span(name, category, start_us, end - start_us, 1, args);
  trace->counter("memory", end, {{"in use MB", static_cast<double>(in_use_) / 1e6}});
  if (opt_.budget > 0)  // a track of its own beside the memory counter
    trace->counter("budget", end, {{"budget MB", static_cast<double>(opt_.budget) / 1e6}});
}

bool Executor::value_finite(ValueId v) {
  const Value& val = g_.value(v);
  if (!dtype_is_float(val.desc.dtype)) return true;
  return be_.all_finite(ptr_[static_cast<size_t>(v)], val.desc.numel(), val.desc.dtype);
}

void Executor::check_finite(const ExecutionPlan& plan, int64_t step) {
  be_.synchronize();  // the loss's host copy is complete
  std::string what;
  if (!std::isfinite(loss_host_[micro_])) {
    what = "the loss is " + std::to_string(loss_host_[micro_]);
  } else if (opt_.parallel.shard_optimizer && sync_) {
    // Only this rank's shard of each bucket holds averaged gradients (the rest is scratch).
    for (size_t b = 0; b < layout_.buckets.size() && what.empty(); ++b)
      if (!be_.all_finite(persistent_ + layout_.grads_begin +
                              layout_.shard_begin(b, layout_.parallel.rank),
                          layout_.shard_bytes(b) / 4, DType::F32))
        what = "a gradient in bucket " + std::to_string(b) + " is not finite";
  } else {
    std::vector<ValueId> grads;  // all at once; one by one only to name a bad one
    std::vector<Backend::FloatSpan> spans;
    for (size_t v = 0; v < g_.values.size(); ++v) {
      const Value& val = g_.values[v];
      if (val.kind != ValueKind::ParamGrad || !dtype_is_float(val.desc.dtype)) continue;
      grads.push_back(static_cast<ValueId>(v));
      spans.push_back({ptr_[v], val.desc.numel(), val.desc.dtype});
    }
    if (!be_.all_finite(spans))
      for (size_t k = 0; k < grads.size() && what.empty(); ++k)
        if (!value_finite(grads[k]))
          what = "the gradient '" + g_.value(grads[k]).name + "' is not finite";
  }
  if (opt_.host_comm) {  // data parallel: every rank stops, or none (Note [finite check])
    double bad = what.empty() ? 0 : 1;
    opt_.host_comm->all_reduce_now(&bad, 1, CommType::F64, CommOp::Sum);
    if (bad == 0) return;
    if (what.empty()) what = "another rank's loss or gradient is not finite";
  }
  if (what.empty()) return;
  // Recomputation is bit-identical (Note [kernel determinism]) and no update has run, so a
  // re-run of the plan that checks every output finds the node that first went non-finite.
  StepResult scratch;
  const int at = run_plan_steps(plan, step, nullptr, &scratch, /*scan=*/true);
  std::ostringstream os;
  os << "step " << step + 1;
  if (g_.micro_batches > 1) os << " (micro-batch " << micro_ + 1 << " of " << g_.micro_batches << ")";
  os << ": " << what << "; ";
  if (at >= 0) {
    const Node& n = g_.node(plan.steps[static_cast<size_t>(at)].node);
    os << "the first non-finite output is node '" << n.name << "' (" << node_kind_name(n.kind)
       << " op " << n.op << ", plan step " << at << ")";
  } else {
    os << "a re-run that checks every output found none non-finite";
  }
  os << "; stopped before the optimizer update";
  throw NonFiniteError(os.str());
}

}  // namespace remat
