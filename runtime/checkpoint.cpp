// Checkpoints as safetensors: the trainable state of an executor, saved atomically.
#include "runtime/checkpoint.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"
#include "runtime/graph/init.h"
#include "runtime/io/safetensors.h"

namespace remat {

bool checkpoint_holds(ValueKind k) {
  return k == ValueKind::Param || k == ValueKind::Buffer || k == ValueKind::OptState;
}

namespace {

// Note [constant infinities]
// A checkpoint holds finite values only, so that a run never resumes from a diverged state; a
// constant of the model is not state: an imported attention mask or masked_fill adds -inf where
// the export does (Note [tensor constants] in models/onnx/onnx_constant_ops.cpp), and the step
// never writes it. Constants (Value::constant) may hold infinities, not NaN, and are never reset.
bool admissible(const Value& val, float x) {
  return std::isfinite(x) || (val.constant && std::isinf(x));
}

}  // namespace

const char* checkpoint_precision_name(DType t) { return t == DType::BF16 ? "bf16" : "fp32"; }

namespace {
// The "step" metadata: a plain non-negative decimal integer.
int64_t parse_step(const std::string& text, const std::string& path) {
  bool digits = !text.empty() && text.size() <= 18;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits)
    REMAT_USER_ERROR(path << ": metadata 'step': expected a non-negative integer (steps done), got '"
                          << text << "'");
  return std::stoll(text);
}
}  // namespace

void checkpoint_save(const Graph& g, const std::function<std::vector<float>(ValueId)>& read,
                     const std::string& path, int64_t steps_done) {
  std::vector<SafeTensor> tensors;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!checkpoint_holds(val.kind)) continue;
    tensors.push_back(safetensor_f32(val.name, val.desc.shape, read(static_cast<ValueId>(v))));
  }
  // Master weights and optimizer state are FP32 whatever the precision; it is recorded so that
  // a resume in another precision can say so.
  safetensors_save(path, tensors,
                   {{"format", "remat-checkpoint/1"},
                    {"model", g.name},
                    {"step", std::to_string(steps_done)},
                    {"precision", checkpoint_precision_name(g.activation_precision())}});
}

void checkpoint_save(const Executor& ex, const std::string& path, int64_t steps_done) {
  checkpoint_save(ex.graph(), [&](ValueId v) { return ex.read(v); }, path, steps_done);
}

std::string checkpoint_non_finite(const Executor& ex) {
  const Graph& g = ex.graph();
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!checkpoint_holds(g.values[v].kind)) continue;
    const std::vector<float> host = ex.read(static_cast<ValueId>(v));
    for (size_t i = 0; i < host.size(); ++i)
      if (!admissible(g.values[v], host[i]))
        return "tensor '" + g.values[v].name + "': element " + std::to_string(i) + " is " +
               std::to_string(host[i]);
  }
  return "";
}

std::vector<std::string> reset_non_finite_buffers(Executor& ex) {
  const Graph& g = ex.graph();
  std::vector<std::string> reset;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (val.kind != ValueKind::Buffer || val.constant ||
        (val.init != InitKind::Zeros && val.init != InitKind::Ones))
      continue;
    const std::vector<float> host = ex.read(static_cast<ValueId>(v));
    if (std::all_of(host.begin(), host.end(), [](float x) { return std::isfinite(x); })) continue;
    ex.write(static_cast<ValueId>(v), init_values(val, 0));
    reset.push_back(val.name);
  }
  return reset;
}

CheckpointData checkpoint_read(const Graph& g, const std::string& path) {
  SafeTensorFile f = safetensors_load(path);
  auto meta = [&](const std::string& k) {
    auto it = f.metadata.find(k);
    if (it == f.metadata.end())
      REMAT_USER_ERROR(path << ": not a remat checkpoint (metadata '" << k << "' missing)");
    return it->second;
  };
  if (meta("format") != "remat-checkpoint/1")
    REMAT_USER_ERROR(path << ": not a remat checkpoint (format '" << meta("format") << "')");
  if (meta("model") != g.name)
    REMAT_USER_ERROR(path << ": checkpoint of model '" << meta("model") << "', training '"
                          << g.name << "'");
  CheckpointData d;
  d.step = parse_step(meta("step"), path);
  auto precision = f.metadata.find("precision");  // absent in checkpoints written before bf16
  if (precision != f.metadata.end()) {
    if (precision->second != "fp32" && precision->second != "bf16")
      REMAT_USER_ERROR(path << ": metadata 'precision': expected fp32 or bf16, got '"
                            << precision->second << "'");
    d.precision = precision->second;
  }
  d.values.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!checkpoint_holds(val.kind)) continue;
    const SafeTensor* t = f.find(val.name);
    if (!t) REMAT_USER_ERROR(path << ": tensor '" << val.name << "' missing");
    if (t->shape != val.desc.shape || t->dtype != DType::F32)
      REMAT_USER_ERROR(path << ": tensor '" << val.name << "' is " << dtype_name(t->dtype) << " "
                            << shape_str(t->shape) << ", the model needs f32 "
                            << shape_str(val.desc.shape));
    std::vector<float> host = t->f32();
    for (size_t i = 0; i < host.size(); ++i)
      if (!admissible(val, host[i]))
        REMAT_USER_ERROR(path << ": tensor '" << val.name << "': element " << i << " is "
                              << host[i] << " (a checkpoint holds finite values only)");
    d.values[v] = std::move(host);
  }
  d.unverified = static_cast<int>(f.unverified.size());
  return d;
}

CheckpointInfo checkpoint_load(Executor& ex, const std::string& path) {
  // Every tensor is validated before any is written, so a bad file leaves the executor untouched.
  const CheckpointData d = checkpoint_read(ex.graph(), path);
  for (size_t v = 0; v < d.values.size(); ++v)
    if (checkpoint_holds(ex.graph().values[v].kind)) ex.write(static_cast<ValueId>(v), d.values[v]);
  return CheckpointInfo{d.step, d.unverified, d.precision};
}

}  // namespace remat
