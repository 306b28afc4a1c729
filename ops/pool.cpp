// PLACEHOLDER: pool op(s) — being written.
#include "ops/registry.h"

namespace remat {
void register_pool_ops(OpRegistry&) {}
}  // namespace remat
