// The forward-graph builder's checks of a model config against the ops it names, each error at
// the config's position of what is wrong: layer ops, the layers' use, the loss's shape, the
// optimizer, shared parameters (weight tying). Used by build.cpp only.
#pragma once

#include <string>
#include <vector>

#include "models/config.h"
#include "runtime/core/check.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"

namespace remat::build_detail {

// "FILE:LINE:COL: layer 'NAME': ", the front of a layer's messages.
std::string layer_ctx(const std::string& where, const std::string& layer);

// Rethrows an op's message, keeping one that already starts with a position in the config
// (`source`) and putting `prefix` in front of others.
[[noreturn]] void rethrow_at(const UserError& e, const std::string& source,
                             const std::string& prefix);

// The op `name`, or an error at `prefix` with the nearest names.
const OpDef& get_op(const OpRegistry& ops, const std::string& name, const std::string& prefix);

// A layer's op must be a user-visible forward op (not a loss, an optimizer or an internal op).
void check_forward_op(const OpDef& op, const std::string& prefix);

// Every layer must lead to the last layer, which feeds the loss.
void check_all_used(const ModelConfig& cfg);

// The last layer's output `out` must fit the loss (batch n, tokens t of a token model).
void check_loss_shape(const ModelConfig& cfg, const LayerConfig& last, const TensorDesc& out,
                      int64_t n, int64_t t);

// The optimizer's op must update parameters and its keys parse.
void check_optimizer(const ModelConfig& cfg, const OpRegistry& ops);

// Every suffix a layer shares must be one of its op's parameters.
void check_shared_suffixes(const LayerConfig& l, const OpDef& op,
                           const std::vector<ParamSpec>& params);

// The earlier parameter `target` that layer `l` uses as its parameter `p` (weight tying).
ValueId shared_param(const Graph& g, const LayerConfig& l, const ParamSpec& p,
                     const std::string& target);

}  // namespace remat::build_detail
