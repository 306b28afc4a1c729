// MpiSession for builds without MPI: a job of one rank. Started by mpirun as one of several
// ranks, it refuses instead of training independent copies.
#include "runtime/core/check.h"
#include "runtime/comm/mpi_session.h"

namespace remat {

bool mpi_built() { return false; }

MpiSession::MpiSession() {
  int hint = 1;
  if (launched_as_mpi_job(&hint) && hint != 1)
    REMAT_USER_ERROR("started by an MPI launcher as one of "
                     << (hint > 1 ? std::to_string(hint) : std::string("several"))
                     << " ranks, but this build has no MPI (install libopenmpi-dev and rebuild)");
}

MpiSession::~MpiSession() = default;

std::unique_ptr<Communicator> MpiSession::make_communicator() {
  REMAT_FAIL("this build has no MPI");
}

void MpiSession::abort_job(int) {}
void MpiSession::barrier() {}

}  // namespace remat
