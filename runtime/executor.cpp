// Executor: walks an ExecutionPlan with a backend: the plan's compute and free steps, the
// data-parallel gradient hooks between them, then the optimizer updates. Activations live only
// between their Compute and Free steps; memory modes are executor_memory.cpp's, the finite check
// and trace spans executor_checks.cpp's. See Note [executor memory].
#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <typeinfo>
#include <utility>

#include "runtime/comm/communicator.h"
#include "runtime/comm/grad_sync.h"
#include "runtime/core/check.h"
#include "runtime/io/trace.h"
#include "runtime/memory/allocator.h"

namespace remat {

const char* memory_mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::Direct: return "direct";
    case MemoryMode::Pool: return "pool";
    case MemoryMode::Arena: return "arena";
  }
  return "?";
}

double Executor::step_elapsed_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - step_t0_)
      .count();
}

MemoryMode memory_mode_from_name(const std::string& s) {
  for (MemoryMode m : {MemoryMode::Direct, MemoryMode::Pool, MemoryMode::Arena})
    if (s == memory_mode_name(m)) return m;
  REMAT_USER_ERROR("unknown memory mode '" << s << "' (known: arena, pool, direct)");
}

Executor::Executor(const Graph& g, const OpRegistry& ops, Backend& backend, ExecutorOptions opt)
    : g_(g), ops_(ops), be_(backend), opt_(opt), layout_(persistent_layout(g, opt.parallel)),
      ptr_(g.values.size(), nullptr) {
  if (opt_.borrow) {
    opt_.memory = opt_.borrow->opt_.memory;
    opt_.budget = opt_.borrow->opt_.budget;
    REMAT_CHECK(!opt_.parallel.active(), "a borrowing executor runs one rank's graph alone");
  }
  constant_bytes_ = layout_.constant_bytes;
  persistent_bytes_ = layout_.region_bytes;
  if (opt_.parallel.active()) {
    REMAT_CHECK(opt_.grad_comm, "data parallel executor without a gradient communicator");
    for (Communicator* c : {opt_.grad_comm, opt_.op_comm})
      REMAT_CHECK(!c || c->memory() == be_.kind(),
                  "communicator '" << c->name() << "' works on another memory than backend "
                                   << be_.name());
    REMAT_CHECK(!opt_.host_comm || opt_.host_comm->memory() == DeviceKind::Cpu,
                "the finite check's communicator must work on host memory");
  }
  if (opt_.memory != MemoryMode::Direct && !opt_.borrow) {
    REMAT_CHECK(opt_.budget > 0, "memory mode " << memory_mode_name(opt_.memory)
                                                << " needs a budget");
    if (layout_.region_bytes > opt_.budget)
      REMAT_USER_ERROR("budget " << pool_format_bytes(opt_.budget)
                                 << " is below the persistent values of '" << g_.name << "' ("
                                 << pool_format_bytes(layout_.region_bytes)
                                 << ": parameters, gradients, optimizer state, batch)");
  }
  // One loss per micro-batch (Note [gradient accumulation]), read after the step's synchronize.
  loss_host_ = static_cast<float*>(backend_alloc(
      be_, static_cast<int64_t>(sizeof(float)) * g_.micro_batches, "the losses' host copy", true));
  try {
    allocate_persistent();
    if (opt_.parallel.active())
      sync_ = std::make_unique<GradSync>(g_, layout_, *opt_.grad_comm, persistent_);
  } catch (...) {
    release_all();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void Executor::run_node(NodeId n, bool recompute, int64_t step, int plan_step) {
  const Node& node = g_.node(n);
  const Value& out = g_.value(node.output);
  const bool activation = out.kind == ValueKind::Activation;
  // A persistent value is written once a step: adding a micro-batch's gradient twice would be
  // wrong, and rewriting any other is useless (lower_schedule never plans it).
  if (recompute && !activation)
    REMAT_USER_ERROR("plan recomputes node '" << node.name << "', which writes the persistent '"
                                              << out.name << "'; such a node runs once a step");
  const bool arena = opt_.memory == MemoryMode::Arena && plan_step >= 0;
  void*& out_ptr = ptr_[static_cast<size_t>(node.output)];
  if (activation) {
    REMAT_CHECK(!out_ptr, "node '" << node.name << "' computed while its value is resident");
    out_ptr = acquire(out.desc.bytes(), "node '" + node.name + "'",
                      arena ? arena_buffers_.output_request[static_cast<size_t>(plan_step)] : -1);
    in_use_ += out.desc.alloc_bytes();  // Note [allocation size]
  }
  const OpDef& op = ops_.get(node.op);
  ExecContext ctx = make_context(n, /*require_resident=*/true);
  if (plan_copies_)
    for (ValueId v : node.inputs) wait_device_copies(v, /*reuse=*/false);
  ctx.step = step;
  ctx.first_compute = !recompute;
  ctx.workspace_bytes = be_.workspace_bytes(op, ctx);
  void* ws = nullptr;
  if (ctx.workspace_bytes > 0)
    ws = acquire(ctx.workspace_bytes, "workspace of node '" + node.name + "'",
                 arena ? arena_buffers_.workspace_request[static_cast<size_t>(plan_step)] : -1);
  ctx.workspace = ws;
  peak_ = std::max(peak_, in_use_ + alloc_bytes(ctx.workspace_bytes));
  be_.range_push(recompute ? "recompute:" + node.name : node.name,
                 node.kind == NodeKind::Update ? kRangeUpdate
                 : recompute                   ? kRangeRecompute
                                               : kRangeCompute);
  try {
    be_.run(op, ctx);
  } catch (...) {  // a failed recording (Note [step graphs]) runs the step again
    be_.range_pop();
    throw;
  }
  be_.range_pop();
  if (ws) release(ws);
}

void Executor::run_copy(const PlanStep& s, int plan_step, TraceWriter* trace) {
  const Value& val = g_.value(s.value);
  const size_t v = static_cast<size_t>(s.value);
  void*& p = ptr_[v];
  const int buffer = host_buffers_.output_request[static_cast<size_t>(plan_step)];
  REMAT_CHECK(buffer >= 0, "plan step " << plan_step << " has no host copy of '" << val.name << "'");
  char* host = host_region_ + host_arena_.offsets[static_cast<size_t>(buffer)];
  const double start = trace ? step_elapsed_us() : 0;
  if (s.kind == PlanStepKind::Offload) {
    REMAT_CHECK(p, "plan offloads '" << val.name << "', which is not resident");
    // A prefetched device copy is there: its host copy was released (after its prefetch) first.
    copies_.offload[v] = copies_.host[v] =
        be_.copy_async(Backend::CopyDirection::ToHost, host, p, val.desc.bytes());
  } else if (s.kind == PlanStepKind::Prefetch) {
    REMAT_CHECK(!p, "plan prefetches '" << val.name << "', which is resident");
    const bool arena = opt_.memory == MemoryMode::Arena;
    p = acquire(val.desc.bytes(), "prefetch of '" + val.name + "'",
                arena ? arena_buffers_.output_request[static_cast<size_t>(plan_step)] : -1);
    in_use_ += val.desc.alloc_bytes();
    peak_ = std::max(peak_, in_use_);
    // The host copy is written: the device copy it came from was freed (after the offload).
    copies_.prefetch[v] = copies_.host[v] =
        be_.copy_async(Backend::CopyDirection::ToDevice, p, host, val.desc.bytes());
  } else {  // HostFree: later offloads may write these bytes
    be_.wait_copy(std::exchange(copies_.host[v], 0));
  }
  if (!trace) return;
  if (s.kind == PlanStepKind::HostFree) {
    trace->instant("host free " + val.name, "copy", step_elapsed_us(), kTraceCopyOutTrack);
    return;
  }
  be_.synchronize();  // the span covers the copy
  const bool out = s.kind == PlanStepKind::Offload;
  trace->span((out ? "offload " : "prefetch ") + val.name, "copy", start,
              step_elapsed_us() - start, out ? kTraceCopyOutTrack : kTraceCopyInTrack,
              {{"bytes", std::to_string(val.desc.bytes())}});
}

void Executor::wait_device_copies(ValueId v, bool reuse) {
  const size_t i = static_cast<size_t>(v);
  if (copies_.prefetch[i]) be_.wait_copy(std::exchange(copies_.prefetch[i], 0));
  if (reuse && copies_.offload[i]) be_.wait_copy(std::exchange(copies_.offload[i], 0));
}

void Executor::capture(ValueId v, void* host) {
  REMAT_CHECK(v >= 0 && static_cast<size_t>(v) < g_.values.size() &&
                  g_.value(v).kind == ValueKind::Activation,
              "capture: value " << v << " is not an activation of '" << g_.name << "'");
  captures_.erase(std::remove_if(captures_.begin(), captures_.end(),
                                 [&](const auto& c) { return c.first == v; }),
                  captures_.end());
  if (host) captures_.emplace_back(v, host);
}

void Executor::run_update_slice(const UpdateSlice& sl, int64_t step) {
  const Node& node = g_.node(sl.update);
  const OpDef& op = ops_.get(node.op);
  ExecContext ctx;
  ctx.node = &node;
  ctx.step = step;
  ctx.inputs.push_back(TensorView{&sl.desc, persistent_ + sl.param_offset});
  ctx.inputs.push_back(TensorView{&sl.desc, persistent_ + sl.grad_offset});
  for (int64_t off : sl.state_offsets) ctx.inputs.push_back(TensorView{&sl.desc, persistent_ + off});
  ctx.output = ctx.inputs[0];
  REMAT_CHECK(be_.workspace_bytes(op, ctx) == 0,
              "optimizer '" << node.op << "' needs workspace; sharded updates have none");
  be_.run(op, ctx);
}

int Executor::run_plan_steps(const ExecutionPlan& plan, int64_t step, TraceWriter* trace,
                             StepResult* r, bool scan) {
  bool loss_read = scan;  // a re-run does not read the loss again
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    if (s.kind == PlanStepKind::Offload || s.kind == PlanStepKind::Prefetch ||
        s.kind == PlanStepKind::HostFree) {
      run_copy(s, static_cast<int>(i), trace);
      continue;
    }
    if (s.kind == PlanStepKind::Free) {
      void*& p = ptr_[static_cast<size_t>(s.value)];
      REMAT_CHECK(p, "plan frees '" << g_.value(s.value).name << "', which is not resident");
      if (plan_copies_) wait_device_copies(s.value, /*reuse=*/true);
      release(p);
      p = nullptr;
      in_use_ -= g_.value(s.value).desc.alloc_bytes();
      if (trace) trace->instant("free " + g_.value(s.value).name, "free", step_elapsed_us(), 1);
      continue;
    }
    const double start = trace ? step_elapsed_us() : 0;
    run_node(s.node, s.recompute, step, static_cast<int>(i));
    if (sync_ && !scan && last_micro_batch()) sync_->after_plan_step(static_cast<int>(i));
    for (const auto& [v, host] : captures_)
      if (!s.recompute && !scan && v == g_.node(s.node).output)
        be_.copy_to_host(host, ptr_[static_cast<size_t>(v)], g_.value(v).desc.bytes());
    if (trace) trace_span(trace, s.node, s.recompute ? "recompute" : "compute", start);
    if (scan && !value_finite(g_.node(s.node).output)) {
      release_activations();
      return static_cast<int>(i);
    }
    ++(s.recompute ? r->recomputes : r->computes);
    if (g_.node(s.node).output == g_.loss && !loss_read) {
      // Read after the step's final synchronize: no host wait in the middle of the step.
      be_.copy_to_host_async(loss_host_ + micro_, ptr_[static_cast<size_t>(g_.loss)],
                             sizeof(float));
      loss_read = true;
    }
  }
  REMAT_CHECK(loss_read, "plan for '" << plan.graph_name << "' never computes the loss");
  return -1;
}

StepResult Executor::run_step(const ExecutionPlan& plan, const void* input,
                              const int32_t* labels, int64_t step, TraceWriter* trace) {
  try {
    return run_step_body(plan, input, labels, step, trace);
  } catch (const Error& e) {
    try {
      release_activations();           // the step is abandoned; a caller may run another
    } catch (const std::exception&) {  // a device that faulted may fail this too
    }
    // A UserError names its cause (a label, a node); other typed errors (the pool's) are
    // caught by type.
    if (typeid(e) != typeid(Error)) throw;
    // A fault inside a replayed record surfaces at the step's first host wait, after the
    // launch: no node to name (Note [step graphs]).
    std::ostringstream os;
    os << "step " << step + 1 << ": " << e.what();
    if (graph_.replaying)
      os << " (the step replayed the CUDA graph recorded at step " << graph_.recorded_at + 1
         << ", which names no node: --no-cuda-graph runs each kernel as it comes, and "
         << "CUDA_LAUNCH_BLOCKING=1 with it stops at the failing one)";
    throw Error(os.str());
  }
}

StepResult Executor::run_step_body(const ExecutionPlan& plan, const void* input,
                                   const int32_t* labels, int64_t step, TraceWriter* trace) {
  graph_.replaying = false;
  // Arena offsets are (re)assigned for a new plan; the pool needs no preparation to run.
  if (opt_.memory == MemoryMode::Arena && prepare(plan) > opt_.budget)
    REMAT_USER_ERROR("plan '" << plan.strategy << "' does not fit the budget in arena mode: "
                              << "persistent " << pool_format_bytes(arena_base_) << " + arena "
                              << pool_format_bytes(arena_.arena_bytes) << " (lower bound "
                              << pool_format_bytes(arena_.lower_bound) << ") > budget "
                              << pool_format_bytes(opt_.budget));
  plan_copies_ = plan.has_copies();
  if (plan_copies_) prepare_host(plan);
  step_t0_ = std::chrono::steady_clock::now();
  be_.range_push("step " + std::to_string(step), kRangePhase);
  StepResult r;
  if (pool_) pool_->reset_peak();
  peak_ = in_use_;
  if (sync_ && !plan_steps_equal(plan.steps, sync_steps_)) {
    sync_->prepare(plan);
    sync_steps_ = plan.steps;
  }
  // Micro-batch k reads samples [k N, (k + 1) N) of the step's (Note [gradient accumulation]).
  const int64_t input_bytes = g_.value(g_.input).desc.bytes();
  const int64_t label_bytes = g_.value(g_.label).desc.bytes();
  for (micro_ = 0; micro_ < g_.micro_batches; ++micro_) {
    if (g_.micro_batches > 1)
      be_.range_push("micro-batch " + std::to_string(micro_ + 1) + " of " +
                         std::to_string(g_.micro_batches),
                     kRangePhase);
    be_.copy_from_host(ptr_[static_cast<size_t>(g_.input)],
                       static_cast<const char*>(input) + micro_ * input_bytes, input_bytes);
    be_.copy_from_host(ptr_[static_cast<size_t>(g_.label)],
                       reinterpret_cast<const char*>(labels) + micro_ * label_bytes, label_bytes);
    if (sync_ && last_micro_batch()) sync_->begin_step();
    run_plan(plan, step, trace, &r);
    if (sync_ && last_micro_batch()) {
      const double start = trace ? step_elapsed_us() : 0;
      sync_->finish_gradients();
      if (trace) trace_span(trace, "gradient collectives (wait)", "communication", start);
    }
    if (opt_.check_finite) {
      try {
        check_finite(plan, step);
      } catch (...) {
        if (g_.micro_batches > 1) be_.range_pop();
        be_.range_pop();
        micro_ = 0;
        throw;
      }
    }
    if (g_.micro_batches > 1) be_.range_pop();
  }
  micro_ = g_.micro_batches - 1;  // the updates run once, after the last micro-batch
  if (opt_.parallel.shard_optimizer && sync_) {  // this rank's shards (Note [gradient buckets])
    const double start = trace ? step_elapsed_us() : 0;
    be_.range_push("optimizer shard", kRangeUpdate);
    for (const UpdateSlice& sl : layout_.slices) run_update_slice(sl, step);
    be_.range_pop();
    if (trace) trace_span(trace, "optimizer (this rank's shards)", "update", start);
    const double gather = trace ? step_elapsed_us() : 0;
    sync_->gather_parameters();
    if (trace) trace_span(trace, "parameter all-gather", "communication", gather);
  } else {
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      if (g_.nodes[n].kind != NodeKind::Update) continue;
      const double start = trace ? step_elapsed_us() : 0;
      run_node(static_cast<NodeId>(n), false, step, -1);
      if (trace) trace_span(trace, static_cast<NodeId>(n), "update", start);
    }
  }
  if (plan_copies_)
    drain_copies();  // synchronizes, leaving no copy's ticket outstanding
  else
    be_.synchronize();
  if (sync_) r.comm_wait_seconds = sync_->wait_seconds();
  be_.range_pop();
  micro_ = 0;
  double losses = 0;  // the step's loss: the mean of its micro-batches' losses
  for (int k = 0; k < g_.micro_batches; ++k) losses += loss_host_[k];
  r.loss = g_.micro_batches == 1 ? loss_host_[0] : static_cast<float>(losses / g_.micro_batches);
  for (size_t v = 0; v < g_.values.size(); ++v)
    REMAT_CHECK(value_is_persistent(g_.values[v].kind) || !ptr_[v],
                "activation '" << g_.values[v].name << "' still resident after the step (plan "
                               << plan.strategy << " leaks it)");
  r.peak_bytes = peak_;
  switch (opt_.memory) {
    case MemoryMode::Direct: r.reserved_peak_bytes = peak_; break;
    case MemoryMode::Pool:
      r.reserved_peak_bytes = pool_->stats().peak_in_use;
      r.fragmentation = pool_->stats().fragmentation_at_peak;
      break;
    case MemoryMode::Arena: r.reserved_peak_bytes = arena_base_ + arena_.arena_bytes; break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0_).count();
  return r;
}

}  // namespace remat
