// `train` as one rank of a data-parallel job started by mpirun: the job's communicators, the
// checks that every rank trains the same graph, the plan rank 0 decides for all, and the
// per-rank numbers rank 0 reports for the job.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/comm/communicator.h"
#include "runtime/graph/graph.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/memory/plan.h"

namespace remat {

struct ParallelJob {
  int rank = 0;
  int world = 1;
  std::string label;                    // "rank 1 of 4 (node-b)"
  std::unique_ptr<Communicator> host;   // MPI, host memory: plans, checks, checkpoints, losses
  std::unique_ptr<Communicator> grads;  // the gradient buckets, in the backend's memory
  std::unique_ptr<Communicator> ops;    // collectives inside ops (batch-norm statistics)
};

// The CUDA device a rank uses: its index on its host, modulo the host's devices.
int parallel_cuda_device(const MpiSession& s);

// The communicators of a job of session.size() > 1 ranks for `be`: MPI on the CPU; NCCL on
// CUDA, its unique id sent over MPI. First, over MPI, the ranks compare their `settings` (Note
// [ranks agree on the run]). UserError when this build cannot communicate in `be`'s memory.
std::unique_ptr<ParallelJob> make_parallel_job(MpiSession& session, Backend& be,
                                               const std::vector<std::string>& settings);

// Note [ranks agree on the run]: every rank of a job must train the same run, or they meet in
// different collectives and wait forever: ranks with different --steps end at different steps,
// a --save given to one rank writes a checkpoint the others never join, and a different data
// seed trains silently on overlapping samples. At start-up, before any other collective, the
// ranks compare their run's settings — the config as read with its overrides
// (ModelConfig::settings: "data.seed: 7") and every flag of the run but the host-local ones
// ("--steps: 20") — by a hash of each; where any differs, every rank learns each differing
// rank's first differences from rank 0's and the job ends with a usage error (exit 2, printed
// once by rank 0): "ranks disagree on the run: rank 1: data.seed 3 (rank 0: 7); ...".
// The config file's path is not compared (ranks on other hosts may mount it elsewhere); its
// settings are.
void check_same_run(Communicator& host, const std::vector<std::string>& settings);

// UserError naming every rank whose training graph (model, batch, layers, optimizer) differs
// from rank 0's; `config` is what this rank was given (--config).
void check_same_graph(ParallelJob& job, const Graph& g, const std::string& config);

// Rank 0's plan on every rank (sent as remat-plan/1 text), checked against this rank's graph
// and constant (runtime/memory/param_layout.h); `plan` is read on rank 0 only.
ExecutionPlan share_plan(ParallelJob& job, const ExecutionPlan& plan, const Graph& g,
                         int64_t constant_bytes);

// The largest of every rank's value, and the mean.
int64_t max_over_ranks(ParallelJob& job, int64_t value);
double mean_over_ranks(ParallelJob& job, double value);

// Note [stopping a data-parallel job]
// Ctrl-C at mpirun reaches the ranks as SIGTERM, and OpenMPI SIGKILLs them a second later
// (odls_base_sigkill_timeout): enough for the step of a small model and its checkpoint, not for
// a long step. A signal sent to the ranks themselves (`kill`, a scheduler) leaves them the time
// they need; it may reach one rank a little before another. The ranks must end after the same step — one that went on into the next
// step's collectives would wait for the others forever — so the all-reduce that averages a
// step's loss carries each rank's signal too: after it every rank knows whether any rank was
// signalled, and by what (SIGTERM before SIGINT). They stop after that step, write the
// checkpoint together, meet at a barrier and exit with 128 + the signal, as one process does,
// without MPI_Abort (its banner) and without MPI_Finalize (after Ctrl-C mpirun is ending the job
// and would leave a rank in it until its SIGKILL); rank 0 alone reports it, on stdout. The job
// then ends with that code when the ranks were signalled; after Ctrl-C OpenMPI's mpirun exits
// with 1 whatever its ranks do. Before the first step a signal ends every rank at once (Note
// [graceful stop]).
struct StepAgreement {
  double loss = 0;      // the mean over the ranks
  int stop_signal = 0;  // SIGTERM or SIGINT when any rank received one, else 0
};
StepAgreement agree_after_step(ParallelJob& job, double loss, int stop_signal);

}  // namespace remat
