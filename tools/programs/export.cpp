// `export`: a checkpoint's model weights alone, as the safetensors file a PyTorch user loads —
// the parameters and buffers (running statistics) under their `layer.param` names and PyTorch
// layouts, FP32, metadata {"format": "pt"} as safetensors.torch.save_file writes; no optimizer
// state, step or checksums, and none of an imported graph's constants (not in the state_dict).
// tools/bench/bench_pytorch_model.py's load_remat_safetensors() loads it into the module it
// builds from the same YAML.
#include <cstdio>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/checkpoint.h"
#include "runtime/core/check.h"
#include "runtime/io/atomic_file.h"
#include "runtime/io/safetensors.h"
#include "tools/common/cli.h"

namespace remat {
namespace {

int export_main(int argc, char** argv) {
  FlagParser f("export", "Writes a checkpoint's model weights (no optimizer state) as safetensors "
                         "for PyTorch.");
  f.add("config", "FILE", "model YAML of the checkpoint (or --onnx)")
      .add("onnx", "FILE", "the ONNX model of the checkpoint (Note [--onnx])")
      .add("checkpoint", "FILE", "a checkpoint from train --save (required)")
      .add("output", "FILE", "the weights file to write (required)")
      .alias("-o", "output")
      .allow_positional("KEY=VALUE", "override a config field, as train took them");
  if (!f.parse(argc, argv)) return 0;
  const std::string model_file = model_file_flag(f, "export");
  if (model_file.empty())
    throw UsageError("export: --config (or --onnx) is required\n" + f.usage());
  for (const char* need : {"checkpoint", "output"})
    if (!f.has(need)) throw UsageError(std::string("export: --") + need + " is required\n" + f.usage());
  check_output_file(f.get("output"), "export: --output");
  const ModelConfig cfg = load_model_config(model_file, model_overrides(f, model_file));
  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  bo.batch = 1;  // the weights do not depend on the batch
  const Graph g = build_forward_graph(cfg, ops, bo);
  const CheckpointData ck = checkpoint_read(g, f.get("checkpoint"));
  std::vector<SafeTensor> tensors;
  int64_t weights = 0, bytes = 0;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (val.kind != ValueKind::Param && val.kind != ValueKind::Buffer) continue;
    if (cfg.export_skip.count(val.name)) continue;  // a constant of an imported graph
    auto dims = cfg.export_dims.find(val.name);  // an imported parameter's PyTorch dims
    const Shape& shape = dims != cfg.export_dims.end() ? dims->second : val.desc.shape;
    REMAT_CHECK(shape_numel(shape) == val.desc.numel(),
                "export: " << val.name << " is " << shape_str(val.desc.shape) << ", not "
                           << shape_str(shape));
    tensors.push_back(safetensor_f32(val.name, shape, ck.values[v]));
    weights += val.desc.numel();
    bytes += static_cast<int64_t>(tensors.back().data.size());
  }
  for (const auto& [name, buffer] : cfg.export_buffers) {  // Note [module buffers]
    if (g.find_value(name) != kNoValue) continue;  // a layer's buffer, written above
    tensors.push_back(safetensor_f32(name, buffer.first, buffer.second));
    bytes += static_cast<int64_t>(tensors.back().data.size());
  }
  safetensors_save(f.get("output"), tensors, {{"format", "pt"}}, /*checksums=*/false);
  std::printf("exported %zu tensors (%lld values, %s) of %s after step %lld to %s\n",
              tensors.size(), static_cast<long long>(weights), format_bytes(bytes).c_str(),
              g.name.c_str(), static_cast<long long>(ck.step), f.get("output").c_str());
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::export_main(argc, argv); });
}
