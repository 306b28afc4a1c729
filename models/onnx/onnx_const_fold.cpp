// Folding constant subgraphs at import (Note [ONNX constant folding] in onnx_const.h): axes,
// broadcasting, and the arithmetic, comparisons, casts and shape ops on constants, the batch
// kept symbolic.
#include "models/onnx/onnx_const.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "runtime/core/check.h"

namespace remat {

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what) {
  if (axis < -rank || axis >= rank)
    REMAT_USER_ERROR(what << ": axis " << axis << " is out of range for rank " << rank);
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k + a.size() >= r ? a[k + a.size() - r] : 1;
    const int64_t db = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1)
      REMAT_USER_ERROR(what << ": shapes " << shape_str(a) << " and " << shape_str(b)
                            << " do not broadcast");
    out[k] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// The most elements a folded constant may hold: shape arithmetic and masks are small; a constant
// this large would be data the step should compute.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 26;

// The elements of a folded result of shape `s`, or UserError when out of range or too many.
int64_t folded_numel(const Shape& s, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0 || (d > 0 && n > kMaxFoldedElements / d))
      REMAT_USER_ERROR(what << ": a folded constant of shape " << shape_str(s)
                            << " (more than " << kMaxFoldedElements << " values)");
    n *= d;
  }
  return n;
}

int64_t add_or_fail(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) REMAT_USER_ERROR(what << ": integer overflow in " << a << " + " << b);
  return r;
}

int64_t mul_or_fail(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) REMAT_USER_ERROR(what << ": integer overflow in " << a << " * " << b);
  return r;
}

// A float as an integer, or UserError when it is not finite or out of int64's range.
int64_t float_to_int(double v, const std::string& what) {
  if (!std::isfinite(v) || v >= 9.2e18 || v <= -9.2e18)
    REMAT_USER_ERROR(what << ": " << v << " is not an integer in range");
  return static_cast<int64_t>(v);
}

// Row-major strides of `s`.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * s[k];
  return st;
}

// Index into a tensor of shape `in` broadcast to `out`, for flat output index `o`.
int64_t broadcast_index(int64_t o, const Shape& out, const Shape& in) {
  int64_t idx = 0, stride = 1;
  for (size_t k = out.size(), j = in.size(); k-- > 0;) {
    const int64_t coord = o % out[k];
    o /= out[k];
    if (j > 0) {
      --j;
      if (in[j] != 1) idx += coord * stride;
      stride *= in[j];
    }
  }
  return idx;
}

SymInt sym_binary(const std::string& op, SymInt x, SymInt y, const std::string& what) {
  auto plain = [&](const char* why) {
    if (!x.is_const() || !y.is_const())
      REMAT_USER_ERROR(what << ": " << op << " of " << sym_str(x) << " and " << sym_str(y)
                            << " " << why << " (the batch N must stay n * N + c)");
  };
  if (op == "Add") return {add_or_fail(x.n, y.n, what), add_or_fail(x.c, y.c, what)};
  if (op == "Sub") {
    if (y.n == INT64_MIN || y.c == INT64_MIN) REMAT_USER_ERROR(what << ": integer overflow");
    return {add_or_fail(x.n, -y.n, what), add_or_fail(x.c, -y.c, what)};
  }
  if (op == "Mul") {
    if (x.is_const()) return {mul_or_fail(y.n, x.c, what), mul_or_fail(y.c, x.c, what)};
    if (y.is_const()) return {mul_or_fail(x.n, y.c, what), mul_or_fail(x.c, y.c, what)};
    plain("multiplies the batch by itself");
  }
  if (op == "Div" || op == "Mod") {
    if (y.is_const() && y.c == 0) REMAT_USER_ERROR(what << ": integer division by zero");
    if (y.is_const() && y.c == -1 && (x.n == INT64_MIN || x.c == INT64_MIN))
      REMAT_USER_ERROR(what << ": integer overflow");
  }
  if (op == "Div") {
    if (y.is_const() && x.n % y.c == 0 && x.c % y.c == 0) return {x.n / y.c, x.c / y.c};
    plain("is not a whole multiple of the batch");
    return {0, x.c / y.c};  // ONNX integer Div truncates, as C++ does
  }
  // Equal of a batch-dependent value and one it equals for no batch N >= 1 is false (the
  // exporter's test of an expanded size against -1).
  if (op == "Equal" && x.n != y.n) {
    const int64_t dn = x.n - y.n, dc = y.c - x.c;  // equal where N dn = dc
    if (dc % dn != 0 || dc / dn < 1) return {0, 0};
  }
  plain("cannot be folded");
  int64_t a = x.c, b = y.c, r = 0;
  if (op == "Equal") r = a == b;
  else if (op == "Less") r = a < b;
  else if (op == "Greater") r = a > b;
  else if (op == "And") r = a && b;
  else if (op == "Or") r = a || b;
  else if (op == "Max") r = std::max(a, b);
  else if (op == "Min") r = std::min(a, b);
  else if (op == "Pow") r = float_to_int(std::round(std::pow(static_cast<double>(a), static_cast<double>(b))), what);
  else if (op == "Mod") r = a % b;
  else REMAT_USER_ERROR(what << ": cannot fold " << op);
  return {0, r};
}

double float_binary(const std::string& op, double a, double b, const std::string& what) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return a / b;
  if (op == "Pow") return std::pow(a, b);
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  REMAT_USER_ERROR(what << ": cannot fold " << op << " on floats");
}

bool is_comparison(const std::string& op) {
  return op == "Equal" || op == "Less" || op == "Greater" || op == "And" || op == "Or";
}

}  // namespace

OnnxConst fold_binary(const std::string& op, const OnnxConst& a, const OnnxConst& b,
                      const std::string& what) {
  const Shape out = broadcast_shapes(a.shape, b.shape, what);
  const int64_t n = folded_numel(out, what);
  const bool floats = a.is_float || b.is_float;
  if (floats && (a.is_symbolic() || b.is_symbolic()))
    REMAT_USER_ERROR(what << ": " << op << " mixes the batch N with floats");
  OnnxConst r;
  r.shape = out;
  r.is_float = floats && !is_comparison(op);
  for (int64_t o = 0; o < n; ++o) {
    const int64_t ia = broadcast_index(o, out, a.shape), ib = broadcast_index(o, out, b.shape);
    if (floats) {
      const double x = a.is_float ? a.f[ia] : static_cast<double>(a.i[ia].c);
      const double y = b.is_float ? b.f[ib] : static_cast<double>(b.i[ib].c);
      const double v = float_binary(op, x, y, what);
      if (r.is_float) r.f.push_back(v);
      else r.i.push_back({0, float_to_int(v, what)});
    } else {
      r.i.push_back(sym_binary(op, a.i[ia], b.i[ib], what));
    }
  }
  return r;
}

OnnxConst fold_unary(const std::string& op, const OnnxConst& a, const std::string& what) {
  if (op == "Identity") return a;
  OnnxConst r = a;
  if (!a.is_float) {
    for (SymInt& v : r.i) {
      if ((op == "Neg" || op == "Abs") && (v.n == INT64_MIN || v.c == INT64_MIN))
        REMAT_USER_ERROR(what << ": integer overflow");
      if (op == "Neg") v = {-v.n, -v.c};
      else if (!v.is_const()) REMAT_USER_ERROR(what << ": " << op << " of the batch N");
      else if (op == "Abs") v.c = std::abs(v.c);
      else if (op == "Not") v.c = !v.c;
      else if (op == "Floor" || op == "Ceil") continue;
      else REMAT_USER_ERROR(what << ": cannot fold " << op << " on integers");
    }
    return r;
  }
  const std::map<std::string, std::function<double(double)>> fns = {
      {"Neg", [](double x) { return -x; }},       {"Sqrt", [](double x) { return std::sqrt(x); }},
      {"Abs", [](double x) { return std::fabs(x); }}, {"Reciprocal", [](double x) { return 1 / x; }},
      {"Floor", [](double x) { return std::floor(x); }}, {"Ceil", [](double x) { return std::ceil(x); }},
      {"Exp", [](double x) { return std::exp(x); }}, {"Log", [](double x) { return std::log(x); }}};
  auto it = fns.find(op);
  if (it == fns.end()) REMAT_USER_ERROR(what << ": cannot fold " << op << " on floats");
  for (double& v : r.f) v = it->second(v);
  return r;
}

OnnxConst fold_where(const OnnxConst& cond, const OnnxConst& a, const OnnxConst& b,
                     const std::string& what) {
  const Shape out = broadcast_shapes(broadcast_shapes(cond.shape, a.shape, what), b.shape, what);
  folded_numel(out, what);
  if (cond.is_float) REMAT_USER_ERROR(what << ": the condition must be boolean");
  if (a.is_float != b.is_float) REMAT_USER_ERROR(what << ": both branches must have one type");
  OnnxConst r;
  r.shape = out;
  r.is_float = a.is_float;
  for (int64_t o = 0; o < shape_numel(out); ++o) {
    const SymInt c = cond.i[broadcast_index(o, out, cond.shape)];
    if (!c.is_const()) REMAT_USER_ERROR(what << ": a condition on the batch N");
    const OnnxConst& pick = c.c ? a : b;
    const int64_t k = broadcast_index(o, out, pick.shape);
    if (r.is_float) r.f.push_back(pick.f[k]);
    else r.i.push_back(pick.i[k]);
  }
  return r;
}

OnnxConst fold_cast(const OnnxConst& a, int onnx_type, const std::string& what) {
  const bool to_float = onnx_is_float_type(onnx_type);
  if (onnx_element_bytes(onnx_type) == 0)
    REMAT_USER_ERROR(what << ": Cast to an unsupported type (" << onnx_type << ")");
  OnnxConst r;
  r.shape = a.shape;
  r.is_float = to_float;
  if (to_float) {
    if (a.is_symbolic()) REMAT_USER_ERROR(what << ": Cast of the batch N to a float");
    for (int64_t k = 0; k < a.numel(); ++k)
      r.f.push_back(a.is_float ? a.f[k] : static_cast<double>(a.i[k].c));
  } else {
    const bool to_bool = onnx_type == onnx::TensorProto::BOOL;
    for (int64_t k = 0; k < a.numel(); ++k) {
      SymInt v = a.is_float ? SymInt{0, float_to_int(a.f[k], what)} : a.i[k];
      if (to_bool && v.is_const()) v.c = v.c != 0;
      r.i.push_back(v);
    }
  }
  return r;
}

OnnxConst fold_gather(const OnnxConst& data, const OnnxConst& idx, int64_t axis,
                      const std::string& what) {
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  if (rank == 0) REMAT_USER_ERROR(what << ": Gather from a scalar");
  axis = normalize_axis(axis, rank, what);
  const std::vector<int64_t> ids = idx.ints(what + ": indices");
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  folded_numel(out, what);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= data.shape[k];
  for (int64_t k = axis + 1; k < rank; ++k) inner *= data.shape[k];
  const int64_t dim = data.shape[axis];
  OnnxConst r;
  r.shape = out;
  r.is_float = data.is_float;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t id : ids) {
      if (id < -dim || id >= dim)
        REMAT_USER_ERROR(what << ": index " << id << " is out of range for a dimension of " << dim);
      const int64_t j = id < 0 ? id + dim : id;
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t k = (o * dim + j) * inner + in;
        if (r.is_float) r.f.push_back(data.f[k]);
        else r.i.push_back(data.i[k]);
      }
    }
  return r;
}

OnnxConst fold_concat(const std::vector<const OnnxConst*>& in, int64_t axis,
                      const std::string& what) {
  REMAT_CHECK(!in.empty(), "fold_concat: no inputs");
  const Shape& s0 = in[0]->shape;
  const int64_t rank = static_cast<int64_t>(s0.size());
  axis = normalize_axis(axis, rank, what);
  Shape out = s0;
  out[axis] = 0;
  bool floats = false;
  for (const OnnxConst* c : in) {
    if (static_cast<int64_t>(c->shape.size()) != rank)
      REMAT_USER_ERROR(what << ": Concat of ranks " << rank << " and " << c->shape.size());
    for (int64_t k = 0; k < rank; ++k)
      if (k != axis && c->shape[k] != s0[k])
        REMAT_USER_ERROR(what << ": Concat of shapes " << shape_str(s0) << " and "
                              << shape_str(c->shape));
    out[axis] += c->shape[axis];
    floats = floats || c->is_float;
  }
  folded_numel(out, what);
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= s0[k];
  OnnxConst r;
  r.shape = out;
  r.is_float = floats;
  for (int64_t o = 0; o < outer; ++o)
    for (const OnnxConst* c : in) {
      const int64_t chunk = c->numel() / std::max<int64_t>(outer, 1);
      for (int64_t k = o * chunk; k < (o + 1) * chunk; ++k) {
        if (floats) r.f.push_back(c->is_float ? c->f[k] : static_cast<double>(c->i[k].c));
        else r.i.push_back(c->i[k]);
      }
    }
  if (floats)
    for (const OnnxConst* c : in)
      if (c->is_symbolic()) REMAT_USER_ERROR(what << ": Concat mixes the batch N with floats");
  return r;
}

OnnxConst fold_unsqueeze(const OnnxConst& a, const std::vector<int64_t>& axes,
                         const std::string& what) {
  const int64_t rank = static_cast<int64_t>(a.shape.size() + axes.size());
  std::vector<bool> is_new(static_cast<size_t>(rank), false);
  for (int64_t ax : axes) {
    const int64_t k = normalize_axis(ax, rank, what);
    if (is_new[k]) REMAT_USER_ERROR(what << ": axis " << ax << " is repeated");
    is_new[k] = true;
  }
  Shape out;
  size_t j = 0;
  for (int64_t k = 0; k < rank; ++k) out.push_back(is_new[k] ? 1 : a.shape[j++]);
  OnnxConst r = a;
  r.shape = out;
  return r;
}

OnnxConst fold_squeeze(const OnnxConst& a, const std::vector<int64_t>& axes,
                       const std::string& what) {
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  std::vector<bool> drop(static_cast<size_t>(rank), axes.empty());
  for (int64_t ax : axes) drop[normalize_axis(ax, rank, what)] = true;
  Shape out;
  for (int64_t k = 0; k < rank; ++k) {
    if (drop[k] && a.shape[k] != 1 && !axes.empty())
      REMAT_USER_ERROR(what << ": Squeeze of axis " << k << " of size " << a.shape[k]);
    if (!(drop[k] && a.shape[k] == 1)) out.push_back(a.shape[k]);
  }
  OnnxConst r = a;
  r.shape = out;
  return r;
}

OnnxConst fold_reshape(const OnnxConst& a, Shape to, const std::string& what) {
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < to.size(); ++k) {
    if (to[k] == 0 && k < a.shape.size()) to[k] = a.shape[k];
    if (to[k] == -1) {
      if (infer >= 0) REMAT_USER_ERROR(what << ": Reshape with two -1 dimensions");
      infer = static_cast<int64_t>(k);
    } else if (to[k] < 0 || to[k] > kMaxFoldedElements) {
      REMAT_USER_ERROR(what << ": Reshape to a dimension of " << to[k]);
    } else {
      known = mul_or_fail(known, to[k], what);
    }
  }
  if (infer >= 0 && known > 0) to[infer] = a.numel() / known;
  if (folded_numel(to, what) != a.numel())
    REMAT_USER_ERROR(what << ": cannot reshape " << shape_str(a.shape) << " to " << shape_str(to));
  OnnxConst r = a;
  r.shape = to;
  return r;
}

OnnxConst fold_slice(const OnnxConst& a, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                     const std::vector<int64_t>& steps, const std::string& what) {
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  std::vector<int64_t> lo(rank, 0), step(rank, 1);
  Shape out = a.shape;
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t ax = normalize_axis(axes.empty() ? static_cast<int64_t>(k) : axes[k], rank, what);
    const int64_t dim = a.shape[ax], st = steps.empty() ? 1 : steps[k];
    if (st == 0 || st == INT64_MIN) REMAT_USER_ERROR(what << ": Slice step " << st);
    auto clampi = [&](int64_t v, int64_t low, int64_t high) {
      if (v < 0) v = v < -dim ? -1 - dim : v + dim;  // far below: before the start
      return std::min(std::max(v, low), high);
    };
    const int64_t b = st > 0 ? clampi(starts[k], 0, dim) : clampi(starts[k], -1, dim - 1);
    const int64_t e = st > 0 ? clampi(ends[k], 0, dim) : clampi(ends[k], -1, dim - 1);
    lo[ax] = b;
    step[ax] = st;
    out[ax] = st > 0 ? (e > b ? (e - b - 1) / st + 1 : 0) : (b > e ? (b - e - 1) / -st + 1 : 0);
  }
  const std::vector<int64_t> in_st = strides_of(a.shape);
  OnnxConst r;
  r.shape = out;
  r.is_float = a.is_float;
  for (int64_t o = 0; o < shape_numel(out); ++o) {
    int64_t rem = o, idx = 0;
    for (int64_t k = rank; k-- > 0;) {
      const int64_t coord = rem % out[k];
      rem /= out[k];
      idx += (lo[k] + coord * step[k]) * in_st[k];
    }
    if (r.is_float) r.f.push_back(a.f[idx]);
    else r.i.push_back(a.i[idx]);
  }
  return r;
}

OnnxConst fold_range(const OnnxConst& start, const OnnxConst& limit, const OnnxConst& delta,
                     const std::string& what) {
  const double s = start.scalar(what), l = limit.scalar(what), d = delta.scalar(what);
  if (d == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d))
    REMAT_USER_ERROR(what << ": Range(" << s << ", " << l << ", " << d << ")");
  const double count = std::ceil((l - s) / d);
  if (count > static_cast<double>(kMaxFoldedElements))
    REMAT_USER_ERROR(what << ": Range of " << count << " values");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  OnnxConst r;
  r.shape = {n};
  r.is_float = start.is_float;
  for (int64_t k = 0; k < n; ++k) {
    if (r.is_float) r.f.push_back(s + k * d);
    else r.i.push_back({0, float_to_int(s + static_cast<double>(k) * d, what)});
  }
  return r;
}

OnnxConst fold_transpose(const OnnxConst& a, const std::vector<int64_t>& perm,
                         const std::string& what) {
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  std::vector<int64_t> p = perm;
  if (p.empty())
    for (int64_t k = rank; k-- > 0;) p.push_back(k);
  if (static_cast<int64_t>(p.size()) != rank)
    REMAT_USER_ERROR(what << ": perm has " << p.size() << " axes for rank " << rank);
  Shape out(rank);
  for (int64_t k = 0; k < rank; ++k) out[k] = a.shape[normalize_axis(p[k], rank, what)];
  const std::vector<int64_t> in_st = strides_of(a.shape);
  OnnxConst r;
  r.shape = out;
  r.is_float = a.is_float;
  for (int64_t o = 0; o < a.numel(); ++o) {
    int64_t rem = o, idx = 0;
    for (int64_t k = rank; k-- > 0;) {
      idx += (rem % out[k]) * in_st[normalize_axis(p[k], rank, what)];
      rem /= out[k];
    }
    if (r.is_float) r.f.push_back(a.f[idx]);
    else r.i.push_back(a.i[idx]);
  }
  return r;
}

OnnxConst fold_constant_of_shape(const OnnxConst& shape, const OnnxConst& value,
                                 const std::string& what) {
  if (shape.is_symbolic())
    REMAT_USER_ERROR(what << ": a constant whose shape " << "holds the batch N (a tensor as large "
                          << "as the batch that no layer computes)");
  const Shape s = shape.ints(what);
  const int64_t n = folded_numel(s, what);
  OnnxConst r;
  r.shape = s;
  r.is_float = value.is_float;
  if (r.is_float) r.f.assign(static_cast<size_t>(n), value.f.at(0));
  else r.i.assign(static_cast<size_t>(n), value.i.at(0));
  return r;
}

}  // namespace remat
