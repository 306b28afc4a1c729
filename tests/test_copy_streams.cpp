// Copies on streams (Note [copy streams], Note [copy orders]): the CPU backend's queues run
// each direction's copies at once or latest, and a plan whose copies need each of the
// executor's waits trains as keep-everything does under every order. The strategies' plans
// under every order: RematExec.OffloadPlansUnderEveryCopyOrder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/backends/copy_queues.h"
#include "runtime/executor.h"
#include "runtime/memory/allocator.h"
#include "runtime/memory/arena.h"
#include "runtime/memory/plan.h"
#include "tests/graph_test_util.h"

namespace remat {
namespace {

TEST(CopyQueues, LatestCopiesRunWhenWaitedForInQueueOrderAndOnlyTheirDirection) {
  const std::vector<int> src = {1, 2, 3, 4};
  std::vector<int> a(4, 0), b(4, 0), c(4, 0);
  CopyQueues q({true, true});
  const int64_t ta = q.queue(0, a.data(), src.data(), 16);
  const int64_t tb = q.queue(1, b.data(), src.data(), 16);
  const int64_t tc = q.queue(0, c.data(), src.data(), 8);
  EXPECT_TRUE(ta > 0 && ta < tb && tb < tc);
  EXPECT_EQ(a, std::vector<int>(4, -1));  // not yet written: 0xFF bytes
  EXPECT_EQ(c, (std::vector<int>{-1, -1, 0, 0}));
  q.run_through(tc);  // a, then c; not b (the other direction)
  EXPECT_EQ(a, src);
  EXPECT_EQ(c, (std::vector<int>{1, 2, 0, 0}));
  EXPECT_EQ(b, std::vector<int>(4, -1));
  q.run_through(tc);  // done: nothing
  q.run_through(0);   // a copy made at once: nothing
  q.run_all();
  EXPECT_EQ(b, src);
}

TEST(CopyQueues, OneDirectionAtOnceTheOtherLatest) {
  const std::vector<int> src = {5, 6};
  std::vector<int> out(2, 0), in(2, 0);
  CopyQueues q({false, true});
  q.queue(0, out.data(), src.data(), 8);
  EXPECT_EQ(out, src);  // to host: at once
  const int64_t t = q.queue(1, in.data(), src.data(), 8);
  EXPECT_EQ(in, std::vector<int>(2, -1));  // to the device: latest
  q.run_through(t);
  EXPECT_EQ(in, src);
}

PlanStep copy_step(PlanStepKind kind, ValueId v) {
  PlanStep s;
  s.kind = kind;
  s.value = v;
  return s;
}

// Every parameter after two steps of `plan` on a CPU backend running copies in `order`; with
// `stopped`, after a first step of a NaN input, which the finite check stops (its message in
// `stopped`).
std::vector<std::vector<float>> trained(test::SmallCnnGraph& m, const ExecutionPlan& plan,
                                        CpuCopyOrder order, MemoryMode mode,
                                        std::string* stopped = nullptr) {
  std::unique_ptr<Backend> be = make_cpu_backend(order);
  ExecutorOptions eo{mode, 64 << 20};
  Executor ex(m.g, m.ops, *be, eo);
  ex.init_parameters(7);
  std::vector<float> x(static_cast<size_t>(m.g.value(m.g.input).desc.numel()));
  std::vector<int32_t> y(static_cast<size_t>(m.g.value(m.g.label).desc.numel()), 1);
  std::vector<std::vector<float>> state;
  if (stopped) {
    std::fill(x.begin(), x.end(), std::nanf(""));
    try {
      ex.run_step(plan, x.data(), y.data(), 0);
    } catch (const NonFiniteError& e) {
      *stopped = e.what();
    }
  }
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 + step) % 11) / 11;
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + step) % 10);
    ex.run_step(plan, x.data(), y.data(), step);
  }
  for (size_t v = 0; v < m.g.values.size(); ++v)
    if (m.g.values[v].kind == ValueKind::Param) state.push_back(ex.read(static_cast<ValueId>(v)));
  return state;
}

// The keep-everything plan of the small CNN with, after its first three activations (v0, v1,
// v2) are computed: v1 offloaded, freed, prefetched and its host copy released; then v2 and v0
// offloaded, freed and prefetched, their host copies released at the end. Run latest, v2's
// offload would overwrite v1's host bytes before v1's prefetch reads them but for the wait at
// v1's release, and the computes would read v2 and v0 before their prefetches but for the
// waits before the reads; every Free waits for the offload reading it.
// An empty plan when no order of the three puts one host copy on a released one's bytes.
ExecutionPlan plan_needing_every_wait(const test::SmallCnnGraph& m) {
  // The first three activations the backward pass reads (after the loss).
  const std::vector<PlanStep>& steps = m.plan.steps;
  size_t loss = 0;
  while (steps[loss].kind != PlanStepKind::Compute || m.g.node(steps[loss].node).output != m.g.loss)
    ++loss;
  auto read_after_loss = [&](ValueId x) {
    for (size_t i = loss + 1; i < steps.size(); ++i)
      if (steps[i].kind == PlanStepKind::Compute)
        for (ValueId in : m.g.node(steps[i].node).inputs)
          if (in == x) return true;
    return false;
  };
  std::vector<ValueId> v;
  size_t after = 0;
  while (v.size() < 3) {
    const PlanStep& s = steps[after++];
    if (s.kind != PlanStepKind::Compute) continue;
    const ValueId out = m.g.node(s.node).output;
    if (m.g.value(out).kind == ValueKind::Activation && read_after_loss(out)) v.push_back(out);
  }
  // Roles: v[1]'s host copy is released, then v[2]'s takes its bytes (the release's wait is
  // what keeps them apart), v[0]'s lives to the end. The first order of the three where the
  // host layout puts v[2] on v[1]'s bytes.
  auto plan_for = [&](const std::vector<ValueId>& r) {
    std::vector<PlanStep> moved;
    for (ValueId x : {r[1], r[2], r[0]})
      for (PlanStepKind k : {PlanStepKind::Offload, PlanStepKind::Free, PlanStepKind::Prefetch})
        moved.push_back(copy_step(k, x));
    moved.insert(moved.begin() + 3, copy_step(PlanStepKind::HostFree, r[1]));
    ExecutionPlan plan = m.plan;
    plan.steps.insert(plan.steps.begin() + static_cast<long>(after), moved.begin(), moved.end());
    plan.steps.push_back(copy_step(PlanStepKind::HostFree, r[2]));
    plan.steps.push_back(copy_step(PlanStepKind::HostFree, r[0]));
    return plan;
  };
  std::sort(v.begin(), v.end());
  do {
    ExecutionPlan plan = plan_for(v);
    const ArenaPlan host = plan_arena(plan_host_buffers(m.g, plan).requests, kPoolAlignment);
    if (host.offsets[0] == host.offsets[1]) return plan;
  } while (std::next_permutation(v.begin(), v.end()));
  return {};
}

TEST(CopyStreams, EveryWaitOfTheExecutorIsNeeded) {
  test::SmallCnnGraph m;
  const ExecutionPlan plan = plan_needing_every_wait(m);
  ASSERT_TRUE(plan.has_copies()) << "no order puts one host copy on a released one's bytes";
  for (MemoryMode mode : {MemoryMode::Arena, MemoryMode::Pool}) {
    SCOPED_TRACE(memory_mode_name(mode));
    const auto reference = trained(m, m.plan, CpuCopyOrder::AtOnce, mode);
    for (CpuCopyOrder order : {CpuCopyOrder::AtOnce, CpuCopyOrder::Latest,
                               CpuCopyOrder::ToHostLatest, CpuCopyOrder::ToDeviceLatest}) {
      SCOPED_TRACE(static_cast<int>(order));
      const auto state = trained(m, plan, order, mode);
      ASSERT_EQ(state.size(), reference.size());
      for (size_t i = 0; i < state.size(); ++i)
        EXPECT_EQ(std::memcmp(state[i].data(), reference[i].data(), state[i].size() * 4), 0)
            << "parameter #" << i;
    }
  }
}

// A step the finite check stops (a NaN input) is re-run, copies and all, to name the first
// non-finite node, the same as keep-everything's, and the steps after it train as
// keep-everything's do, under every order.
TEST(CopyStreams, AStepStoppedByTheFiniteCheckThenTrainsOn) {
  test::SmallCnnGraph m;
  const ExecutionPlan plan = plan_needing_every_wait(m);
  ASSERT_TRUE(plan.has_copies());
  std::string keep_stop;
  const auto reference = trained(m, m.plan, CpuCopyOrder::AtOnce, MemoryMode::Pool, &keep_stop);
  EXPECT_NE(keep_stop.find("the first non-finite output is node"), std::string::npos) << keep_stop;
  for (CpuCopyOrder order : {CpuCopyOrder::AtOnce, CpuCopyOrder::Latest,
                             CpuCopyOrder::ToHostLatest, CpuCopyOrder::ToDeviceLatest}) {
    SCOPED_TRACE(static_cast<int>(order));
    std::string stop;
    const auto state = trained(m, plan, order, MemoryMode::Pool, &stop);
    EXPECT_EQ(stop.substr(0, stop.find("(")), keep_stop.substr(0, keep_stop.find("(")));
    ASSERT_EQ(state.size(), reference.size());
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_EQ(std::memcmp(state[i].data(), reference[i].data(), state[i].size() * 4), 0)
          << "parameter #" << i;
  }
}

}  // namespace
}  // namespace remat
