// What other ops' gradients borrow from concat: taking a channel range out of a gradient.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/graph/op.h"

namespace remat {

// Emits a concat_slice node (suffix `suffix`) reading channels [offset, offset + out's
// channels) of `from` (dim `axis` of [N, C, ...], or dim 3 of channels-last [N, H, W, C]) as a
// value described by `out`; `origin` names the config line in errors. Returns the new value.
ValueId emit_concat_slice(GradEmitter& g, const std::string& suffix, ValueId from, int64_t offset,
                          const TensorDesc& out, const std::string& origin,
                          bool channels_last = false, int64_t axis = 1);

}  // namespace remat
