// The executor: holds every persistent value of a training graph in backend memory and runs
// training steps by walking an ExecutionPlan (compute / free, then the optimizer updates).
// Memory comes from one of three sources (Note [executor memory]); the budget is a hard cap.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/memory/arena.h"
#include "runtime/backends/backend.h"
#include "runtime/graph/graph.h"
#include "runtime/memory/param_layout.h"
#include "runtime/memory/plan.h"

namespace remat {

class Communicator;
class Executor;
class GradSync;
class PoolAllocator;
class TraceWriter;

// Note [executor memory]
// The persistent values always live in one region laid out by runtime/memory/param_layout.h.
// Direct: one backend allocation for that region and one per activation, no cap (tests).
// Pool:   one backend allocation of exactly the budget at construction; the persistent region
//         and every activation and workspace are blocks of the caching allocator (best fit,
//         split, coalesce). A request it cannot serve is an error naming the node and bytes.
// Arena:  the same single allocation; the persistent region at its start, and every activation
//         and workspace of the plan at an offset assigned ahead of time (runtime/memory/arena.h), so
//         a step does no allocator work and cannot fragment. A plan whose arena does not fit
//         the budget is rejected before the step runs.
//
// Note [borrowed memory]
// An executor made with ExecutorOptions::borrow (the validation pass's forward graph of the same
// model, tools/training/evaluation.h) owns no persistent memory: each of its persistent values
// (parameters, buffers, input, labels) is the value of the same name and descriptor of the
// borrowed executor, and its activations and workspaces take that executor's memory in its
// mode — the arena region past the persistent values (with offsets of its own plan), or its
// pool. So it runs inside the same budget, between the other's steps (never during one), and
// must be destroyed first.
enum class MemoryMode { Direct, Pool, Arena };
const char* memory_mode_name(MemoryMode m);
MemoryMode memory_mode_from_name(const std::string& s);  // UserError on unknown names

struct ExecutorOptions {
  ExecutorOptions() = default;
  ExecutorOptions(MemoryMode m, int64_t b) : memory(m), budget(b) {}

  MemoryMode memory = MemoryMode::Direct;
  int64_t budget = 0;  // Pool / Arena: bytes reserved, the hard cap
  // Data parallel (world > 1): this rank's place and the layout choices (Note [gradient
  // buckets]); `grad_comm` averages the gradient buckets, `op_comm` serves collectives inside
  // ops (batch-norm statistics over the global batch). Both communicate in the backend's
  // memory, are separate communicators (Note [collective order]) and outlive the executor.
  // `host_comm` (host memory) makes the decisions every rank must share: the finite check.
  ParallelConfig parallel;
  Communicator* grad_comm = nullptr;
  Communicator* op_comm = nullptr;
  Communicator* host_comm = nullptr;
  // Note [finite check]: before the optimizer updates, the step's loss and every parameter
  // gradient must be finite; otherwise run_step locates the first node with a non-finite output
  // and throws NonFiniteError. Costs one read of the gradients a step (one flag for them all:
  // two synchronisations on a GPU, whatever the number of tensors);
  // off, a NaN trains on silently. Data parallel: the averaged gradients (this rank's shards
  // when sharded) and this rank's loss are checked after the all-reduce, and the ranks agree
  // over host_comm, so either every rank stops at that step or none does.
  bool check_finite = true;
  // Note [borrowed memory]: the executor whose persistent values and memory this one uses
  // (memory mode and budget are then that executor's).
  Executor* borrow = nullptr;
  // Note [step graphs] (runtime/backends/backend.h): replay a record of the plan's walk with one
  // launch, where the backend can record and the step allows it (graph_note() says why not).
  bool step_graphs = true;
};

// Trace tracks (thread ids) of the copies to and from host memory (Note [host copies]); the
// computes are on track 1.
constexpr int kTraceCopyOutTrack = 2;
constexpr int kTraceCopyInTrack = 3;

struct StepResult {
  float loss = 0;
  double seconds = 0;
  // Exact bytes in use at the step's maximum: persistent + live activations + workspace of the
  // running node. Comparable with ExecutionPlan::predicted_peak (equal for a faithful run).
  int64_t peak_bytes = 0;
  // What the memory source used at the maximum: Pool: the allocator's peak (blocks rounded to
  // its alignment); Arena: constant + arena size (aligned); Direct: = peak_bytes.
  int64_t reserved_peak_bytes = 0;
  double fragmentation = 0;  // Pool: external fragmentation at the peak; else 0
  int computes = 0;
  int recomputes = 0;
  // Data parallel: host seconds spent waiting for gradient collectives (not hidden behind the
  // backward pass).
  double comm_wait_seconds = 0;
  // Note [step graphs]: the plan ran as one replayed record (the counts and peak above are the
  // recorded step's, which ran the same plan). `recorded`: this step recorded the plan first (a
  // one-time cost, like the first step's: recording launches nothing, then the record runs).
  bool replayed = false;
  bool recorded = false;
};

// Workspace bytes `be` needs to run node `n` of `g` (no memory needed: shapes only).
int64_t node_workspace_bytes(const Graph& g, const OpRegistry& ops, Backend& be, NodeId n);

class Executor {
 public:
  // Allocates every persistent value (zero-filled). The graph, registry and backend must
  // outlive the executor. Pool/Arena: throws UserError if the persistent values alone exceed
  // the budget. Data parallel: every rank constructs its executor with the same graph.
  Executor(const Graph& g, const OpRegistry& ops, Backend& backend, ExecutorOptions opt = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Initial values of parameters, buffers and optimizer state (runtime/graph/init.h).
  void init_parameters(uint64_t seed);

  // The bytes `plan` needs from the budget's allocation, known before it runs. Arena: assigns
  // the offsets (run_step does it for a new plan) and returns persistent + arena (aligned);
  // run_step throws UserError if that exceeds the budget. Pool: replays the plan's requests
  // through the allocator (runtime/memory/pool_replay.h) and returns its peak, or budget + the
  // shortfall of the first request fragmentation or size leaves unserved. Direct: 0.
  int64_t prepare(const ExecutionPlan& plan);
  // The region an arena-mode executor needs for `plan`, before one exists: persistent values
  // (each aligned) plus the packed activation arena. What prepare() returns in arena mode.
  static int64_t arena_region_bytes(const Graph& g, const OpRegistry& ops, Backend& be,
                                    const ExecutionPlan& plan, const ParallelConfig& parallel = {});

  // One training step: uploads the batch (the graph's input: [N, C, H, W] floats or [N, T]
  // token ids; the label ints), runs the plan's steps, then every Update node. A graph of K
  // micro-batches (Note [gradient accumulation]) takes K batches one after another in `input`
  // and `labels`, runs the plan on each, and the updates once; the loss is the mean of theirs,
  // computes and recomputes their sums, the peak the largest. With `trace`,
  // records spans per node (synchronising after each), frees and a memory counter. Data
  // parallel: the gradient buckets are averaged over the ranks while the plan runs
  // (runtime/comm/grad_sync.h), this rank's updates run (its shards only, when sharded) and the
  // updated shards are gathered; the loss is this rank's. With check_finite, a non-finite loss
  // or parameter gradient throws NonFiniteError before any update (the parameters keep their
  // values).
  // With step_graphs, the plan's steps replay a record of an earlier step of the same plan
  // where the backend records and nothing above forbids it (Note [step graphs]). A step that
  // throws releases its activations; a plain Error (a device fault, a broken invariant; not a
  // UserError or another subclass) comes back naming the step, and whether it ran as a replayed
  // record.
  StepResult run_step(const ExecutionPlan& plan, const void* input, const int32_t* labels,
                      int64_t step, TraceWriter* trace = nullptr);

  // After each step computes activation `v` for the first time, its bytes are copied to `host`
  // (synchronously, before the plan can free it): how `sample` reads the logits of a forward
  // graph. `host` must hold v's bytes and outlive the steps; null stops the copies.
  void capture(ValueId v, void* host);

  // Host copies of persistent float values held whole on this rank.
  std::vector<float> read(ValueId v) const;
  void write(ValueId v, const std::vector<float>& host);
  // Host copies of bytes of the persistent region (offsets from layout()): data-parallel
  // checkpoints and weight checks reach sharded optimizer state through them.
  void read_region(int64_t offset, int64_t bytes, void* host) const;
  void write_region(int64_t offset, int64_t bytes, const void* host);
  const PersistentLayout& layout() const { return layout_; }
  // Note [step graphs]: how the last step ran its plan ("off: <why>", or the record it replays).
  const std::string& graph_note() const { return graph_.note; }

  const Graph& graph() const { return g_; }
  MemoryMode memory_mode() const { return opt_.memory; }
  int64_t workspace_bytes(NodeId n);  // what the backend needs to run node n

 private:
  ExecContext make_context(NodeId n, bool require_resident);
  void allocate_persistent();  // the budget's region or pool, and every persistent value
  void borrow_persistent();    // Note [borrowed memory]
  void release_all();          // everything allocate_persistent and the constructor took
  void* acquire(int64_t bytes, const std::string& who, int arena_request);
  void release(void* p);
  void run_node(NodeId n, bool recompute, int64_t step, int plan_step);
  void run_update_slice(const UpdateSlice& s, int64_t step);
  StepResult run_step_body(const ExecutionPlan& plan, const void* input, const int32_t* labels,
                           int64_t step, TraceWriter* trace);
  // The plan's compute and free steps. With `scan`, stops at the first compute whose output is
  // not finite and returns its plan step index (-1: none); every activation is released then.
  int run_plan_steps(const ExecutionPlan& plan, int64_t step, TraceWriter* trace, StepResult* r,
                     bool scan);
  // The plan's steps for one micro-batch: replayed, recorded or eager (executor_graph.cpp).
  void run_plan(const ExecutionPlan& plan, int64_t step, TraceWriter* trace, StepResult* r);
  // Why this step must run eagerly ("" when it may replay a record).
  std::string graph_blocker(const TraceWriter* trace) const;
  void drop_step_graph();
  // Note [finite check]: the first non-finite loss or parameter gradient of `step`, located.
  void check_finite(const ExecutionPlan& plan, int64_t step);
  bool value_finite(ValueId v);
  void release_activations();  // every resident activation (after an aborted step)
  // Note [host copies]: the host region of `plan`'s copies, laid out once per plan.
  void prepare_host(const ExecutionPlan& plan);
  void run_copy(const PlanStep& s, int plan_step, TraceWriter* trace);
  // Waits for a prefetch into v's device copy (before a compute reads it), and with `reuse`
  // also for an offload reading it (before its memory is freed).
  void wait_device_copies(ValueId v, bool reuse);
  // Waits for every copy; no ticket is outstanding after it.
  void drain_copies();
  // A span from start_us to now (synchronising first) and the memory counter.
  // A span of node n (args: op, output, shape, bytes, recompute) and the memory and budget
  // counters at its end.
  void trace_span(TraceWriter* trace, NodeId n, const char* category, double start_us);
  void trace_span(TraceWriter* trace, const std::string& name, const char* category,
                  double start_us, const std::map<std::string, std::string>& args = {});

  bool last_micro_batch() const { return micro_ + 1 == g_.micro_batches; }

  const Graph& g_;
  const OpRegistry& ops_;
  Backend& be_;
  ExecutorOptions opt_;
  PersistentLayout layout_;
  std::vector<void*> ptr_;  // per value: its memory, or null while not resident
  std::shared_ptr<PoolAllocator> pool_;  // shared with a borrowing executor
  std::unique_ptr<GradSync> sync_;  // data parallel only
  std::vector<PlanStep> sync_steps_;  // the plan sync_ was prepared for
  char* persistent_ = nullptr;      // the persistent region (layout_)
  void* region_ = nullptr;          // Arena: the single allocation
  bool borrowed_ = false;           // Note [borrowed memory]: region_, pool_, persistent values
  int64_t persistent_bytes_ = 0;    // what the persistent region holds (the borrowed one's)
  float* loss_host_ = nullptr;      // host_alloc'd: each micro-batch's loss, copied without a
                                    // mid-step sync
  int micro_ = 0;                   // the running micro-batch (Note [gradient accumulation])
  std::vector<std::pair<ValueId, void*>> captures_;  // capture()
  int64_t arena_base_ = 0;          // Arena: offset of the activation arena in region_
  std::vector<PlanStep> arena_steps_;  // the plan the arena was prepared for
  PlanBuffers arena_buffers_;
  ArenaPlan arena_;
  // Note [host copies]
  // A plan that offloads (PlanStepKind::Offload, Prefetch, HostFree) keeps its host copies in
  // one host_alloc region (pinned on a GPU), each at an offset laid out ahead like the arena's
  // (plan_host_buffers, plan_arena), so the host side does no allocator work either and its
  // size is the plan's host peak. The copies run on the backend's copy streams (Note [copy
  // streams] in runtime/backends/backend.h), issued in plan order, and the computes wait for
  // them only where the time model of Note [streamed copies] (solver/schedule.h) says: a compute
  // reading a prefetched value waits for the prefetch, a Free of a device copy for the offload
  // reading it (and a prefetch writing it), a HostFree for the last copy of that host copy. No
  // copy waits for another: a prefetch comes after the Free of the device copy, which waited for
  // the offload that wrote its host copy, and an offload of a prefetched value after the
  // HostFree of the host copy, which waited for the prefetch. Such a plan runs eagerly (no step
  // graph); the device bytes are the plan's exactly, since memory is handed on only after those
  // waits.
  std::vector<PlanStep> host_steps_;  // the plan the host region is laid out for
  PlanBuffers host_buffers_;
  ArenaPlan host_arena_;
  char* host_region_ = nullptr;
  struct CopyTickets {  // per value, copies not yet waited for (0: none)
    std::vector<int64_t> prefetch;  // writing its device copy
    std::vector<int64_t> offload;   // reading its device copy
    std::vector<int64_t> host;      // the last to write or read its host copy
  };
  CopyTickets copies_;
  bool plan_copies_ = false;  // the running plan has copies (Note [step graphs]: eager)
  int64_t constant_bytes_ = 0;
  int64_t in_use_ = 0;  // exact bytes: persistent + live activations
  int64_t peak_ = 0;
  // Note [step graphs]: the record of the plan the arena is laid out for (prepare() drops it
  // when it lays the arena out for another plan), once that plan's first step ran eagerly.
  struct StepGraph {
    bool ran_eagerly = false;
    int id = -1;                // the backend's record, -1 while none
    StepResult recorded;        // the recorded step's counts and peak
    int64_t recorded_at = -1;   // the step recorded
    bool replaying = false;     // the running step replays the record
    std::string failure;        // why recording failed (the plan then runs eagerly)
    std::string note;           // graph_note()
  };
  StepGraph graph_;
  std::chrono::steady_clock::time_point step_t0_;  // start of the running step (traces)
  double step_elapsed_us() const;                   // microseconds since step_t0_
};

}  // namespace remat
