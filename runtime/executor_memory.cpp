// The executor's memory: the persistent region and the three memory modes (Note [executor
// memory]): acquiring and releasing activation and workspace buffers, arena offsets prepared per
// plan, host reads and writes of persistent values, and parameter initialisation.
#include <algorithm>
#include <exception>

#include "runtime/core/check.h"
#include "runtime/comm/grad_sync.h"
#include "runtime/executor.h"
#include "runtime/graph/init.h"
#include "runtime/memory/allocator.h"
#include "runtime/memory/pool_replay.h"

namespace remat {

namespace {
constexpr int64_t kArenaAlignment = kPoolAlignment;
}  // namespace

// Note [borrowed memory]: the other executor's values by name, and its memory.
void Executor::borrow_persistent() {
  const Executor& o = *opt_.borrow;
  for (size_t v = 0; v < g_.values.size(); ++v) {
    const Value& val = g_.values[v];
    if (!value_is_persistent(val.kind)) continue;
    const ValueId w = o.g_.find_value(val.name);
    if (w == kNoValue || o.g_.value(w).desc.shape != val.desc.shape ||
        o.g_.value(w).desc.dtype != val.desc.dtype || !o.ptr_[static_cast<size_t>(w)])
      REMAT_USER_ERROR("graph '" << g_.name << "': value '" << val.name << "' "
                                 << shape_str(val.desc.shape) << " is not a value of the same "
                                 << "shape held by '" << o.g_.name << "' (the validation graph "
                                 << "must be the model's at the training batch)");
    ptr_[v] = o.ptr_[static_cast<size_t>(w)];
  }
  borrowed_ = true;
  region_ = o.region_;
  pool_ = o.pool_;
  persistent_ = o.persistent_;
  arena_base_ = o.arena_base_;
  persistent_bytes_ = o.persistent_bytes_;
  constant_bytes_ = o.constant_bytes_;
  in_use_ = peak_ = constant_bytes_;
}

void Executor::allocate_persistent() {
  if (opt_.borrow) return borrow_persistent();
  const int64_t bytes = std::max<int64_t>(layout_.region_bytes, 1);
  switch (opt_.memory) {
    case MemoryMode::Direct: persistent_ = static_cast<char*>(acquire(bytes, "the persistent values", -1)); break;
    case MemoryMode::Pool:
      pool_ = std::make_shared<PoolAllocator>(be_, opt_.budget);
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
  try {
    drain_copies();  // no copy may still read or write what is freed below
  } catch (const std::exception&) {  // a device that faulted; it is going away
  }
  drop_step_graph();
  sync_.reset();
  be_.host_free(loss_host_);
  loss_host_ = nullptr;
  be_.host_free(host_region_);
  host_region_ = nullptr;
  if (borrowed_) {  // only the activations of a step that failed are this executor's
    for (size_t v = 0; v < ptr_.size(); ++v)
      if (ptr_[v] && !value_is_persistent(g_.values[v].kind) && opt_.memory != MemoryMode::Arena)
        release(ptr_[v]);
    region_ = nullptr;
  } else if (region_) {
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
  auto initialised = [&](const Value& val) {
    return value_is_persistent(val.kind) && val.kind != ValueKind::Input &&
           val.kind != ValueKind::Label;
  };
  // One host buffer for every value, touched once (Note [huge pages] in cpu_backend.cpp).
  int64_t most = 0;
  for (const Value& val : g_.values)
    if (initialised(val)) most = std::max(most, val.desc.numel());
  std::vector<float> host(static_cast<size_t>(most));
  for (size_t v = 0; v < g_.values.size(); ++v) {
    const Value& val = g_.values[v];
    if (!initialised(val) || !ptr_[v]) continue;  // no pointer: sharded optimizer state, below
    init_values(val, seed, host.data());
    be_.copy_from_host(ptr_[v], host.data(), val.desc.bytes());
    be_.synchronize();  // the buffer is written again for the next value
  }
  // Sharded optimizer state (Note [gradient buckets]): this rank's part of each value.
  for (const UpdateSlice& sl : layout_.slices) {
    const Node& u = g_.node(sl.update);
    for (size_t k = 0; k < sl.state_offsets.size(); ++k) {
      const ValueId sv = u.inputs[k + 2];
      if (ptr_[static_cast<size_t>(sv)]) continue;  // held whole: initialised above
      init_values(g_.value(sv), seed, host.data());
      be_.copy_from_host(persistent_ + sl.state_offsets[k], host.data() + sl.first,
                         sl.desc.bytes());
      be_.synchronize();
    }
  }
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
  // The global index of this pass's first sample: rank r's micro-batch k holds samples
  // [(r K + k) N, (r K + k + 1) N) of the step's (Note [gradient accumulation]).
  ctx.batch_offset = (static_cast<int64_t>(opt_.parallel.rank) * g_.micro_batches + micro_) * g_.batch;
  ctx.micro_batch = micro_;
  ctx.micro_batches = g_.micro_batches;
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
                               persistent_bytes_);
    return r.fits ? r.peak_in_use : opt_.budget + r.shortfall;
  }
  if (opt_.memory != MemoryMode::Arena) return 0;
  if (!plan_steps_equal(plan.steps, arena_steps_)) {
    arena_buffers_ = plan_buffers(g_, plan, [&](NodeId n) { return workspace_bytes(n); });
    arena_ = plan_arena(arena_buffers_.requests, kArenaAlignment);
    arena_steps_ = plan.steps;
    drop_step_graph();  // Note [step graphs]: its addresses were the old layout's
  }
  return arena_base_ + arena_.arena_bytes;
}

void Executor::prepare_host(const ExecutionPlan& plan) {
  if (copies_.host.empty()) {
    copies_.prefetch.assign(g_.values.size(), 0);
    copies_.offload.assign(g_.values.size(), 0);
    copies_.host.assign(g_.values.size(), 0);
  }
  if (plan_steps_equal(plan.steps, host_steps_)) return;
  host_buffers_ = plan_host_buffers(g_, plan);
  host_arena_ = plan_arena(host_buffers_.requests, kArenaAlignment);
  be_.host_free(host_region_);
  host_region_ = nullptr;
  host_steps_.clear();
  host_region_ = static_cast<char*>(backend_alloc(
      be_, std::max<int64_t>(host_arena_.arena_bytes, 1), "the host copies of the plan", true));
  host_steps_ = plan.steps;
}

void Executor::drain_copies() {
  if (copies_.host.empty()) return;  // no plan with copies ran
  for (std::vector<int64_t>* t : {&copies_.prefetch, &copies_.offload, &copies_.host})
    std::fill(t->begin(), t->end(), 0);
  be_.synchronize();
}

void Executor::release_activations() {
  // The activations are released even when the wait fails (a device fault): the executor's
  // own records must stay consistent for the caller's next step or its destructor.
  std::exception_ptr failed;
  try {
    drain_copies();
  } catch (...) {
    failed = std::current_exception();
  }
  for (size_t v = 0; v < g_.values.size(); ++v) {
    if (value_is_persistent(g_.values[v].kind) || !ptr_[v]) continue;
    release(ptr_[v]);
    ptr_[v] = nullptr;
    in_use_ -= g_.values[v].desc.alloc_bytes();
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace remat
