// PLACEHOLDER: dense op(s) — being written.
#include "ops/registry.h"

namespace remat {
void register_dense_ops(OpRegistry&) {}
}  // namespace remat
