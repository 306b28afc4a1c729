// ModelConfig -> forward Graph: input and label values, one Forward node per layer (with its
// parameters as persistent values), then the loss node. Op checks are reported at the layer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/config.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/op.h"

namespace remat {

struct BuildOptions {
  std::optional<int64_t> batch;     // overrides cfg.batch (N)
  std::optional<Shape> input;       // overrides cfg.input (per-sample [C, H, W]; image models)
  std::optional<int64_t> sequence;  // overrides cfg.sequence (T; token models)
  std::optional<DType> precision;   // overrides cfg.precision (F32 or BF16; --precision)
};

// Parses "3x32x32" (or "3,32,32") into [C, H, W]; throws UserError naming `what`.
Shape parse_input_size(const std::string& text, const std::string& what = "--input");

// Builds the forward graph:
//   value "input"  (Input, F32 [N, C, H, W], BF16 where a bf16 model reads it only in bf16
//   (Note [bf16 input batch] in build.cpp); token models I32 [N, T]), value "labels" (Label,
//   I32 [N], [N, H, W] or [N, T]);
//   per layer: in a bf16 model or a layer with `precision`, "cast" nodes where the layer needs
//   its float inputs in another dtype (Note [bf16 autocast] in build.cpp), named
//   "<input>.to_bf16" / "<input>.to_f32" and shared by every layer that needs the same cast;
//   node "<layer>" (Forward) with inputs = data inputs then its parameters
//   "<layer>.<suffix>" (Param/Buffer values from op.params; a suffix the layer `share`s is the
//   earlier parameter it names, which must have the same descriptor and be trainable), typed
//   attrs from op.parse and seed = node_seed(cfg.seed, layer) (none for a relu layer fused
//   into the batchnorm before it under `fuse: batchnorm_relu`: Note [batchnorm + relu fusion]);
//   node "loss" (op cfg.loss with cfg.loss_attrs, Loss) reading [last layer, labels], output
//   F32 [1].
// Also parses the optimizer section through its op so its errors surface here.
// Sets graph.name/batch/input/label/loss and validates the graph.
Graph build_forward_graph(const ModelConfig& cfg, const OpRegistry& ops,
                          const BuildOptions& opt = {});

// Labels descriptor for a loss and the last layer's output: I32 [N], [N, H, W] (per pixel) or
// [N, T] (token_xent).
TensorDesc labels_desc_for(const std::string& loss, const TensorDesc& last_output);

// Deterministic per-node seed: splitmix64 mixing of the model seed and an FNV-1a hash of the
// node name, so seeds do not change when layers are added elsewhere.
uint64_t node_seed(uint64_t model_seed, const std::string& node_name);

}  // namespace remat
