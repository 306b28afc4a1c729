// launched_as_mpi_job() and MpiSession::label(): what the environment and the session say,
// the same in builds with and without MPI.
#include <cstdlib>
#include <string>

#include "runtime/comm/mpi_session.h"

namespace remat {

bool launched_as_mpi_job(int* world_size_hint) {
  // World-size variables of the launchers in use: OpenMPI, MPICH/Intel MPI (Hydra, Slurm's
  // PMI), MVAPICH. PMIx alone (srun --mpi=pmix) names the rank but not the size.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    if (const char* v = std::getenv(var)) {
      if (world_size_hint) *world_size_hint = std::atoi(v);
      return true;
    }
  }
  if (std::getenv("PMIX_RANK")) {
    if (world_size_hint) *world_size_hint = 0;  // unknown
    return true;
  }
  return false;
}

std::string MpiSession::label() const {
  if (size_ <= 1) return "";
  std::string s = "rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  if (!host_.empty()) s += " (" + host_ + ")";
  return s;
}

}  // namespace remat
