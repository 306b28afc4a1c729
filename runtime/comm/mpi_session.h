// The MPI side of a data-parallel process: whether an MPI launcher (mpirun, mpiexec, srun)
// started it, MPI's init and finalize, this rank's place in the job, host-memory
// communicators, and ending the whole job when one rank fails. Built with MPI in
// mpi_session.cpp; mpi_none.cpp answers for builds without it.
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"

namespace remat {

// True when the environment says an MPI launcher started this process as one of several
// ranks (OpenMPI's OMPI_COMM_WORLD_SIZE, MPICH/Intel's PMI_SIZE, PMIx's PMIX_RANK with a
// size, Slurm's srun with SLURM_NTASKS under MPI). A plain `train` is never an MPI process.
bool launched_as_mpi_job(int* world_size_hint);

class MpiSession {
 public:
  // Initialises MPI when launched_as_mpi_job(); otherwise a job of one rank that uses no MPI.
  // Throws UserError when launched by mpirun but this build has no MPI (it would train N
  // independent copies).
  MpiSession();
  ~MpiSession();  // MPI_Finalize when it initialised MPI
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  bool active() const { return active_; }  // MPI was initialised
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // index among the ranks on this host
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  // "rank 1 of 4 (node-b)"; "" for a job of one rank.
  std::string label() const;

  // A new host-memory communicator over every rank (its own MPI communicator, so that its
  // collectives never interleave with another's). Requires active().
  std::unique_ptr<Communicator> make_communicator();

  // Ends every rank of the job with `code` (MPI_Abort); returns only without MPI.
  void abort_job(int code);
  // Waits until every rank has called it (MPI_Barrier); returns at once without MPI.
  void barrier();

 private:
  bool active_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
};

}  // namespace remat
