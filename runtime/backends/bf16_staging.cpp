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

Bf16Staging bf16_staging(const OpDef& op, const ExecContext& ctx,
                         const std::function<int64_t(const ExecContext&)>& kernel_workspace) {
  require_bf16_path(op, ctx);
  Bf16Staging s;
  const size_t n_in = ctx.inputs.size();
  s.input_offset.assign(n_in, -1);
  s.input_rounded.assign(n_in, 0);
  s.descs.reserve(n_in + 1);
  for (size_t i = 0; i < n_in; ++i) {
    TensorDesc d = *ctx.inputs[i].desc;
    const bool operand = d.dtype == DType::F32 &&
                         std::find(op.bf16_operands.begin(), op.bf16_operands.end(),
                                   static_cast<int>(i)) != op.bf16_operands.end();
    if (d.dtype == DType::BF16 || operand) s.input_rounded[i] = operand;
    else s.input_offset[i] = -2;  // not staged (marker until offsets are assigned)
    if (d.dtype == DType::BF16) d.dtype = DType::F32;
    s.descs.push_back(d);
  }
  TensorDesc out = *ctx.output.desc;
  const bool out_bf16 = out.dtype == DType::BF16;
  if (out_bf16) out.dtype = DType::F32;
  s.round_output = !out_bf16 && op.bf16_rounds_output;
  s.descs.push_back(out);

  // The kernel's own workspace, for the FP32 view (pointers left null: shapes only).
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
    if (s.input_offset[i] == -2) {
      s.input_offset[i] = -1;
      continue;
    }
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

ExecContext bf16_staged_context(const Bf16Staging& s, const ExecContext& ctx) {
  REMAT_CHECK(ctx.workspace_bytes >= s.total_bytes || s.total_bytes == 0,
              "node '" << ctx.node->name << "': workspace " << ctx.workspace_bytes
                       << " bytes for bf16 staging of " << s.total_bytes);
  ExecContext k = ctx;
  char* ws = static_cast<char*>(ctx.workspace);
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    k.inputs[i] = TensorView{&s.descs[i],
                             s.input_offset[i] >= 0 ? ws + s.input_offset[i] : ctx.inputs[i].data};
  k.output = TensorView{&s.descs.back(),
                        s.output_offset >= 0 ? ws + s.output_offset : ctx.output.data};
  k.workspace = s.kernel_workspace > 0 ? ctx.workspace : nullptr;
  k.workspace_bytes = s.kernel_workspace;
  return k;
}

}  // namespace remat
