// Layer attributes given relative to a size the graph knows only while it is built: a pooling
// layer's `bins`, an upsample's `size_of` (Note [size-relative attributes]).
#pragma once

#include <map>
#include <string>

#include "models/channels_last.h"
#include "models/config.h"
#include "runtime/core/attrs.h"
#include "runtime/graph/graph.h"

namespace remat {

// Rewrites `attrs` (layer l's own, before its op parses them): `bins` of avgpool / maxpool
// becomes kernel = stride = the input's size / bins; `size_of` of upsample becomes the factor
// from the input's size to that of the layer l.size_of names. `values`: the layers built so far
// by full name, in `g`, laid out as `layouts` says. Errors name the layer, the field and both
// sizes.
void resolve_size_attrs(const LayerConfig& l, AttrMap& attrs, const Graph& g,
                        const ChannelsLastPlacer& layouts,
                        const std::map<std::string, ValueId>& values);

}  // namespace remat
