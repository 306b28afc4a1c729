// Checkpoints as safetensors: the trainable state of an executor, saved atomically.
#include "runtime/checkpoint.h"

#include <cmath>

#include "runtime/check.h"
#include "runtime/safetensors.h"

namespace remat {

namespace {
// Values a checkpoint holds: parameters, buffers (running statistics), optimizer state.
bool is_state(ValueKind k) {
  return k == ValueKind::Param || k == ValueKind::Buffer || k == ValueKind::OptState;
}

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

void checkpoint_save(const Executor& ex, const std::string& path, int64_t steps_done) {
  const Graph& g = ex.graph();
  std::vector<SafeTensor> tensors;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!is_state(val.kind)) continue;
    tensors.push_back(safetensor_f32(val.name, val.desc.shape, ex.read(static_cast<ValueId>(v))));
  }
  safetensors_save(path, tensors,
                   {{"format", "remat-checkpoint/1"},
                    {"model", g.name},
                    {"step", std::to_string(steps_done)}});
}

CheckpointInfo checkpoint_load(Executor& ex, const std::string& path) {
  const Graph& g = ex.graph();
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
  CheckpointInfo info;
  info.step = parse_step(meta("step"), path);
  // Validate every tensor before writing any, so a bad file leaves the executor untouched.
  std::vector<std::pair<ValueId, std::vector<float>>> values;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!is_state(val.kind)) continue;
    const SafeTensor* t = f.find(val.name);
    if (!t) REMAT_USER_ERROR(path << ": tensor '" << val.name << "' missing");
    if (t->shape != val.desc.shape || t->dtype != DType::F32)
      REMAT_USER_ERROR(path << ": tensor '" << val.name << "' is " << dtype_name(t->dtype) << " "
                            << shape_str(t->shape) << ", the model needs f32 "
                            << shape_str(val.desc.shape));
    std::vector<float> host = t->f32();
    for (size_t i = 0; i < host.size(); ++i)
      if (!std::isfinite(host[i]))
        REMAT_USER_ERROR(path << ": tensor '" << val.name << "': element " << i << " is "
                              << host[i] << " (a checkpoint holds finite values only)");
    values.emplace_back(static_cast<ValueId>(v), std::move(host));
  }
  for (const auto& [v, host] : values) ex.write(v, host);
  info.unverified = static_cast<int>(f.unverified.size());
  return info;
}

}  // namespace remat
