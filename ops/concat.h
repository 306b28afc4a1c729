// What other ops' gradients borrow from concat: taking a channel range out of a gradient.
#pragma once

#include <string>

#include "runtime/graph/op.h"

namespace remat {

// Emits a concat_slice node (suffix `suffix`) reading channels [offset, offset + out.shape[1])
// of `from` (dim 1 of [N, C, ...]) as a value described by `out`; `origin` names the config
// line in errors. Returns the new value.
ValueId emit_concat_slice(GradEmitter& g, const std::string& suffix, ValueId from, int64_t offset,
                          const TensorDesc& out, const std::string& origin);

}  // namespace remat
