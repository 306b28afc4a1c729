// ONNX graph -> remat layers: the second way to declare a model (Note [ONNX import]). The
// importer translates each ONNX node of an export into a layer of an existing remat op (or
// folds it away, Note [ONNX constant folding] in onnx_const.h); everything after the layer list
// (the builder, autodiff, the solver, the plan, the executor) treats an imported model as a
// YAML one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/onnx/onnx_source.h"

namespace remat {

// Note [ONNX import]
// What torch.onnx.export writes is a graph of ONNX operators over named values, with the
// module's parameters as initializers under their state_dict names (training-mode exports;
// eval-mode exports fold batch norm into the convolutions and name the results onnx::Conv_N).
// The importer walks the nodes the single graph output needs, in the file's (topological) order:
//   - a node whose inputs are all constants is folded (Shape, Gather, Concat, arithmetic, ...);
//   - a node over data becomes one layer of a remat op whose result is the same (Conv -> conv2d,
//     Gemm -> dense, Clip(0, 6) -> relu6, GlobalAveragePool -> global_avgpool, ...), or an alias
//     where remat's value already is the result (a Flatten after the pooling, an Identity);
//   - the initializers a layer reads as weights become its parameters and buffers under their
//     ONNX names (LayerConfig::param_names), their values the model's initial values, so an
//     exported model trains from its weights and `export` writes them back under those names;
//   - anything else is an error naming the file, the node, its op type and the opset, with the
//     list of what is supported. Nothing half-built: the config is made only from a complete
//     translation.
// Layer names come from the parameters (conv1.weight -> layer conv1) or the node's scope
// (/layer1/layer1.0/relu/Relu -> layer1.0.relu.Relu), made unique.

// What an import is told: the input size to import at (the batch is never fixed: Note [ONNX
// constant folding]) and the initializers that are the module's buffers.
struct OnnxOptions {
  std::optional<Shape> input;        // per-sample float input ([C, H, W], [F], [T, F])
  std::optional<int64_t> sequence;   // T of a token model
  // Note [module buffers]: initializers the graph may compute constants from.
  std::set<std::string> buffers;
};

// Note [module buffers]
// ONNX holds a module's parameters and buffers alike, as initializers under their state_dict
// names, so a value the graph computes from one and meets the data with (the sinusoidal
// position encoding of PyTorch's transformer tutorial, `x + self.pe[:T]`) could be a parameter
// that a constant would freeze: the importer refuses it by name. `model: {onnx: FILE, buffers:
// [NAME, ...]}` says which initializers are buffers: the graph's constants may be computed from
// them, and `export` writes them back as the file holds them, so the weights still load into
// the module with strict=True. A name that is not an initializer of the file is an error.
struct OnnxBuffer {
  Shape dims;
  std::vector<float> values;
};

struct OnnxImport {
  std::vector<LayerConfig> layers;   // topological; the last one is the graph's output
  bool tokens = false;               // an integer input [N, T]
  Shape input;                       // float models: per-sample [C, H, W], [F] or [T, F]
  int64_t sequence = 0;              // token models: T
  Shape output;                      // the output's per-sample shape: [K], [K, H, W] or [T, V]
  std::optional<int64_t> static_batch;  // the export's batch, when it is not a dynamic axis
  // Initial values of the parameters and buffers, by name, in remat's layout.
  std::map<std::string, std::vector<float>> initial;
  // Parameters whose initializer dims differ from remat's by 1s: the initializer's dims.
  std::map<std::string, Shape> onnx_dims;
  // Buffers that hold a constant of the graph (Note [tensor constants]), not an initializer:
  // not part of PyTorch's state_dict, so `export` leaves them out.
  std::set<std::string> constants;
  // The buffers the options named (Note [module buffers]), as the file holds them.
  std::map<std::string, OnnxBuffer> buffers;
  int64_t onnx_nodes = 0;            // nodes in the file
  int64_t folded_nodes = 0;          // nodes folded away at import
};

// Translates `src` at `sizes`. Throws UserError naming the file and the node.
OnnxImport onnx_import(const OnnxSource& src, const OnnxOptions& sizes);

// The ONNX ops the importer reads, as an error lists them.
std::string onnx_supported_ops();

}  // namespace remat
