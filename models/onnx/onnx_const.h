// Constant tensors of an ONNX graph as the importer folds them (Note [ONNX constant folding]):
// the values of Constant nodes and initializers, and of the shape arithmetic that
// torch.onnx.export writes around Reshape and friends (Shape, Gather, Unsqueeze, Concat, Cast,
// arithmetic), computed once at import so that no such node reaches the training graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"

namespace onnx {
class TensorProto;
}

namespace remat {

// Note [ONNX constant folding]
// The importer evaluates every node whose inputs are all known before the step runs. Most such
// values are plain numbers, except one: the batch N, which the export leaves open (a dynamic
// axis) and which remat sets per run (--batch, and every probe of maxbatch). So an integer
// element is kept as n * N + c (SymInt): Shape(x)[0] is N, Concat([N], [-1]) is [N, -1], a
// product with a constant stays affine, and an Equal of n N + c and a value it takes for no
// N >= 1 is false (torch's expand(-1) tests the size against -1). A Reshape whose target is
// [N, ...] then keeps the batch whatever N is, and the import does not depend on the batch. What cannot stay affine (N * N,
// N / 3, a float of N, a tensor whose shape holds N) is a clear error naming the node: a shape
// that depends on data in a way a static plan cannot hold. Every other dimension is a number at
// import: the input's spatial size or sequence length is fixed first (the export's, the config's
// `input` / `sequence`, or --input / --seq).
struct SymInt {
  int64_t n = 0;  // coefficient of the batch N
  int64_t c = 0;  // constant part
  bool is_const() const { return n == 0; }
  bool operator==(const SymInt& o) const { return n == o.n && c == o.c; }
};
std::string sym_str(const SymInt& v);  // "3", "N", "2N+1"

struct OnnxConst {
  bool is_float = true;
  Shape shape;              // concrete dimensions ([] for a scalar)
  std::vector<double> f;    // float values (is_float)
  std::vector<SymInt> i;    // integer and boolean values (!is_float)

  int64_t numel() const { return shape_numel(shape); }
  bool is_symbolic() const;                  // an integer element depends on N
  std::vector<int64_t> ints(const std::string& what) const;  // plain integers, or UserError
  double scalar(const std::string& what) const;              // a one-element float or int
};

OnnxConst const_ints(const std::vector<SymInt>& v, Shape shape);  // shape {} -> [size]
OnnxConst const_floats(std::vector<double> v, Shape shape);

// Bytes of one element of an ONNX data type (TensorProto::DataType); 0 for types the importer
// does not read. And whether the type is a floating-point one.
size_t onnx_element_bytes(int onnx_type);
bool onnx_is_float_type(int onnx_type);

// An initializer or a Constant node's `value`; `what` names it in errors (the bytes disagreeing
// with the dims, an unsupported data type, external data).
OnnxConst const_from_proto(const onnx::TensorProto& t, const std::string& what);
// The float values of an initializer without widening a copy (the weights of a 100 MB model).
std::vector<float> floats_from_proto(const onnx::TensorProto& t, const std::string& what);

// Folding, numpy semantics where ONNX has them; each throws UserError starting with `what`.
// ONNX's binary ops by name: Add, Sub, Mul, Div, Pow, Equal, Less, Greater, And, Or, Max, Min.
OnnxConst fold_binary(const std::string& op, const OnnxConst& a, const OnnxConst& b,
                      const std::string& what);
// Unary ops by name: Neg, Sqrt, Abs, Not, Reciprocal, Floor, Ceil, Exp, Log, Identity.
OnnxConst fold_unary(const std::string& op, const OnnxConst& a, const std::string& what);
OnnxConst fold_where(const OnnxConst& cond, const OnnxConst& a, const OnnxConst& b,
                     const std::string& what);
OnnxConst fold_cast(const OnnxConst& a, int onnx_type, const std::string& what);
OnnxConst fold_gather(const OnnxConst& data, const OnnxConst& idx, int64_t axis,
                      const std::string& what);
OnnxConst fold_concat(const std::vector<const OnnxConst*>& in, int64_t axis,
                      const std::string& what);
// ScatterND(data, indices [.., k], updates): data with each slice data[indices[..]] replaced by
// the matching slice of updates (onnx_const_scatter.cpp; Swin's shifted-window mask writes its
// region ids this way).
OnnxConst fold_scatter_nd(const OnnxConst& data, const OnnxConst& indices, const OnnxConst& updates,
                          const std::string& what);
OnnxConst fold_unsqueeze(const OnnxConst& a, const std::vector<int64_t>& axes,
                         const std::string& what);
OnnxConst fold_squeeze(const OnnxConst& a, const std::vector<int64_t>& axes,
                       const std::string& what);
OnnxConst fold_reshape(const OnnxConst& a, Shape to, const std::string& what);
OnnxConst fold_slice(const OnnxConst& a, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                     const std::vector<int64_t>& steps, const std::string& what);
OnnxConst fold_range(const OnnxConst& start, const OnnxConst& limit, const OnnxConst& delta,
                     const std::string& what);
OnnxConst fold_transpose(const OnnxConst& a, const std::vector<int64_t>& perm,
                         const std::string& what);
// ConstantOfShape: `shape` plain integers, filled with `value` (a one-element tensor).
OnnxConst fold_constant_of_shape(const OnnxConst& shape, const OnnxConst& value,
                                 const std::string& what);

// An axis in [-rank, rank) made non-negative, or UserError.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what);
// numpy broadcasting of two shapes, or UserError.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what);

}  // namespace remat
