// Checkpoints as safetensors: the trainable state of an executor, saved atomically.
#include "runtime/checkpoint.h"

#include "runtime/check.h"
#include "runtime/safetensors.h"

namespace remat {

bool checkpoint_holds(ValueKind k) {
  return k == ValueKind::Param || k == ValueKind::Buffer || k == ValueKind::OptState;
}

void checkpoint_save(const Graph& g, const std::function<std::vector<float>(ValueId)>& read,
                     const std::string& path, int64_t steps_done) {
  std::vector<SafeTensor> tensors;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!checkpoint_holds(val.kind)) continue;
    tensors.push_back(safetensor_f32(val.name, val.desc.shape, read(static_cast<ValueId>(v))));
  }
  safetensors_save(path, tensors,
                   {{"format", "remat-checkpoint/1"},
                    {"model", g.name},
                    {"step", std::to_string(steps_done)}});
}

void checkpoint_save(const Executor& ex, const std::string& path, int64_t steps_done) {
  checkpoint_save(ex.graph(), [&](ValueId v) { return ex.read(v); }, path, steps_done);
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
  try {
    d.step = std::stoll(meta("step"));
  } catch (const std::exception&) {
    REMAT_USER_ERROR(path << ": metadata 'step' is not a number: '" << meta("step") << "'");
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
    d.values[v] = t->f32();
  }
  return d;
}

int64_t checkpoint_load(Executor& ex, const std::string& path) {
  CheckpointData d = checkpoint_read(ex.graph(), path);
  for (size_t v = 0; v < d.values.size(); ++v)
    if (checkpoint_holds(ex.graph().values[v].kind)) ex.write(static_cast<ValueId>(v), d.values[v]);
  return d.step;
}

}  // namespace remat
