// Config overrides (`train --config c.yaml optimizer.lr=0.01 layers.conv1.filters=32`): edits of
// the YAML tree made before it is validated (Note [config overrides] in config_overrides.cpp).
// Internal to models/: config.cpp applies them and positions their errors.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

#include "models/config.h"

namespace remat {

// Nodes an override set (keys, values and everything inside a value), with the position errors
// about them quote: "override 'batch=64'".
using OverrideMarks = std::vector<std::pair<YAML::Node, std::string>>;

// Applies one "KEY=VALUE" to the map `root`, recording the nodes it set in `marks` and what it
// changed in `effect`. UserError naming the override for a malformed one, a path that does not
// exist (with a did-you-mean), a whole layer, or a VALUE that is not YAML.
void config_apply_override(YAML::Node root, const std::string& text, OverrideMarks* marks,
                           ConfigOverride* effect);

}  // namespace remat
