// Layer attributes given relative to a size the graph knows only while it is built: a pooling
// layer's `bins`, an upsample's `size_of` (Note [size-relative attributes]).
#pragma once

#include <cstdint>
#include <optional>

#include "models/config.h"
#include "runtime/core/attrs.h"

namespace remat {

// Height and width of a 4-D image value, whatever its layout; `image` false for other values.
struct ImageSize {
  bool image = false;
  int64_t h = 0, w = 0;
};

// Rewrites `attrs` (the layer's own, before its op parses them): `bins` of avgpool / maxpool
// becomes kernel = stride = the input's size / bins; `size_of` of upsample becomes the factor
// from the input's size to `target`'s (the layer l.size_of names). Errors name the layer, the
// field and both sizes.
void resolve_size_attrs(const LayerConfig& l, AttrMap& attrs, const ImageSize& input,
                        const std::optional<ImageSize>& target);

}  // namespace remat
