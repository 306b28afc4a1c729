// GradSync: bucket collectives in the order the plan finishes gradients; averaged in place.
#include "runtime/comm/grad_sync.h"

#include <algorithm>
#include <chrono>

#include "runtime/core/check.h"

namespace remat {

GradSync::GradSync(const Graph& g, const PersistentLayout& layout, Communicator& comm,
                   char* region)
    : g_(g), layout_(layout), comm_(comm), region_(region) {
  REMAT_CHECK(layout_.parallel.active() && comm_.size() == layout_.parallel.world &&
                  comm_.rank() == layout_.parallel.rank,
              "gradient sync: layout for rank " << layout_.parallel.rank << " of "
                                                << layout_.parallel.world << ", communicator rank "
                                                << comm_.rank() << " of " << comm_.size());
  std::vector<int> bucket_of_grad(g_.values.size(), -1);
  writers_.resize(layout_.buckets.size());
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& u = g_.nodes[n];
    if (u.kind != NodeKind::Update) continue;
    const ValueId param = u.inputs[0], grad = u.inputs[1];
    for (size_t b = 0; b < layout_.buckets.size(); ++b) {
      const auto& ps = layout_.buckets[b].params;
      if (std::find(ps.begin(), ps.end(), param) == ps.end()) continue;
      if (g_.value(grad).producer >= 0) writers_[b].push_back(g_.value(grad).producer);
    }
  }
  ready_after_.assign(layout_.buckets.size(), -1);
}

void GradSync::prepare(const ExecutionPlan& plan) {
  std::vector<int> last_compute(g_.nodes.size(), -2);  // -2: never computed by the plan
  for (size_t i = 0; i < plan.steps.size(); ++i)
    if (plan.steps[i].kind == PlanStepKind::Compute)
      last_compute[static_cast<size_t>(plan.steps[i].node)] = static_cast<int>(i);
  starts_at_.assign(plan.steps.size(), {});
  for (size_t b = 0; b < writers_.size(); ++b) {
    int ready = -1;
    for (NodeId w : writers_[b]) {
      REMAT_CHECK(last_compute[static_cast<size_t>(w)] != -2,
                  "plan '" << plan.strategy << "' never computes '" << g_.node(w).name
                           << "', which writes a gradient");
      ready = std::max(ready, last_compute[static_cast<size_t>(w)]);
    }
    ready_after_[b] = ready;
    if (ready >= 0) starts_at_[static_cast<size_t>(ready)].push_back(b);
  }
}

void GradSync::start(size_t b) {
  const GradBucket& bk = layout_.buckets[b];
  char* grads = region_ + layout_.grads_begin + bk.begin;
  pending_[b] = layout_.parallel.shard_optimizer
                    ? comm_.reduce_scatter(grads, layout_.shard_bytes(b) / 4, CommType::F32,
                                           CommOp::Avg)
                    : comm_.all_reduce(grads, bk.bytes / 4, CommType::F32, CommOp::Avg);
  started_[b] = true;
}

void GradSync::begin_step() {
  wait_seconds_ = 0;
  pending_.assign(layout_.buckets.size(), 0);
  started_.assign(layout_.buckets.size(), false);
  for (size_t b = 0; b < ready_after_.size(); ++b)
    if (ready_after_[b] < 0) start(b);
}

void GradSync::after_plan_step(int i) {
  if (i < 0 || static_cast<size_t>(i) >= starts_at_.size()) return;
  for (size_t b : starts_at_[static_cast<size_t>(i)]) start(b);
  comm_.progress();
}

void GradSync::finish_gradients() {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b = 0; b < pending_.size(); ++b) {
    REMAT_CHECK(started_[b], "gradient bucket " << b << " was never started");
    comm_.wait(pending_[b]);
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradSync::gather_parameters() {
  if (!layout_.parallel.shard_optimizer) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CommHandle> hs;
  for (size_t b = 0; b < layout_.buckets.size(); ++b)
    hs.push_back(comm_.all_gather(region_ + layout_.params_begin + layout_.buckets[b].begin,
                                  layout_.shard_bytes(b)));
  for (CommHandle h : hs) comm_.wait(h);
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace remat
