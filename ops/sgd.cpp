// PLACEHOLDER: sgd op(s) — being written.
#include "ops/registry.h"

namespace remat {
void register_sgd_ops(OpRegistry&) {}
}  // namespace remat
