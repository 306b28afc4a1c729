// Einsum of two data tensors that is a batched matrix product: the letters before the last two
// are the same in both inputs and the output (the batch first among them), and the last two
// contract one letter, as torch.einsum writes attention (MaxViT's "B G H I D, B G H J D -> B G H
// I J" is q k^T, "B G H I J, B G H J D -> B G H I D" the product with v). It becomes matmul with
// the transpose flags the letters' order asks for; any other equation (a sum, a diagonal,
// broadcasting, an ellipsis, a product with a weight) is an error naming it.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "models/onnx/onnx_translator.h"

namespace remat {
namespace onnx_detail {
namespace {

// "B G H I D, B G H J D -> B G H I J" -> {"BGHID", "BGHJD", "BGHIJ"}; empty when the equation
// has another form (one input, no "->", an ellipsis).
std::vector<std::string> einsum_terms(const std::string& equation) {
  std::string e;
  for (char c : equation)
    if (c != ' ') e += c;
  const size_t arrow = e.find("->"), comma = e.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow ||
      e.find('.') != std::string::npos || e.find(',', comma + 1) != std::string::npos)
    return {};
  return {e.substr(0, comma), e.substr(comma + 1, arrow - comma - 1), e.substr(arrow + 2)};
}

// The matmul an equation is: a [.., i, k] or [.., k, i] times b [.., k, j] or [.., j, k] into
// [.., i, j], the prefix letters distinct and in the same order everywhere.
struct EinsumMatmul {
  bool ok = false, transpose_a = false, transpose_b = false;
};
EinsumMatmul as_matmul(const std::vector<std::string>& t) {
  EinsumMatmul m;
  if (t.size() != 3) return m;
  const std::string &a = t[0], &b = t[1], &y = t[2];
  const size_t r = a.size();
  if (r < 3 || b.size() != r || y.size() != r) return m;
  const std::string prefix = a.substr(0, r - 2);
  if (b.substr(0, r - 2) != prefix || y.substr(0, r - 2) != prefix) return m;
  const char i = y[r - 2], j = y[r - 1];
  std::set<char> letters(prefix.begin(), prefix.end());
  if (letters.size() != prefix.size()) return m;
  const std::string a2 = a.substr(r - 2), b2 = b.substr(r - 2);
  const size_t ia = a2.find(i), jb = b2.find(j);
  if (ia == std::string::npos || jb == std::string::npos || i == j) return m;
  const char k = a2[1 - ia];
  if (k == i || k == j || b2[1 - jb] != k || letters.count(i) || letters.count(j) ||
      letters.count(k))
    return m;
  m.ok = true;
  m.transpose_a = ia == 1;  // a [.., k, i]
  m.transpose_b = jb == 0;  // b [.., j, k]
  return m;
}

void einsum(Translator& t) {
  const std::string equation = t.attr_string("equation", "");
  const std::vector<std::string> terms = einsum_terms(equation);
  const EinsumMatmul m = as_matmul(terms);
  if (t.inputs() != 2 || !m.ok)
    t.fail("equation '" + equation + "': only a batched matrix product of two tensors is "
           "supported (the same leading letters everywhere, one letter contracted in the last "
           "two, e.g. 'bhid,bhjd->bhij' or 'bhij,bhjd->bhid')");
  if (t.is_const(0) || t.is_const(1))
    t.fail("an Einsum with a constant or weight is not supported");
  const DataValue a = t.data(0), b = t.data(1);
  for (const DataValue* v : {&a, &b})
    if (v->transposed || v->remat != v->sample) t.fail("an input is not a plain tensor");
  const size_t r = a.sample.size();
  if (b.sample.size() != r || r + 1 != terms[0].size())
    t.fail("equation '" + equation + "' does not name the axes of " + shape_str(a.sample) +
           " and " + shape_str(b.sample) + " per sample");
  for (size_t d = 0; d + 2 < r; ++d)
    if (a.sample[d] != b.sample[d]) t.fail("the batch dimensions differ (no broadcasting)");
  const int64_t rows = a.sample[r - (m.transpose_a ? 1 : 2)];
  const int64_t ka = a.sample[r - (m.transpose_a ? 2 : 1)];
  const int64_t cols = b.sample[r - (m.transpose_b ? 2 : 1)];
  const int64_t kb = b.sample[r - (m.transpose_b ? 1 : 2)];
  if (ka != kb) t.fail(shape_str(a.sample) + " x " + shape_str(b.sample) + " do not contract");
  AttrMap at;
  if (m.transpose_a) at.set("transpose_a", true);
  if (m.transpose_b) at.set("transpose_b", true);
  Shape out = a.sample;
  out[r - 2] = rows;
  out[r - 1] = cols;
  t.emit("matmul", {a, b}, at, {}, out, out, a.dtype);
}

}  // namespace

std::map<std::string, TranslateFn> with_einsum(std::map<std::string, TranslateFn> ops) {
  ops["Einsum"] = einsum;
  return ops;
}

}  // namespace onnx_detail
}  // namespace remat
