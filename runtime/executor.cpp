// Executor: walks an ExecutionPlan with a backend. Activations live only between their Compute
// and Free steps; persistent values live as long as the executor. See Note [executor memory].
#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "runtime/memory/allocator.h"
#include "runtime/core/check.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/grad_sync.h"
#include "runtime/graph/init.h"
#include "runtime/memory/pool_replay.h"
#include "runtime/io/trace.h"

namespace remat {

namespace {
constexpr int64_t kArenaAlignment = kPoolAlignment;

bool same_steps(const std::vector<PlanStep>& a, const std::vector<PlanStep>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind || a[i].node != b[i].node || a[i].value != b[i].value ||
        a[i].recompute != b[i].recompute)
      return false;
  return true;
}

double now_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

const char* memory_mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::Direct: return "direct";
    case MemoryMode::Pool: return "pool";
    case MemoryMode::Arena: return "arena";
  }
  return "?";
}

MemoryMode memory_mode_from_name(const std::string& s) {
  for (MemoryMode m : {MemoryMode::Direct, MemoryMode::Pool, MemoryMode::Arena})
    if (s == memory_mode_name(m)) return m;
  REMAT_USER_ERROR("unknown memory mode '" << s << "' (known: arena, pool, direct)");
}

Executor::Executor(const Graph& g, const OpRegistry& ops, Backend& backend, ExecutorOptions opt)
    : g_(g), ops_(ops), be_(backend), opt_(opt), layout_(persistent_layout(g, opt.parallel)),
      ptr_(g.values.size(), nullptr) {
  constant_bytes_ = layout_.constant_bytes;
  if (opt_.parallel.active()) {
    REMAT_CHECK(opt_.grad_comm, "data parallel executor without a gradient communicator");
    for (Communicator* c : {opt_.grad_comm, opt_.op_comm})
      REMAT_CHECK(!c || c->memory() == be_.kind(),
                  "communicator '" << c->name() << "' works on another memory than backend "
                                   << be_.name());
    REMAT_CHECK(!opt_.host_comm || opt_.host_comm->memory() == DeviceKind::Cpu,
                "the finite check's communicator must work on host memory");
  }
  if (opt_.memory != MemoryMode::Direct) {
    REMAT_CHECK(opt_.budget > 0, "memory mode " << memory_mode_name(opt_.memory)
                                                << " needs a budget");
    if (layout_.region_bytes > opt_.budget)
      REMAT_USER_ERROR("budget " << pool_format_bytes(opt_.budget)
                                 << " is below the persistent values of '" << g_.name << "' ("
                                 << pool_format_bytes(layout_.region_bytes)
                                 << ": parameters, gradients, optimizer state, batch)");
  }
  loss_host_ = static_cast<float*>(backend_alloc(be_, sizeof(float), "the loss's host copy", true));
  try {
    allocate_persistent();
    if (opt_.parallel.active())
      sync_ = std::make_unique<GradSync>(g_, layout_, *opt_.grad_comm, persistent_);
  } catch (...) {
    release_all();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void Executor::allocate_persistent() {
  const int64_t bytes = std::max<int64_t>(layout_.region_bytes, 1);
  switch (opt_.memory) {
    case MemoryMode::Direct: persistent_ = static_cast<char*>(acquire(bytes, "the persistent values", -1)); break;
    case MemoryMode::Pool:
      pool_ = std::make_unique<PoolAllocator>(be_, opt_.budget);
      persistent_ = static_cast<char*>(pool_->allocate(bytes, "the persistent values"));
      break;
    case MemoryMode::Arena:
      region_ = backend_alloc(be_, opt_.budget, "the budget's single region (arena mode)");
      persistent_ = static_cast<char*>(region_);
      break;
  }
  for (size_t v = 0; v < g_.values.size(); ++v)
    if (layout_.offset[v] >= 0) ptr_[v] = persistent_ + layout_.offset[v];
  be_.fill_zero(persistent_, layout_.region_bytes);  // padding included (Note [gradient buckets])
  arena_base_ = layout_.region_bytes;
  in_use_ = peak_ = constant_bytes_;
}

Executor::~Executor() { release_all(); }

void Executor::release_all() {
  sync_.reset();
  be_.host_free(loss_host_);
  loss_host_ = nullptr;
  if (region_) {
    be_.raw_free(region_);
    region_ = nullptr;
  } else {
    for (size_t v = 0; v < ptr_.size(); ++v)  // activations left by a step that failed
      if (ptr_[v] && !value_is_persistent(g_.values[v].kind)) release(ptr_[v]);
    if (persistent_) release(persistent_);
  }
  persistent_ = nullptr;
  std::fill(ptr_.begin(), ptr_.end(), nullptr);
  pool_.reset();
}

void* Executor::acquire(int64_t bytes, const std::string& who, int arena_request) {
  switch (opt_.memory) {
    case MemoryMode::Direct: return backend_alloc(be_, bytes, who);
    case MemoryMode::Pool: return pool_->allocate(bytes, who);
    case MemoryMode::Arena:
      REMAT_CHECK(arena_request >= 0, who << " has no arena offset");
      return static_cast<char*>(region_) + arena_base_ +
             arena_.offsets[static_cast<size_t>(arena_request)];
  }
  return nullptr;
}

void Executor::release(void* p) {
  if (opt_.memory == MemoryMode::Direct) be_.raw_free(p);
  else if (opt_.memory == MemoryMode::Pool) pool_->free(p);
}

void Executor::init_parameters(uint64_t seed) {
  for (size_t v = 0; v < g_.values.size(); ++v) {
    const Value& val = g_.values[v];
    if (!value_is_persistent(val.kind) || val.kind == ValueKind::Input ||
        val.kind == ValueKind::Label)
      continue;
    if (!ptr_[v]) continue;  // sharded optimizer state: below
    std::vector<float> host = init_values(val, seed);
    be_.copy_from_host(ptr_[v], host.data(), val.desc.bytes());
  }
  // Sharded optimizer state (Note [gradient buckets]): this rank's part of each value.
  for (const UpdateSlice& sl : layout_.slices) {
    const Node& u = g_.node(sl.update);
    for (size_t k = 0; k < sl.state_offsets.size(); ++k) {
      const ValueId sv = u.inputs[k + 2];
      if (ptr_[static_cast<size_t>(sv)]) continue;  // held whole: initialised above
      const std::vector<float> host = init_values(g_.value(sv), seed);
      be_.copy_from_host(persistent_ + sl.state_offsets[k], host.data() + sl.first,
                         sl.desc.bytes());
    }
  }
  be_.synchronize();  // the host copies are freed on return
}

std::vector<float> Executor::read(ValueId v) const {
  const Value& val = g_.value(v);
  REMAT_CHECK(ptr_[static_cast<size_t>(v)], "value '" << val.name << "' is not resident");
  std::vector<float> host(static_cast<size_t>(val.desc.numel()));
  be_.copy_to_host(host.data(), ptr_[static_cast<size_t>(v)], val.desc.bytes());
  return host;
}

void Executor::read_region(int64_t offset, int64_t bytes, void* host) const {
  REMAT_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= layout_.region_bytes,
              "bytes [" << offset << ", " << offset + bytes << ") outside the persistent region of "
                        << layout_.region_bytes);
  be_.copy_to_host(host, persistent_ + offset, bytes);
}

void Executor::write_region(int64_t offset, int64_t bytes, const void* host) {
  REMAT_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= layout_.region_bytes,
              "bytes [" << offset << ", " << offset + bytes << ") outside the persistent region of "
                        << layout_.region_bytes);
  be_.copy_from_host(persistent_ + offset, host, bytes);
  be_.synchronize();  // `host` may be pageable memory the caller frees next
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
    REMAT_CHECK(!require_resident || ptr_[static_cast<size_t>(v)],
                "node '" << node.name << "' reads '" << g_.value(v).name
                         << "', which is not resident");
    ctx.inputs.push_back(TensorView{&g_.value(v).desc, ptr_[static_cast<size_t>(v)]});
  }
  ctx.output = TensorView{&g_.value(node.output).desc, ptr_[static_cast<size_t>(node.output)]};
  ctx.comm = opt_.op_comm;
  ctx.batch_offset = opt_.parallel.rank * g_.batch;
  return ctx;
}

int64_t node_workspace_bytes(const Graph& g, const OpRegistry& ops, Backend& be, NodeId n) {
  const Node& node = g.node(n);
  ExecContext ctx;
  ctx.node = &node;
  for (ValueId v : node.inputs) ctx.inputs.push_back(TensorView{&g.value(v).desc, nullptr});
  ctx.output = TensorView{&g.value(node.output).desc, nullptr};
  return be.workspace_bytes(ops.get(node.op), ctx);
}

int64_t Executor::workspace_bytes(NodeId n) { return node_workspace_bytes(g_, ops_, be_, n); }

int64_t Executor::arena_region_bytes(const Graph& g, const OpRegistry& ops, Backend& be,
                                     const ExecutionPlan& plan, const ParallelConfig& parallel) {
  const int64_t base = persistent_layout(g, parallel).region_bytes;
  const PlanBuffers buffers =
      plan_buffers(g, plan, [&](NodeId n) { return node_workspace_bytes(g, ops, be, n); });
  return base + plan_arena(buffers.requests, kArenaAlignment).arena_bytes;
}

int64_t Executor::prepare(const ExecutionPlan& plan) {
  if (opt_.memory == MemoryMode::Pool) {
    PoolReplay r = replay_pool(g_, plan, [&](NodeId n) { return workspace_bytes(n); }, opt_.budget,
                               layout_.region_bytes);
    return r.fits ? r.peak_in_use : opt_.budget + r.shortfall;
  }
  if (opt_.memory != MemoryMode::Arena) return 0;
  if (!same_steps(plan.steps, arena_steps_)) {
    arena_buffers_ = plan_buffers(g_, plan, [&](NodeId n) { return workspace_bytes(n); });
    arena_ = plan_arena(arena_buffers_.requests, kArenaAlignment);
    arena_steps_ = plan.steps;
  }
  return arena_base_ + arena_.arena_bytes;
}

void Executor::run_node(NodeId n, bool recompute, int64_t step, int plan_step) {
  const Node& node = g_.node(n);
  const Value& out = g_.value(node.output);
  const bool activation = out.kind == ValueKind::Activation;
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
  be_.run(op, ctx);
  be_.range_pop();
  if (ws) release(ws);
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
    if (s.kind == PlanStepKind::Free) {
      void*& p = ptr_[static_cast<size_t>(s.value)];
      REMAT_CHECK(p, "plan frees '" << g_.value(s.value).name << "', which is not resident");
      release(p);
      p = nullptr;
      in_use_ -= g_.value(s.value).desc.alloc_bytes();
      if (trace) trace->instant("free " + g_.value(s.value).name, "free", now_us(step_t0_), 1);
      continue;
    }
    const double start = trace ? now_us(step_t0_) : 0;
    run_node(s.node, s.recompute, step, static_cast<int>(i));
    if (sync_ && !scan) sync_->after_plan_step(static_cast<int>(i));
    if (trace) trace_span(trace, s.node, s.recompute ? "recompute" : "compute", start);
    if (scan && !value_finite(g_.node(s.node).output)) {
      release_activations();
      return static_cast<int>(i);
    }
    ++(s.recompute ? r->recomputes : r->computes);
    if (g_.node(s.node).output == g_.loss && !loss_read) {
      // Read after the step's final synchronize: no host wait in the middle of the step.
      be_.copy_to_host_async(loss_host_, ptr_[static_cast<size_t>(g_.loss)], sizeof(float));
      loss_read = true;
    }
  }
  REMAT_CHECK(loss_read, "plan for '" << plan.graph_name << "' never computes the loss");
  return -1;
}

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
  const double end = now_us(step_t0_);
  trace->span(name, category, start_us, end - start_us, 1, args);
  trace->counter("memory", end, {{"in use MB", static_cast<double>(in_use_) / 1e6}});
  if (opt_.budget > 0)  // a track of its own beside the memory counter
    trace->counter("budget", end, {{"budget MB", static_cast<double>(opt_.budget) / 1e6}});
}

bool Executor::value_finite(ValueId v) {
  const Value& val = g_.value(v);
  if (val.desc.dtype != DType::F32) return true;
  return be_.all_finite(ptr_[static_cast<size_t>(v)], val.desc.numel());
}

void Executor::release_activations() {
  for (size_t v = 0; v < g_.values.size(); ++v) {
    if (value_is_persistent(g_.values[v].kind) || !ptr_[v]) continue;
    release(ptr_[v]);
    ptr_[v] = nullptr;
    in_use_ -= g_.values[v].desc.alloc_bytes();
  }
}

void Executor::check_finite(const ExecutionPlan& plan, int64_t step) {
  be_.synchronize();  // the loss's host copy is complete
  std::string what;
  if (!std::isfinite(*loss_host_)) {
    what = "the loss is " + std::to_string(*loss_host_);
  } else if (opt_.parallel.shard_optimizer && sync_) {
    // Only this rank's shard of each bucket holds averaged gradients (the rest is scratch).
    for (size_t b = 0; b < layout_.buckets.size() && what.empty(); ++b)
      if (!be_.all_finite(persistent_ + layout_.grads_begin +
                              layout_.shard_begin(b, layout_.parallel.rank),
                          layout_.shard_bytes(b) / 4))
        what = "a gradient in bucket " + std::to_string(b) + " is not finite";
  } else {
    for (size_t v = 0; v < g_.values.size() && what.empty(); ++v)
      if (g_.values[v].kind == ValueKind::ParamGrad && !value_finite(static_cast<ValueId>(v)))
        what = "the gradient '" + g_.values[v].name + "' is not finite";
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
  os << "step " << step + 1 << ": " << what << "; ";
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

StepResult Executor::run_step(const ExecutionPlan& plan, const void* input,
                              const int32_t* labels, int64_t step, TraceWriter* trace) {
  // Arena offsets are (re)assigned for a new plan; the pool needs no preparation to run.
  if (opt_.memory == MemoryMode::Arena && prepare(plan) > opt_.budget)
    REMAT_USER_ERROR("plan '" << plan.strategy << "' does not fit the budget in arena mode: "
                              << "persistent " << pool_format_bytes(arena_base_) << " + arena "
                              << pool_format_bytes(arena_.arena_bytes) << " (lower bound "
                              << pool_format_bytes(arena_.lower_bound) << ") > budget "
                              << pool_format_bytes(opt_.budget));
  step_t0_ = std::chrono::steady_clock::now();
  be_.range_push("step " + std::to_string(step), kRangePhase);
  StepResult r;
  be_.copy_from_host(ptr_[static_cast<size_t>(g_.input)], input, g_.value(g_.input).desc.bytes());
  be_.copy_from_host(ptr_[static_cast<size_t>(g_.label)], labels, g_.value(g_.label).desc.bytes());
  if (pool_) pool_->reset_peak();
  peak_ = in_use_;
  if (sync_ && !same_steps(plan.steps, sync_steps_)) {
    sync_->prepare(plan);
    sync_steps_ = plan.steps;
  }
  if (sync_) sync_->begin_step();
  run_plan_steps(plan, step, trace, &r, /*scan=*/false);
  if (sync_) {
    const double start = trace ? now_us(step_t0_) : 0;
    sync_->finish_gradients();
    if (trace) trace_span(trace, "gradient collectives (wait)", "communication", start);
  }
  if (opt_.check_finite) {
    try {
      check_finite(plan, step);
    } catch (...) {
      be_.range_pop();
      throw;
    }
  }
  if (opt_.parallel.shard_optimizer && sync_) {  // this rank's shards (Note [gradient buckets])
    const double start = trace ? now_us(step_t0_) : 0;
    be_.range_push("optimizer shard", kRangeUpdate);
    for (const UpdateSlice& sl : layout_.slices) run_update_slice(sl, step);
    be_.range_pop();
    if (trace) trace_span(trace, "optimizer (this rank's shards)", "update", start);
    const double gather = trace ? now_us(step_t0_) : 0;
    sync_->gather_parameters();
    if (trace) trace_span(trace, "parameter all-gather", "communication", gather);
  } else {
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      if (g_.nodes[n].kind != NodeKind::Update) continue;
      const double start = trace ? now_us(step_t0_) : 0;
      run_node(static_cast<NodeId>(n), false, step, -1);
      if (trace) trace_span(trace, static_cast<NodeId>(n), "update", start);
    }
  }
  be_.synchronize();
  if (sync_) r.comm_wait_seconds = sync_->wait_seconds();
  be_.range_pop();
  r.loss = *loss_host_;
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
