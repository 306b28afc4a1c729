// Small helpers shared by the op files: attribute-less ops, input checks with user-facing
// messages, and byte counts for OpCost.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/graph/op.h"

namespace remat {

// Typed attrs of an op that takes none (relu, add, flatten, relu_grad, ...).
struct EmptyAttrs : OpAttrs {};

inline OpAttrsPtr parse_no_attrs(AttrReader& r, const std::string& op_name) {
  r.finish(op_name);
  return std::make_shared<EmptyAttrs>();
}

// The dtype inputs [0, count) share, F32 or BF16 (Note [bf16 execution] in
// runtime/backends/bf16_staging.h); the output of most ops has it. Throws "<op> expects float
// inputs of one dtype, input 1 is i32 [..]" otherwise. Inputs past `count` (F32 parameters of
// backward ops) are not checked.
inline DType require_float(const std::string& op_name, const std::vector<TensorDesc>& in,
                           size_t count = SIZE_MAX) {
  count = std::min(count, in.size());
  REMAT_CHECK(count > 0, op_name << " has no input to take a dtype from");
  const DType t = in[0].dtype;
  for (size_t i = 0; i < count; ++i)
    if (!dtype_is_float(in[i].dtype) || in[i].dtype != t)
      REMAT_USER_ERROR(op_name << " expects float inputs (f32 or bf16) of one dtype, input " << i
                               << " is " << dtype_name(in[i].dtype) << " "
                               << shape_str(in[i].shape)
                               << (i > 0 ? std::string(" and input 0 ") + dtype_name(t) : ""));
  return t;
}

// Marks `op` as running in bf16 (Note [bf16 execution]): its kernels compute in FP32 and the
// backend stages BF16 data for them unless they are native. Returns op for chaining.
inline OpDef& with_bf16(OpDef& op) {
  op.bf16 = true;
  return op;
}
// with_bf16, and per sample in its first `batched` inputs (-1: all; OpDef::bf16_batched_inputs).
inline OpDef& with_bf16_per_sample(OpDef& op, int batched) {
  op.bf16_batched_inputs = batched;
  return with_bf16(op);
}

// a * b for non-negative sizes, or a UserError naming `what` when the product overflows int64
// (shapes come from YAML and command-line overrides, and attention squares the sequence).
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  if (a != 0 && b > INT64_MAX / a)
    REMAT_USER_ERROR(what << ": " << a << " x " << b << " overflows 64-bit sizes");
  return a * b;
}

// A descriptor whose element and byte counts are checked against overflow.
inline TensorDesc checked_desc(Shape s, DType t, const std::string& what) {
  int64_t n = dtype_size(t);
  for (int64_t d : s) n = checked_mul(n, d, what + " " + shape_str(s));
  return TensorDesc{std::move(s), t};
}

// Bytes read (all inputs) plus bytes written (the output).
inline int64_t io_bytes(const std::vector<TensorDesc>& in, const TensorDesc& out) {
  int64_t b = out.bytes();
  for (const auto& d : in) b = checked_add(b, d.bytes(), "", "bytes_moved");
  return b;
}

// Cost of an elementwise op doing `flops_per_elem` flops per output element.
inline OpCost elementwise_cost(const std::vector<TensorDesc>& in, const TensorDesc& out,
                               double flops_per_elem) {
  OpCost c;
  c.flops = flops_per_elem * static_cast<double>(out.numel());
  c.bytes_moved = io_bytes(in, out);
  return c;
}

}  // namespace remat
