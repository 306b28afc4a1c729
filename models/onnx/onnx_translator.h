// Internal to models/onnx: the state of one translation (values known so far, layers emitted)
// and the op tables the walk dispatches on (onnx_fold_ops.cpp, onnx_layer_ops.cpp).
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "models/onnx/onnx_const.h"
#include "models/onnx/onnx_import.h"

namespace remat {
namespace onnx_detail {

// A value computed by the step: the model input or a layer's output. The batch is its first
// dimension, left out of both shapes. `sample` is ONNX's per-sample shape; `remat` the shape of
// the remat value standing for it, which differs only by trailing 1s that remat's op drops
// (GlobalAveragePool's [C, 1, 1] is global_avgpool's [C]).
struct DataValue {
  std::string layer;  // the layer computing it, or kModelInputName
  Shape sample;
  Shape remat;
  DType dtype = DType::F32;
  // remat's value holds the last two dimensions of `sample` swapped (k's heads [H, T, D] where
  // ONNX has k^T [H, D, T]): only a MatMul reads it, as transpose_b.
  bool transposed = false;
  // Non-empty: a value inside a pattern that remat does not compute (Note [multi-head
  // attention] in onnx_attention_patterns.cpp), its whole ONNX shape with the batch anywhere;
  // only Shape reads it.
  std::vector<SymInt> shape_only = {};
  // > 1: ONNX's first axis is fold x N (Note [folded batch]); `sample` and `remat` then begin
  // with `fold`.
  int64_t fold = 1;
  // ONNX's value is sequence-first, [T, N, ...] (Note [sequence-first values]).
  bool seq_first = false;
};

// Note [sequence-first values]
// nn.MultiheadAttention and nn.TransformerEncoderLayer take [T, N, C] unless batch_first, and
// models built on them transpose around the encoder (CLIP's x.permute(1, 0, 2), a GPT over
// nn.TransformerEncoder's default layout). remat's values keep the batch first, so Transpose(x,
// [1, 0, 2, ...]) of data is an alias whose value is remat's [N, T, ...] as before, marked
// seq_first: its ONNX axis 0 is `sample`'s axis 0, ONNX axis 1 the batch, ONNX axis a >= 2
// `sample`'s axis a - 1; `sample` is the per-sample shape as for any value, so its ONNX rank is
// sample's + 1. The same Transpose of a sequence-first value is the batch-first alias again.
// Token ids [T, N] (the first axis fixed, the batch open: PyTorch's transformer tutorial) are
// such a value from the start, remat's input [N, T] as for any token model. The
// ops that treat every position alike, or work along the last axis alone, give the same floats
// in either order and take such values (Translator::data's kSeqFirst; kSeqFirstRows where the
// op works along the last axis, which is the batch of the ids [T, N]): linear layers, layer
// norms, activations, dropout, softmax over the last axis, scalar arithmetic, sums and products
// of two sequence-first values, a mean over the last axes, nn.MultiheadAttention
// (onnx_token_ops.cpp), an embedding of the ids, a constant or learned table whose axis 1 is 1
// (batch_first_dims), Shape (onnx_shape: [T, N, ...]); their results are sequence-first too,
// and `emit` refuses to mix the two orders. Every other op refuses such an input by name, so no
// op reads axis 1 as a sample axis by mistake. The output may be either: remat's loss pairs
// each sample's positions with its own labels.

// Note [folded batch]
// Swin's window attention folds its windows into the batch: between the window partition and
// its reverse ONNX's values are [N nW, T, C]. remat's values keep the batch first, so such a
// value is remat's [N, nW, T, C], the same floats in the same order, with fold = nW: its ONNX
// axis a >= 1 is axis a of `sample` (a - 1 when unfolded), and its ONNX rank is sample's. A
// Reshape whose target's first dimension is m N (or -1 or 0 standing for one) makes fold m;
// the ops that work on rows (a linear layer, matmul, softmax over the last axis, arithmetic with
// a scalar, dropout, the relative position bias) carry the fold through; Transpose maps its perm
// past it. Every other op refuses a folded input by name (Translator::data), so no op reads the
// fold as a sample axis by mistake.
inline int64_t onnx_rank(const DataValue& v) {
  return static_cast<int64_t>(v.sample.size()) + (v.fold > 1 ? 0 : 1);
}

// A parameter or buffer a layer reads from an initializer: its op's suffix, the initializer's
// name and its values in remat's layout (empty: as the initializer holds them). With no
// initializer, a constant of the graph (Note [tensor constants]): the buffer
// "<layer>.<suffix>" holding `values`.
struct ParamUse {
  std::string suffix;
  std::string initializer;
  Shape expect;                       // the dims remat's op gives the parameter
  std::vector<float> values;          // set when the layout differs (a transposed weight)
};

// What an op takes besides batch-first data (Translator::data): kFolds, values folded with
// windows (Note [folded batch]); kSeqFirst, sequence-first values (Note [sequence-first
// values]); kSeqFirstRows, those whose last axis is not the batch (ONNX rank 3 and more), for
// an op along the last axis.
enum Takes : unsigned { kBatchFirst = 0, kFolds = 1, kSeqFirst = 2, kSeqFirstRows = 4 };

class Translator {
 public:
  Translator(const OnnxSource& src, OnnxImport* out);

  // The node being translated and its inputs. An absent optional input is "".
  const onnx::NodeProto& node() const { return *node_; }
  int inputs() const { return node_->input_size(); }
  bool has(int k) const { return k < node_->input_size() && !node_->input(k).empty(); }
  bool is_const(int k) const;
  const OnnxConst& konst(int k);       // folds an initializer on first use
  // UserError when input k is a constant or shape-only, or folded or sequence-first where the
  // caller does not take it (`takes`, a set of Takes).
  const DataValue& data(int k, unsigned takes = kBatchFirst) const;
  // Input k's whole ONNX shape, the batch N symbolic (a constant's, data's or a shape-only
  // value's).
  std::vector<SymInt> onnx_shape(int k);
  // Input k is an initializer, or a view of a module's tensor (Note [parameter views]).
  bool is_initializer(int k) const;
  // Input k is a module's tensor (an initializer under its state_dict name, not "onnx::...",
  // not a named buffer: Note [module buffers]), or a value folded from one: a parameter,
  // perhaps, which a constant would freeze.
  bool is_module_tensor(int k) const;
  Shape initializer_dims(int k) const;                   // input k's dims (an initializer)
  std::string initializer_name(int k) const;             // the initializer itself, for a view
  std::vector<float> transposed_initializer(int k) const;  // a 2-D initializer, transposed
  std::optional<int64_t> static_batch() const { return out_->static_batch; }

  // Attributes, with defaults.
  int64_t attr_int(const std::string& name, int64_t def) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> def) const;
  double attr_float(const std::string& name, double def) const;
  std::string attr_string(const std::string& name, const std::string& def) const;
  bool has_attr(const std::string& name) const;
  const onnx::AttributeProto* attr(const std::string& name) const;

  void set_const(int out, OnnxConst c);
  void set_data(int out, DataValue v);
  // Output `out` is a shape-only value of ONNX shape `dims` (DataValue::shape_only).
  void set_shape_only(int out, std::vector<SymInt> dims);
  // Makes output `out` the same value as `v` (an op remat does not need: Identity, Flatten of a
  // flat value).
  void alias(int out, const DataValue& v) { set_data(out, v); }
  // Emits one layer reading `inputs` (data values) with `params`, whose result (per sample) is
  // `sample` in ONNX and `remat` in remat, folded as its inputs are (Note [folded batch]) and
  // sequence-first as they are (Note [sequence-first values]); sets output `out` to it.
  const DataValue& emit(const std::string& op, const std::vector<DataValue>& inputs,
                        AttrMap attrs, std::vector<ParamUse> params, const Shape& sample,
                        const Shape& remat, DType dtype = DType::F32, int out = 0);
  // Output `out` is read by a node that counts or is the graph's output.
  bool used(int out) const;
  // Output `out` is read, as input 0, only by pattern nodes of op type `op` or `op2` (Note
  // [ONNX patterns]), and is not the graph's output.
  bool read_only_as_input0_by(int out, const std::string& op, const std::string& op2) const;
  // Output `out` is `joined` (its shape; no layer computes it), whose steps along T are the
  // values `steps` (Note [per-step sequences] in onnx_recurrent.cpp); steps(k) reads them.
  void set_steps(int out, const DataValue& joined, std::vector<DataValue> steps);
  // Input k as steps (set_steps): its shape and the steps; null for any other value.
  const std::pair<DataValue, std::vector<DataValue>>* steps(int k) const;
  // Output `out` is the graph's output.
  bool is_graph_output(int out) const;
  // The model's input is token ids.
  bool tokens_input() const { return out_->tokens; }
  // Marks output `out` as transposed (DataValue::transposed).
  void mark_transposed(int out);
  // Sets whether output `out` is sequence-first (Note [sequence-first values]), where it is not
  // the order its inputs had: an attention without its last Transpose, a mean over T.
  void mark_seq_first(int out, bool seq_first);
  // Outputs other than 0 must be unused (batch norm's running statistics, dropout's mask).
  void require_unused_outputs(int from);
  // "FILE: node 'NAME' (Conv, opset 13): "
  std::string where() const;
  [[noreturn]] void fail(const std::string& msg) const;

  // The walk (onnx_translator.cpp).
  void run(const OnnxOptions& sizes);

 private:
  void set_input(const OnnxOptions& sizes);
  std::vector<bool> live_nodes();  // also sets live_values_
  void translate(const onnx::NodeProto& n);
  void note_parameter_view();  // after a fold of a module's tensor (Note [parameter views])
  std::string layer_name(const std::vector<ParamUse>& params) const;
  void finish_output();

  const OnnxSource& src_;
  const onnx::GraphProto& g_;
  std::vector<onnx::NodeProto> nodes_;  // g_'s nodes after rewrite_patterns
  OnnxImport* out_;
  const onnx::NodeProto* node_ = nullptr;
  std::map<std::string, const onnx::TensorProto*> initializers_;
  std::map<std::string, OnnxConst> consts_;
  std::set<std::string> module_values_;  // folded from a module's tensor (is_module_tensor)
  std::map<std::string, std::string> param_views_;  // Note [parameter views]: -> initializer
  std::set<std::string> buffers_;        // initializers named buffers (Note [module buffers])
  std::map<std::string, DataValue> data_;
  std::map<std::string, std::pair<DataValue, std::vector<DataValue>>> steps_;  // set_steps
  std::set<std::string> live_values_;   // values some live node or the output reads
  std::set<std::string> layer_names_;
  std::map<std::string, std::string> param_owner_;  // initializer -> the parameter's full name
  std::string input_name_;
};

// Note [parameter views]
// PyTorch exports a module's weight used at another rank as a view of its initializer:
// nn.GroupNorm's weight [C] multiplies the image as Unsqueeze(weight, [1, 2]), [C, 1, 1]. Such a
// fold of a module's tensor by Unsqueeze, Squeeze, Reshape or Flatten that only adds or drops 1s
// (the same values in the same order) is taken wherever the initializer is (is_initializer,
// initializer_dims give the view's dims); a layer's ParamUse naming it names the initializer, so
// the parameter keeps its state_dict name and dims, and `export` writes it as the file holds it.
// Views of named buffers and of the exporter's "onnx::" constants stay constants.

// Note [ONNX patterns]
// A transformer's export spells out in several ONNX nodes what remat has as one op: nn.Linear
// is Transpose(W) + MatMul + Add(bias); split_heads is Reshape + Transpose [0, 2, 1, 3] (for k,
// [0, 2, 3, 1]: the transposed heads of q k^T); merge_heads is Transpose + Reshape; a scaled
// product is MatMul + Mul (or Div) by a constant; a causal softmax is Where(mask, -inf, s) +
// Softmax; GPT-2's gelu is nine nodes around a Tanh; a position embedding is Add(x, Gather(W,
// positions)); before opset 14, a hard swish is Mul(x, HardSigmoid(x)) (matched only with
// PyTorch's constants 1/6 and 1/2) and a SiLU Mul(x, Sigmoid(x)); nn.GELU() is Div(x, sqrt 2),
// Erf, Add(1), Mul(x), Mul(1/2); a ViT's class token is Expand + Concat; nn.MultiheadAttention is
// some twenty nodes that move the batch and fold the heads into it (Note [multi-head attention]
// in onnx_attention_patterns.cpp: two pattern nodes, three layers). rewrite_patterns
// (onnx_patterns.cpp) finds these groups by structure, each intermediate value read by the group
// alone (or, in the attention, by Shape nodes), and replaces each by one node of domain "remat"
// carrying its data and constant inputs; onnx_pattern_ops.cpp and onnx_token_ops.cpp then check
// the constants (the gelu's coefficients, a mask that is exactly causal, positions 0 .. T-1, a
// reshape into heads) and emit the layers, so the graph is the one the YAML spelling builds. A
// group whose constants do not match is an error naming one of its nodes.
std::vector<onnx::NodeProto> rewrite_patterns(const onnx::GraphProto& g);

using TranslateFn = std::function<void(Translator&)>;
// ONNX op type -> translator; the fold table runs when every input is a constant; the pattern
// table translates the nodes of domain "remat" (Note [ONNX patterns]).
const std::map<std::string, TranslateFn>& fold_ops();
const std::map<std::string, TranslateFn>& layer_ops();
const std::map<std::string, TranslateFn>& pattern_ops();
// `ops` with the ops that reshape, slice and split data (onnx_shape_ops.cpp).
std::map<std::string, TranslateFn> with_shape_ops(std::map<std::string, TranslateFn> ops);
// Reshape and Transpose of data as their translators write them (output 0 of the node; an
// alias where remat's value is the result already), for a pattern whose group turns out to be
// only these two (onnx_shape_ops.cpp).
// reshape_data's `to` and result keep x's fold unless `fold` says another (reshape_onnx).
DataValue reshape_data(Translator& t, const DataValue& x, const Shape& to, int64_t fold = 0);
DataValue transpose_data(Translator& t, const DataValue& x, std::vector<int64_t> perm);
// `ops` with the shape patterns' translators: Roll, PatchMerge, Unbind
// (onnx_shape_pattern_ops.cpp).
std::map<std::string, TranslateFn> with_shape_patterns(std::map<std::string, TranslateFn> ops);
// `ops` with nn.LSTM's layers unrolled (onnx_recurrent.cpp, Note [unrolled
// recurrent layers]).
std::map<std::string, TranslateFn> with_recurrent_patterns(std::map<std::string, TranslateFn> ops);
// `ops` with Einsum of two data tensors as a batched matmul (onnx_einsum.cpp).
std::map<std::string, TranslateFn> with_einsum(std::map<std::string, TranslateFn> ops);
// `ops` with ConvTranspose (onnx_conv_transpose.cpp).
std::map<std::string, TranslateFn> with_conv_transpose(std::map<std::string, TranslateFn> ops);
// A float attribute as the user wrote it in PyTorch: ONNX stores floats in 32 bits, so torch's
// momentum 0.1 arrives as 1 - 0.9f = 0.100000024 and eps 1e-5 as 9.99999975e-06 (the shortest
// decimal of 7 digits; onnx_layer_ops.cpp).
double short_float(double v);
// `ops` with Mul, Add, Sub, Div of data and a scalar constant, Neg and Reciprocal of data, each
// an affine or pow layer; other forms go to the op's translator in `ops` (onnx_scalar_ops.cpp).
std::map<std::string, TranslateFn> with_scalar_ops(std::map<std::string, TranslateFn> ops);
// x's reciprocal (a `pow` layer, exponent -1: FP32's correctly rounded 1 / x) and -x (an
// `affine` layer, scale -1), in x's layout (onnx_scalar_ops.cpp).
const DataValue& emit_reciprocal(Translator& t, const DataValue& x);
const DataValue& emit_negation(Translator& t, const DataValue& x);
// `ops` with Add, Sub, Mul and Div of data and a tensor constant, and Where of data with a
// constant mask and fill, add_constant and mul_table layers; other forms go to `ops`
// (onnx_constant_ops.cpp).
std::map<std::string, TranslateFn> with_constant_ops(std::map<std::string, TranslateFn> ops);
// The error for a module's tensor (Translator::is_module_tensor) meeting data where only a
// constant the export computed would do (onnx_constant_ops.cpp).
[[noreturn]] void fail_module_tensor(Translator& t, int k);
// x plus a constant table (add_constant) that is 0 where `mask` (a constant that broadcasts to
// x) is true and `fill` where it is false (the other way round unless keep_where_true); the fill
// of ONNX shape `fill_shape` may not widen x either (onnx_constant_ops.cpp).
const DataValue& emit_additive_mask(Translator& t, const DataValue& x, const OnnxConst& mask,
                                    const Shape& fill_shape, bool keep_where_true, double fill);
// The dims of a constant or parameter of ONNX dims `cs` beside sequence-first data of ONNX rank
// `rank` as they broadcast over remat's batch-first value (Note [sequence-first values]):
// right-aligned to the rank, its axis 1 (the batch) must be 1 and moves to the front; the same
// values in the same order (a position encoding [T, 1, C] of [T, N, C] becomes [1, T, C]). Dims
// that do not reach axis 1, or exceed the rank, are returned as they are (onnx_constant_ops.cpp).
Shape batch_first_dims(Translator& t, const Shape& cs, int64_t rank);
// `ops` with Add of a position table, Gather of a token (onnx_token_ops.cpp).
std::map<std::string, TranslateFn> with_token_ops(std::map<std::string, TranslateFn> ops);
// The role of a value inside a multi-head attention that a Shape node reads (AttentionShapes'
// "roles": Note [multi-head attention] in onnx_attention_patterns.cpp) and its ONNX shape:
// [T, N, C], [T, N, 3C], [T, N, C] (q, k or v), [T N, C].
enum AttentionShapeRole : int64_t { kTokensFirst = 0, kPacked = 1, kOneOfThree = 2, kProjection = 3 };
// `ops` with the vision transformer's patterns: AttentionShapes, MultiheadAttention, ClassToken
// (onnx_token_ops.cpp).
std::map<std::string, TranslateFn> with_attention_patterns(std::map<std::string, TranslateFn> ops);
// An nn.MultiheadAttention's attn_mask (pattern inputs 23, the scores' factor, and 24, the
// mask): none, PyTorch's causal mask, or another float mask [T, T] added to the scores; an
// error for any other (Note [attention masks] in onnx_attention_mask.cpp).
struct AttentionMask {
  enum Kind { kNone, kCausal, kAdditive } kind = kNone;
  std::vector<double> values;  // kAdditive: the mask [T, T]
};
AttentionMask attention_mask(Translator& t, int64_t tokens);
// The attention of `heads` heads over the packed projection qkv [T, 3C] under an additive mask,
// spelled out in remat's ops: the merged heads [T, C] (onnx_attention_mask.cpp).
DataValue emit_masked_attention(Translator& t, const DataValue& qkv, int64_t heads,
                                const AttentionMask& mask, double dropout);
// `ops` with the activations past Relu (onnx_activation_ops.cpp).
std::map<std::string, TranslateFn> with_activation_ops(std::map<std::string, TranslateFn> ops);
// `ops` with Mul, Div, Add and Sub of data by data of another shape or by a parameter, Sub of
// equal shapes, and ReduceMean over a run of axes; the image's ReduceMean over H and W, Add of
// equal shapes and what is neither go to `ops` (onnx_broadcast_ops.cpp).
std::map<std::string, TranslateFn> with_broadcast_ops(std::map<std::string, TranslateFn> ops);
// A learned `op` (mul_table, add_constant) of data x and parameter input w, the parameter under
// `suffix`: w's dims, leading 1s dropped, must be x's trailing axes (add_constant's may end in
// 1s that broadcast); otherwise the error of fail_parameter_shape (onnx_broadcast_ops.cpp).
const DataValue& emit_learned_table(Translator& t, const std::string& op,
                                    const std::string& suffix, int w, const DataValue& x,
                                    const std::string& what, const std::string& other_form);
// "<what> with a parameter [dims]: only <other_form> or a parameter of the data's trailing axes
// is supported, not <x> per sample", at the node.
[[noreturn]] void fail_parameter_shape(Translator& t, int w, const DataValue& x,
                                       const std::string& what, const std::string& other_form);
// Reshape's target `to` of a value of per-sample shape `from`: the per-sample result, or an
// error when the batch does not stay first (onnx_shape_ops.cpp).
Shape reshape_target(Translator& t, const Shape& from, const OnnxConst& to);
// ONNX's Reshape of data x to `to`, folds included (Note [folded batch]): the result as
// reshape_data writes it (onnx_shape_ops.cpp).
DataValue reshape_onnx(Translator& t, const DataValue& x, const OnnxConst& to);
// `x` as a remat value of its ONNX shape: x itself, or a reshape layer where remat's value drops
// 1s (global_avgpool's [C] of ONNX's [C, 1, 1], a mean over channels' [H, W] of [1, H, W])
// (onnx_shape_ops.cpp).
DataValue as_sample_shape(Translator& t, const DataValue& x);
// MatMul of two data tensors (remat's matmul; onnx_pattern_ops.cpp).
void matmul_of_data(Translator& t);
// layernorm over x's last `axes` axes with the initializers of inputs `scale` and `bias` (of
// those axes' dims each) (onnx_norm_ops.cpp).
void emit_layernorm(Translator& t, const DataValue& x, int scale, int bias, double eps,
                    int64_t axes = 1);
// `ops` with Conv, MaxPool, AveragePool, GlobalAveragePool, BatchNormalization and Pad of images
// and signals (onnx_window_ops.cpp, Note [signals]).
std::map<std::string, TranslateFn> with_window_ops(std::map<std::string, TranslateFn> ops);
// The data input as an image [C, H, W] per sample, remat's value of the same shape (reshaped
// where remat's drops trailing 1s: a convolution of pooled [C, 1, 1]); else an error
// (onnx_window_ops.cpp).
DataValue image_input(Translator& t);
// A window op's data input as an image [C, H, W] per sample (x.sample); a signal [C, L] as the
// image [C, 1, L] (Note [signals]), with `signal` set (onnx_window_ops.cpp).
struct Spatial {
  DataValue x;
  bool signal = false;
};
Spatial spatial_input(Translator& t);
// Emits `op` of a window input; `out` its result as an image [C', H', W'], which for a signal is
// the signal [C', W'] held as the image (onnx_window_ops.cpp).
void emit_spatial(Translator& t, const std::string& op, const Spatial& in, AttrMap attrs,
                  std::vector<ParamUse> params, const Shape& out);
// Input k's dims when it is an initializer (a weight), else an error (onnx_layer_ops.cpp).
Shape weight_dims(Translator& t, int k, const std::string& what);
// `ops` with Resize of images and signals (onnx_resize.cpp).
std::map<std::string, TranslateFn> with_resize_ops(std::map<std::string, TranslateFn> ops);
// `ops` with DepthToSpace and SpaceToDepth (onnx_depth_ops.cpp).
std::map<std::string, TranslateFn> with_depth_ops(std::map<std::string, TranslateFn> ops);
// The GroupNorm pattern (x, the grouped shape [N, G, -1], scale, bias, the shape back):
// layernorm with groups (Note [instance normalization] in onnx_norm_ops.cpp).
void group_norm_pattern(Translator& t);
// `ops` with LayerNormalization and InstanceNormalization (onnx_norm_ops.cpp).
std::map<std::string, TranslateFn> with_norm_ops(std::map<std::string, TranslateFn> ops);

}  // namespace onnx_detail
}  // namespace remat
