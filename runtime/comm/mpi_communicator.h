// The MPI communicator (host memory) behind MpiSession::make_communicator. Included only by
// translation units built with MPI.
#pragma once

#include <memory>

#include "runtime/comm/communicator.h"

namespace remat {

// A communicator over every rank of MPI_COMM_WORLD, on a duplicate of it (errors return
// instead of aborting, and become remat::Error naming the call).
std::unique_ptr<Communicator> make_mpi_communicator_over_world();

// Throws remat::Error "MPI_Xxx failed: <MPI's error string>" when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* call);

}  // namespace remat
