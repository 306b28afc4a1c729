// PLACEHOLDER: adam op(s) — being written.
#include "ops/registry.h"

namespace remat {
void register_adam_ops(OpRegistry&) {}
}  // namespace remat
