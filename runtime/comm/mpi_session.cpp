// MpiSession over MPI: init when an MPI launcher started the process, this rank's place on
// its host, host-memory communicators, MPI_Abort of the whole job.
#include "runtime/comm/mpi_session.h"

#include <mpi.h>

#include <cstdlib>

#include "runtime/core/check.h"
#include "runtime/comm/mpi_communicator.h"

namespace remat {

bool mpi_built() { return true; }

MpiSession::MpiSession() {
  int hint = 1;
  if (!launched_as_mpi_job(&hint)) return;
  int initialised = 0;
  MPI_Initialized(&initialised);
  REMAT_CHECK(!initialised, "MPI is already initialised: one MpiSession per process");
  int provided = 0;
  // Only the main thread calls MPI (OpenBLAS's threads never do).
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    REMAT_FAIL("MPI_Init_thread failed");
  active_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, static_cast<size_t>(len));
}

MpiSession::~MpiSession() {
  if (active_) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::make_communicator() {
  REMAT_CHECK(active_, "no MPI job: this process was not started by an MPI launcher");
  return make_mpi_communicator_over_world();
}

void MpiSession::abort_job(int code) {
  if (active_) MPI_Abort(MPI_COMM_WORLD, code);
}

void MpiSession::barrier() {
  if (active_) mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

}  // namespace remat
