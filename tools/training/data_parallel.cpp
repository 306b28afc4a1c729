// ParallelJob: communicators, graph agreement, plan sharing and reductions for `train` ranks.
#include "tools/training/data_parallel.h"

#include <csignal>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/memory/plan_io.h"

namespace remat {

int parallel_cuda_device(const MpiSession& s) {
  const int count = cuda_device_count();
  return count > 0 ? s.local_rank() % count : 0;
}

std::unique_ptr<ParallelJob> make_parallel_job(MpiSession& session, Backend& be) {
  REMAT_CHECK(session.active() && session.size() > 1, "a parallel job needs several MPI ranks");
  auto job = std::make_unique<ParallelJob>();
  job->rank = session.rank();
  job->world = session.size();
  job->label = session.label();
  job->host = session.make_communicator();
  if (be.kind() == DeviceKind::Cpu) {
    job->grads = session.make_communicator();
    job->ops = session.make_communicator();
    return job;
  }
  std::string why;
  job->grads = make_nccl_communicator(be, job->host.get(), &why);
  if (job->grads) job->ops = make_nccl_communicator(be, job->host.get(), &why);
  if (!job->grads || !job->ops)
    REMAT_USER_ERROR("data parallel on " << be.name() << " needs NCCL: " << why);
  return job;
}

void check_same_graph(ParallelJob& job, const Graph& g, const std::string& config) {
  // FNV-1a of the graph's JSON: names, shapes, attributes, optimizer, batch.
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : graph_to_json_text(g)) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  const std::vector<uint64_t> all = all_gather_u64(*job.host, h);
  std::ostringstream bad;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) bad << (bad.str().empty() ? "" : ", ") << r;
  if (!bad.str().empty())
    REMAT_USER_ERROR("ranks " << bad.str() << " build a different training graph than rank 0 "
                              << "(model, batch, layers or optimizer differ; this rank read "
                              << config << "): every rank must train the same model");
}

ExecutionPlan share_plan(ParallelJob& job, const ExecutionPlan& plan, const Graph& g,
                         int64_t constant_bytes) {
  const std::string text =
      broadcast_string(*job.host, job.rank == 0 ? plan_to_json_text(plan, g) : "", 0);
  return plan_from_json_text(text, g, "the plan rank 0 sent", constant_bytes);
}

int64_t max_over_ranks(ParallelJob& job, int64_t value) {
  int64_t best = value;
  for (uint64_t v : all_gather_u64(*job.host, static_cast<uint64_t>(value)))
    best = std::max(best, static_cast<int64_t>(v));
  return best;
}

double mean_over_ranks(ParallelJob& job, double value) {
  job.host->all_reduce_now(&value, 1, CommType::F64, CommOp::Avg);
  return value;
}

StepAgreement agree_after_step(ParallelJob& job, double loss, int stop_signal) {
  double v[3] = {loss, stop_signal == SIGTERM ? 1.0 : 0.0, stop_signal == SIGINT ? 1.0 : 0.0};
  job.host->all_reduce_now(v, 3, CommType::F64, CommOp::Sum);
  StepAgreement a;
  a.loss = v[0] / job.world;  // as CommOp::Avg divides
  a.stop_signal = v[1] > 0 ? SIGTERM : v[2] > 0 ? SIGINT : 0;
  return a;
}

}  // namespace remat
