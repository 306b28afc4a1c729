// PLACEHOLDER: activation op(s) — being written.
#include "ops/registry.h"

namespace remat {
void register_activation_ops(OpRegistry&) {}
}  // namespace remat
