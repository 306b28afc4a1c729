// The op interface: an op is a plain struct of functions (shape inference, parameters, cost,
// CPU reference, CUDA path, gradient rule). ops/ defines every op; make_builtin_registry()
// (ops/registry.h) lists them all. runtime/ knows this interface but no particular op.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/attrs.h"
#include "runtime/graph/graph.h"
#include "runtime/core/tensor.h"

namespace remat {

class Communicator;

// A persistent value an op needs next to its data inputs (conv weight, bn running mean, ...).
// Named "<layer>.<suffix>"; appended to the node's inputs after the data inputs, in order.
struct ParamSpec {
  std::string suffix;                 // "weight", "bias", "running_mean", ...
  TensorDesc desc;
  ValueKind kind = ValueKind::Param;  // Param (trainable) or Buffer
  InitKind init = InitKind::Zeros;
  int64_t fan_in = 0, fan_out = 0;
  ParamRole role = ParamRole::Weight;
  double init_std = 0;                // InitKind::Normal
  bool constant = false;  // a Buffer the step never writes: a model's constant table or map
};

// The persistent value of parameter `p` of the layer named `owner` ("<owner>.<suffix>").
inline Value param_value(const std::string& owner, const ParamSpec& p) {
  Value v;
  v.name = owner + "." + p.suffix;
  v.desc = p.desc;
  v.kind = p.kind;
  v.init = p.init;
  v.fan_in = p.fan_in;
  v.fan_out = p.fan_out;
  v.init_std = p.init_std;
  v.role = p.role;
  v.constant = p.constant;
  return v;
}

struct OpCost {
  double flops = 0;             // floating point operations of one run
  int64_t bytes_moved = 0;      // bytes read + written (memory traffic estimate)
  int64_t workspace_bytes = 0;  // scratch the CPU path needs while running
};

// Everything one kernel call sees. Inputs follow node.inputs; output is node.output.
struct ExecContext {
  const Node* node = nullptr;
  std::vector<TensorView> inputs;
  TensorView output;
  void* workspace = nullptr;    // at least the op's workspace bytes, from the backend's pool
  int64_t workspace_bytes = 0;
  int64_t step = 0;             // 0-based training step (Adam bias correction, dropout masks)
  bool first_compute = true;    // false when the node is being recomputed within a step
  void* device = nullptr;       // backend-specific state (CudaContext* on the CUDA backend)
  // Data parallel: collectives inside an op (batch-norm statistics over the global batch), in
  // the backend's memory; null for one process. The global index of this rank's first
  // sample (dropout masks are those of the global batch).
  Communicator* comm = nullptr;
  int64_t batch_offset = 0;
  // Gradient accumulation (Note [gradient accumulation] in runtime/graph/accumulate.h): this
  // micro-batch's index in the step, of micro_batches.
  int micro_batch = 0;
  int micro_batches = 1;
};

using KernelFn = std::function<void(const ExecContext&)>;

// Emits backward nodes for a gradient rule. Emitted nodes are Backward nodes named
// "<forward name>.<suffix>", sharing the forward node's attrs unless given their own.
class GradEmitter {
 public:
  virtual ~GradEmitter() = default;
  virtual ValueId emit(const std::string& suffix, const std::string& op,
                       std::vector<ValueId> inputs, const TensorDesc& out) = 0;
  virtual ValueId emit(const std::string& suffix, const std::string& op,
                       std::vector<ValueId> inputs, const TensorDesc& out, AttrMap attrs,
                       OpAttrsPtr typed) = 0;
  virtual const Graph& graph() const = 0;
};

// Returns one gradient per input of `fwd` (kNoValue where none flows: labels, buffers), given
// the gradient `dy` of its output (kNoValue for the loss node, whose output gradient is 1).
using GradientFn =
    std::function<std::vector<ValueId>(GradEmitter& g, const Node& fwd, ValueId dy)>;

struct OpDef {
  std::string name;
  std::string summary;              // one line, for --help and error lists
  bool user_visible = true;         // false for ops only autodiff emits (conv2d_grad_input)
  int min_inputs = 1;               // data inputs (parameters excluded)
  int max_inputs = 1;               // -1: unbounded
  NodeKind kind = NodeKind::Forward;  // Loss for loss ops, Update for optimizer ops

  // Attributes -> typed struct; validates values. Must call reader.finish(name).
  std::function<OpAttrsPtr(AttrReader&)> parse;
  // Output descriptor from data inputs; throws UserError describing the mismatch.
  std::function<TensorDesc(const OpAttrs&, const std::vector<TensorDesc>& data_inputs)> infer;
  // Parameters and buffers this op owns (may be empty function).
  std::function<std::vector<ParamSpec>(const OpAttrs&, const std::vector<TensorDesc>&)> params;
  // Cost of one run, given all inputs (params included) and the output.
  std::function<OpCost(const OpAttrs&, const std::vector<TensorDesc>& inputs,
                       const TensorDesc& out)> cost;
  KernelFn cpu;                     // CPU reference (always present)
  KernelFn cuda;                    // CUDA path (empty when built without CUDA)
  // CUDA workspace bytes for ctx's shapes (ctx.device set, data pointers may be null); may
  // choose and cache an algorithm. Empty: the CUDA path needs no workspace.
  std::function<int64_t(const ExecContext&)> cuda_workspace;
  GradientFn gradient;              // empty: not differentiable

  // bf16 (Note [bf16 execution] in runtime/backends/bf16_staging.h).
  // `bf16`: the op takes BF16 data. Its kernels see FP32 unless they handle BF16 themselves
  // (bf16_cpu_native, bf16_cuda_native): the backend widens BF16 inputs into FP32 workspace,
  // runs the kernel and rounds the output back, counting those bytes as the node's workspace.
  bool bf16 = false;
  bool bf16_cpu_native = false;
  bool bf16_cuda_native = false;
  // F32 inputs a node running in bf16 reads rounded to bf16: the weights of GEMM-like ops, as a
  // bf16 GEMM sees them (no persistent bf16 copy of the weights exists).
  std::vector<int> bf16_operands;
  // An F32 output of a node running in bf16 is rounded to bf16 too (weight gradients: cuDNN's
  // bf16 convolutions produce them in bf16, and dense follows so that both agree).
  bool bf16_rounds_output = false;
  // In a bf16 model the builder casts this op's F32 data inputs to BF16 (conv2d, dense, matmul:
  // PyTorch autocast's lower-precision list); other ops run in the dtype of their inputs.
  bool autocast_bf16 = false;
  // The op is independent per sample: inputs [0, k) (k = -1: all) and the output have the batch
  // first, and sample i of the output depends only on sample i of those inputs (and on the other
  // inputs whole), computed the same way at any batch size. A backend that stages the op for bf16
  // then stages one sample at a time, so the staging is 1/N of the tensors. 0: not per sample.
  int bf16_batched_inputs = 0;
  // Channels-last layout (Note [channels-last layout] in models/channels_last.cpp).
  // `channels_last`: whether this node, given its attributes and its data inputs as NCHW, has
  // a channels-last form (the builder then gives it NHWC inputs and sets its attribute
  // data_format: channels_last, which its backward ops inherit); empty: NCHW only.
  // `layout_agnostic`: an elementwise op whose output has its inputs' layout (relu, add,
  // dropout, gelu, cast).
  std::function<bool(const OpAttrs&, const std::vector<TensorDesc>&)> channels_last;
  bool layout_agnostic = false;
  // Optimizer ops only: suffixes of per-parameter state values ("momentum"; "adam_m", ...).
  std::function<std::vector<std::string>(const OpAttrs&)> optimizer_state;
  // Optimizer ops only, optional: the attrs of one parameter's update node, from the
  // optimizer's attrs as written (AdamW sets weight_decay 0 for exempt roles). Empty: as written.
  std::function<AttrMap(const OpAttrs&, const AttrMap&, const Value& param)> optimizer_param_attrs;
  // Optimizer ops only, optional: the global gradient norm to clip to before the updates (0:
  // no clipping). make_training_graph then emits one clip_grad_norm node.
  std::function<double(const OpAttrs&)> optimizer_clip_norm;
  // Optional: the exclusive upper bound of the values I32 input `index` holds (token ids below
  // the vocabulary, labels below the classes), for tools that fill inputs with valid values.
  std::function<int64_t(const OpAttrs&, const std::vector<TensorDesc>& inputs, int index)>
      index_bound;
};

class OpRegistry {
 public:
  // Throws if an op of that name is already registered.
  void add(OpDef op);
  bool has(const std::string& name) const { return ops_.count(name) > 0; }
  // Throws UserError "unknown op 'x' (known: a, b, ...)" listing user-visible ops.
  const OpDef& get(const std::string& name) const;
  std::vector<std::string> names(bool user_visible_only) const;

 private:
  std::map<std::string, OpDef> ops_;
};

// Convenience for ops: typed attrs of a node.
template <typename T>
const T& attrs_of(const Node& n) {
  return static_cast<const T&>(*n.typed);
}

}  // namespace remat
