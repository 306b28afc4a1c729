// PLACEHOLDER: dropout op(s) — being written.
#include "ops/registry.h"

namespace remat {
void register_dropout_ops(OpRegistry&) {}
}  // namespace remat
