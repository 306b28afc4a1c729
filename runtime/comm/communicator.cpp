// Blocking host-memory helpers over any Communicator.
#include "runtime/comm/communicator.h"

#include "runtime/core/check.h"

namespace remat {

std::vector<uint64_t> all_gather_u64(Communicator& c, uint64_t value) {
  REMAT_CHECK(c.memory() == DeviceKind::Cpu, "all_gather_u64 needs a host-memory communicator");
  std::vector<uint64_t> all(static_cast<size_t>(c.size()), 0);
  all[static_cast<size_t>(c.rank())] = value;
  c.all_gather_now(all.data(), sizeof(uint64_t));
  return all;
}

std::string broadcast_string(Communicator& c, const std::string& s, int root) {
  REMAT_CHECK(c.memory() == DeviceKind::Cpu, "broadcast_string needs a host-memory communicator");
  uint64_t n = c.rank() == root ? s.size() : 0;
  c.broadcast_now(&n, sizeof n, root);
  std::string out = c.rank() == root ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) c.broadcast_now(out.data(), static_cast<int64_t>(n), root);
  return out;
}

}  // namespace remat
