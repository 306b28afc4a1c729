// Staging layout of FP32-only kernels running in bf16 (Note [bf16 execution]).
#include "runtime/backends/bf16_staging.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace remat {

bool node_runs_bf16(const ExecContext& ctx) {
  if (ctx.output.desc && ctx.output.desc->dtype == DType::BF16) return true;
  for (const TensorView& v : ctx.inputs)
    if (v.desc->dtype == DType::BF16) return true;
  return false;
}

void require_bf16_path(const OpDef& op, const ExecContext& ctx) {
  if (op.bf16) return;
  REMAT_USER_ERROR("op '" << op.name << "' (node '" << (ctx.node ? ctx.node->name : "?")
                          << "') has no bf16 path; run it in fp32 (layer key precision: fp32)");
}

namespace {

// Per-sample staging applies when the op says so and every batched tensor has the output's
// batch first (a batch of 1 gains nothing).
int64_t per_sample_batch(const OpDef& op, const ExecContext& ctx) {
  if (op.bf16_batched_inputs == 0) return 1;
  const Shape& out = ctx.output.desc->shape;
  if (out.empty() || out[0] < 2) return 1;
  const size_t k = op.bf16_batched_inputs < 0
                       ? ctx.inputs.size()
                       : std::min(ctx.inputs.size(), static_cast<size_t>(op.bf16_batched_inputs));
  for (size_t i = 0; i < k; ++i) {
    const Shape& s = ctx.inputs[i].desc->shape;
    if (s.empty() || s[0] != out[0]) return 1;
  }
  return out[0];
}

// Bytes of one sample of `d` (the whole tensor when `samples` is 1).
int64_t slice_bytes(const TensorDesc& d, int64_t samples) { return d.bytes() / samples; }

}  // namespace

Bf16Staging bf16_staging(const OpDef& op, const ExecContext& ctx,
                         const std::function<int64_t(const ExecContext&)>& kernel_workspace) {
  require_bf16_path(op, ctx);
  Bf16Staging s;
  const size_t n_in = ctx.inputs.size();
  s.samples = per_sample_batch(op, ctx);
  s.input_offset.assign(n_in, -1);
  s.input_rounded.assign(n_in, 0);
  s.input_batched.assign(n_in, 0);
  std::vector<char> staged(n_in, 0);
  s.descs.reserve(n_in + 1);
  for (size_t i = 0; i < n_in; ++i) {
    TensorDesc d = *ctx.inputs[i].desc;
    const bool operand = d.dtype == DType::F32 &&
                         std::find(op.bf16_operands.begin(), op.bf16_operands.end(),
                                   static_cast<int>(i)) != op.bf16_operands.end();
    staged[i] = d.dtype == DType::BF16 || operand;
    s.input_rounded[i] = operand;
    s.input_batched[i] =
        s.samples > 1 && (op.bf16_batched_inputs < 0 || static_cast<int>(i) < op.bf16_batched_inputs);
    if (s.input_batched[i]) d.shape[0] = 1;
    if (d.dtype == DType::BF16) d.dtype = DType::F32;
    s.descs.push_back(d);
  }
  TensorDesc out = *ctx.output.desc;
  const bool out_bf16 = out.dtype == DType::BF16;
  if (out_bf16) out.dtype = DType::F32;
  if (s.samples > 1) out.shape[0] = 1;
  s.round_output = !out_bf16 && op.bf16_rounds_output;
  s.descs.push_back(out);

  // The kernel's own workspace, for the FP32 view of one run (pointers null: shapes only).
  ExecContext view = ctx;
  for (size_t i = 0; i < n_in; ++i) view.inputs[i] = TensorView{&s.descs[i], nullptr};
  view.output = TensorView{&s.descs[n_in], nullptr};
  view.workspace = nullptr;
  view.workspace_bytes = 0;
  s.kernel_workspace = kernel_workspace(view);
  REMAT_CHECK(s.kernel_workspace >= 0, "negative workspace for node '" << ctx.node->name << "'");

  const std::string who = "node '" + (ctx.node ? ctx.node->name : std::string("?")) + "'";
  int64_t at = alloc_bytes(s.kernel_workspace);
  for (size_t i = 0; i < n_in; ++i) {
    if (!staged[i]) continue;
    s.input_offset[i] = at;
    at = checked_add(at, alloc_bytes(s.descs[i].bytes()), who, "bf16 staging bytes");
  }
  if (out_bf16) {
    s.output_offset = at;
    at = checked_add(at, alloc_bytes(out.bytes()), who, "bf16 staging bytes");
  }
  s.total_bytes = at;
  return s;
}

Bf16Slice bf16_slice(const Bf16Staging& s, const ExecContext& ctx, int input, int64_t sample) {
  const TensorView& v = input < 0 ? ctx.output : ctx.inputs[static_cast<size_t>(input)];
  const bool batched = input < 0 ? s.samples > 1 : s.input_batched[static_cast<size_t>(input)];
  const int64_t parts = batched ? s.samples : 1;
  const int64_t bytes = slice_bytes(*v.desc, parts);
  char* base = static_cast<char*>(v.data);
  return Bf16Slice{base + (batched ? sample * bytes : 0), v.desc->numel() / parts};
}

ExecContext bf16_staged_context(const Bf16Staging& s, const ExecContext& ctx, int64_t sample) {
  REMAT_CHECK(ctx.workspace_bytes >= s.total_bytes || s.total_bytes == 0,
              "node '" << ctx.node->name << "': workspace " << ctx.workspace_bytes
                       << " bytes for bf16 staging of " << s.total_bytes);
  REMAT_CHECK(sample >= 0 && sample < s.samples, "bf16 staging: sample " << sample << " of "
                                                                          << s.samples);
  ExecContext k = ctx;
  char* ws = static_cast<char*>(ctx.workspace);
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    k.inputs[i] = TensorView{&s.descs[i], s.input_offset[i] >= 0
                                              ? ws + s.input_offset[i]
                                              : bf16_slice(s, ctx, static_cast<int>(i), sample).data};
  k.output = TensorView{&s.descs.back(), s.output_offset >= 0
                                             ? ws + s.output_offset
                                             : bf16_slice(s, ctx, -1, sample).data};
  k.workspace = s.kernel_workspace > 0 ? ctx.workspace : nullptr;
  k.workspace_bytes = s.kernel_workspace;
  if (s.samples > 1) k.batch_offset = ctx.batch_offset + sample;
  return k;
}

}  // namespace remat
