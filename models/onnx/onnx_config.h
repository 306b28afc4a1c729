// An imported model's config: the layers, sizes, classes and initial values of an ONNX file
// translated at an input size (Note [ONNX import] in onnx_import.h).
#pragma once

#include "models/config.h"
#include "models/onnx/onnx_import.h"

namespace remat {

// What a config needs of an import beyond its layers.
struct OnnxApplied {
  Shape output;                          // per sample: [K], [K, H, W] or [T, V]
  std::optional<int64_t> static_batch;   // the export's batch, when not a dynamic axis
};

// Translates cfg.onnx at `sizes` (the config's own sizes where unset) into cfg: layers, input or
// sequence, classes or vocab, initial values. UserError naming the file and node.
OnnxApplied onnx_apply(ModelConfig& cfg, const OnnxOptions& sizes);

// Note [ONNX default config]
// `--onnx FILE` on the tools, or a --config naming a .onnx file, reads the model with this
// config: `name` the file's stem, `model: {onnx: FILE}`, and every other key at its default:
// softmax cross-entropy on the single output (per sample, per pixel or per token, by its
// shape), sgd with lr 0.01, synthetic data. The batch, input size and sequence length come from
// --batch, --input and --seq (the tools pass them as overrides), else from the export's static
// sizes; any other key can be set as KEY=VALUE (optimizer.lr=0.1, precision=bf16, ...).
std::string onnx_default_config(const std::string& path);

// The loss softmax cross-entropy takes for an output of this per-sample shape: softmax_xent
// for [K], softmax_xent_pixel for [K, H, W], token_xent for [T, V]; "" for any other.
std::string onnx_default_loss(const Shape& output, bool tokens);

}  // namespace remat
