// The initial values a model file supplies (an imported model's weights, Note [ONNX import] in
// models/onnx/onnx_import.h), written over the init rules' values before the first step.
#pragma once

#include "models/config.h"
#include "runtime/executor.h"

namespace remat {

// Writes cfg.initial_values (if any) into ex's parameters and buffers of those names; returns
// how many values it wrote. A name the graph lacks or a size that differs is an internal error.
int write_initial_values(Executor& ex, const ModelConfig& cfg);

}  // namespace remat
