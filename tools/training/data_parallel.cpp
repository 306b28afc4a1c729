// ParallelJob: communicators, graph agreement, plan sharing and reductions for `train` ranks.
#include "tools/training/data_parallel.h"

#include <algorithm>
#include <csignal>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/memory/plan_io.h"
#include "tools/common/cli.h"

namespace remat {

int parallel_cuda_device(const MpiSession& s) {
  const int count = cuda_device_count();
  return count > 0 ? s.local_rank() % count : 0;
}

std::unique_ptr<ParallelJob> make_parallel_job(MpiSession& session, Backend& be,
                                               const std::vector<std::string>& settings) {
  REMAT_CHECK(session.active() && session.size() > 1, "a parallel job needs several MPI ranks");
  auto job = std::make_unique<ParallelJob>();
  job->rank = session.rank();
  job->world = session.size();
  job->label = session.label();
  job->host = session.make_communicator();
  check_same_run(*job->host, settings);  // Note [ranks agree on the run]
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

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// "key: value" lines as (key, value), in order.
std::vector<std::pair<std::string, std::string>> key_values(const std::vector<std::string>& lines) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& l : lines) {
    const size_t colon = l.find(": ");
    out.emplace_back(l.substr(0, colon), colon == std::string::npos ? "" : l.substr(colon + 2));
  }
  return out;
}

// This rank's first differences from rank 0's settings: "data.seed 3 (rank 0: 7)".
std::string differences(const std::vector<std::string>& mine, const std::vector<std::string>& zero) {
  const auto a = key_values(mine), b = key_values(zero);
  auto find = [](const auto& kv, const std::string& k) -> const std::string* {
    for (const auto& [key, value] : kv)
      if (key == k) return &value;
    return nullptr;
  };
  auto shown = [](const std::string& v) { return v.empty() ? std::string("not given") : v; };
  std::vector<std::string> diffs;
  for (const auto& [key, value] : b) {
    const std::string* here = find(a, key);
    if (!here) diffs.push_back(key + " not given (rank 0: " + shown(value) + ")");
    else if (*here != value)
      diffs.push_back(key + " " + shown(*here) + " (rank 0: " + shown(value) + ")");
  }
  for (const auto& [key, value] : a)
    if (!find(b, key)) diffs.push_back(key + " " + shown(value) + " (rank 0: not given)");
  std::string s;
  for (size_t i = 0; i < diffs.size() && i < 4; ++i) s += (i ? ", " : "") + diffs[i];
  if (diffs.size() > 4) s += " and " + std::to_string(diffs.size() - 4) + " more";
  return s;
}

}  // namespace

void check_same_run(Communicator& host, const std::vector<std::string>& settings) {
  const std::string text = joined(settings);
  const std::vector<uint64_t> all = all_gather_u64(host, fnv1a(text));
  std::vector<int> differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ.push_back(static_cast<int>(r));
  if (differ.empty()) return;
  std::vector<std::string> zero;
  std::istringstream in(broadcast_string(host, host.rank() == 0 ? text : "", 0));
  for (std::string line; std::getline(in, line);) zero.push_back(line);
  std::string message = "ranks disagree on the run (every rank must be started with the same "
                        "config, overrides and flags): ";
  const size_t shown = std::min<size_t>(differ.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    const int r = differ[i];
    const std::string mine = host.rank() == r ? differences(settings, zero) : "";
    message += (i ? "; " : "") + std::string("rank ") + std::to_string(r) + ": " +
               broadcast_string(host, mine, r);
  }
  if (differ.size() > shown)
    message += "; and " + std::to_string(differ.size() - shown) + " more ranks";
  throw UsageError(message);
}

void check_same_graph(ParallelJob& job, const Graph& g, const std::string& config) {
  // The graph's JSON: names, shapes, attributes, optimizer, batch.
  const std::vector<uint64_t> all = all_gather_u64(*job.host, fnv1a(graph_to_json_text(g)));
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
