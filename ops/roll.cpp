// roll (shifts, dims): PyTorch's torch.roll of data along one axis or two adjacent ones after
// the batch, y[.., (i + s) mod n, ..] = x[.., i, ..] (Swin's cyclic shift of [N, H, W, C] by
// (-s, -s) along dims (1, 2) before its window attention, and back after). Exact in any dtype;
// the gradient is the roll back. On the CPU a walk over rows of the trailing axes; on CUDA one
// strided copy (cudaMemcpy3DAsync) per pair of the axes' two segments: no kernel of its own.
#include <cstring>
#include <memory>
#include <vector>

#include "ops/op_common.h"
#include "ops/op_cuda.h"
#include "ops/registry.h"

namespace remat {
namespace {

struct RollAttrs : OpAttrs {
  std::vector<int64_t> shifts, dims;
};

OpAttrsPtr roll_parse(AttrReader& r) {
  auto a = std::make_shared<RollAttrs>();
  if (!r.has("shifts")) r.fail("shifts", "is required (e.g. [-3, -3])");
  if (!r.has("dims")) r.fail("dims", "is required (e.g. [1, 2])");
  a->shifts = r.get_int_list("shifts", {1, 2}, {}, -(int64_t{1} << 40), int64_t{1} << 40);
  a->dims = r.get_int_list("dims", {1, 2}, {}, 1, 7);
  if (a->dims.size() != a->shifts.size())
    r.fail("dims", "names " + std::to_string(a->dims.size()) + " axes for " +
                       std::to_string(a->shifts.size()) + " shifts");
  if (a->dims.size() == 2 && a->dims[1] != a->dims[0] + 1)
    r.fail("dims", "must be one axis or two adjacent ones in order (e.g. [1, 2]), got " +
                       shape_str(a->dims));
  r.finish("roll");
  return a;
}

TensorDesc roll_infer(const OpAttrs& at, const std::vector<TensorDesc>& in) {
  const auto& a = static_cast<const RollAttrs&>(at);
  require_float("roll", in);
  const Shape& s = in.at(0).shape;
  if (a.dims.back() >= static_cast<int64_t>(s.size()))
    REMAT_USER_ERROR("roll: dims " << shape_str(a.dims) << " are not axes of " << shape_str(s));
  return in[0];
}

// x as [outer, n1, n2, inner] rolled by s1 along n1 and s2 along n2 (one axis: n2 = 1, s2 = 0),
// the shifts in [0, n).
struct Roll {
  int64_t outer = 1, n1 = 1, n2 = 1, inner = 1, s1 = 0, s2 = 0;
};
int64_t wrap(int64_t s, int64_t n) { return ((s % n) + n) % n; }

Roll roll_of(const ExecContext& ctx) {
  const auto& a = attrs_of<RollAttrs>(*ctx.node);
  const Shape& s = ctx.inputs.at(0).shape();
  Roll r;
  const int64_t first = a.dims.front(), last = a.dims.back();
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    const int64_t n = s[static_cast<size_t>(d)];
    if (d < first) r.outer *= n;
    else if (d > last) r.inner *= n;
  }
  r.n1 = s[static_cast<size_t>(first)];
  r.s1 = wrap(a.shifts.front(), r.n1);
  if (a.dims.size() == 2) {
    r.n2 = s[static_cast<size_t>(last)];
    r.s2 = wrap(a.shifts.back(), r.n2);
  }
  return r;
}

void roll_cpu(const ExecContext& ctx) {
  const Roll r = roll_of(ctx);
  const size_t e = static_cast<size_t>(dtype_size(ctx.output.desc->dtype));
  const auto* x = static_cast<const char*>(ctx.inputs[0].data);
  auto* y = static_cast<char*>(ctx.output.data);
  const int64_t row = r.inner * static_cast<int64_t>(e);
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t i = 0; i < r.n1; ++i)
      for (int64_t j = 0; j < r.n2; ++j) {
        const int64_t to = (o * r.n1 + (i + r.s1) % r.n1) * r.n2 + (j + r.s2) % r.n2;
        std::memcpy(y + to * row, x + ((o * r.n1 + i) * r.n2 + j) * row, static_cast<size_t>(row));
      }
}

#ifdef REMAT_HAVE_CUDA
// Each axis's rows split in two segments, [0, n - s) -> [s, n) and [n - s, n) -> [0, s); each
// pair of segments is one 3-D copy: `outer` slices of a segment of n1-rows, each row a segment
// of n2-rows of `inner` contiguous elements.
void roll_cuda(const ExecContext& ctx) {
  const Roll r = roll_of(ctx);
  const int64_t e = dtype_size(ctx.output.desc->dtype);
  const size_t pitch = static_cast<size_t>(r.n2 * r.inner * e);
  struct Segment {
    int64_t from, to, len;
  };
  auto segments = [](int64_t n, int64_t s) {
    std::vector<Segment> out{{0, s, n - s}};
    if (s > 0) out.push_back({n - s, 0, s});
    return out;
  };
  for (const Segment& a : segments(r.n1, r.s1))
    for (const Segment& b : segments(r.n2, r.s2)) {
      cudaMemcpy3DParms p = {};
      p.srcPtr = make_cudaPitchedPtr(const_cast<void*>(ctx.inputs[0].data), pitch, pitch,
                                     static_cast<size_t>(r.n1));
      p.dstPtr = make_cudaPitchedPtr(ctx.output.data, pitch, pitch, static_cast<size_t>(r.n1));
      const auto bytes = [&](int64_t rows) { return static_cast<size_t>(rows * r.inner * e); };
      p.srcPos = make_cudaPos(bytes(b.from), static_cast<size_t>(a.from), 0);
      p.dstPos = make_cudaPos(bytes(b.to), static_cast<size_t>(a.to), 0);
      p.extent = make_cudaExtent(bytes(b.len), static_cast<size_t>(a.len),
                                 static_cast<size_t>(r.outer));
      p.kind = cudaMemcpyDeviceToDevice;
      REMAT_CUDA_CHECK(cudaMemcpy3DAsync(&p, cuda_stream(ctx)));
    }
}
#endif

std::vector<ValueId> roll_gradient(GradEmitter& g, const Node& fwd, ValueId dy) {
  const TensorDesc x = g.graph().value(fwd.inputs.at(0)).desc;  // a copy: emit grows the graph
  const auto& a = attrs_of<RollAttrs>(fwd);
  std::vector<int64_t> back;
  for (int64_t s : a.shifts) back.push_back(-s);
  AttrMap m;
  m.origin = fwd.attrs.origin;
  m.set("shifts", back);
  m.set("dims", a.dims);
  AttrReader rd(m);
  OpAttrsPtr typed = roll_parse(rd);
  return {g.emit("grad", "roll", {dy}, x, m, typed)};
}

}  // namespace

void register_roll_ops(OpRegistry& r) {
  OpDef op;
  op.name = "roll";
  op.summary = "torch.roll along one axis or two adjacent ones after the batch (shifts, dims)";
  op.parse = roll_parse;
  op.infer = roll_infer;
  op.cost = [](const OpAttrs&, const std::vector<TensorDesc>& in, const TensorDesc& out) {
    return elementwise_cost(in, out, 0);
  };
  op.cpu = roll_cpu;
#ifdef REMAT_HAVE_CUDA
  op.cuda = roll_cuda;
#endif
  op.gradient = roll_gradient;
  with_bf16(op).bf16_cpu_native = true;
  op.bf16_cuda_native = true;
  r.add(std::move(op));
}

}  // namespace remat
