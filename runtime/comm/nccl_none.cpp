// make_nccl_communicator for builds without NCCL: says why there is none.
#include "runtime/comm/communicator.h"

namespace remat {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Backend&, Communicator*, std::string* why) {
  if (why) *why = "this build has no NCCL (nccl.h and libnccl were not found with CUDA)";
  return nullptr;
}

}  // namespace remat
