// onnx_apply: an import's result into the config the builder reads.
#include "models/onnx/onnx_config.h"

#include <cctype>
#include <filesystem>

#include "runtime/core/check.h"

namespace remat {

std::string onnx_default_config(const std::string& path) {
  const std::filesystem::path p = std::filesystem::absolute(path);
  std::string quoted;
  for (char c : p.string()) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  std::string name;
  for (char c : p.stem().string())
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_';
  return "name: " + (name.empty() ? std::string("onnx_model") : name) + "\nmodel: {onnx: \"" +
         quoted + "\"}\n";
}

std::string onnx_default_loss(const Shape& output, bool tokens) {
  if (tokens) return output.size() == 2 ? "token_xent" : "";
  if (output.size() == 1) return "softmax_xent";
  if (output.size() == 3) return "softmax_xent_pixel";
  return "";
}

OnnxApplied onnx_apply(ModelConfig& cfg, const OnnxOptions& sizes) {
  REMAT_CHECK(cfg.onnx, "onnx_apply: not an imported model");
  OnnxOptions at = sizes;
  if (!at.input && !cfg.input.empty()) at.input = cfg.input;
  if (!at.sequence && cfg.sequence > 0) at.sequence = cfg.sequence;
  at.buffers = cfg.onnx_buffers;
  OnnxImport im;
  try {
    im = onnx_import(*cfg.onnx, at);
  } catch (const UserError& e) {
    if (cfg.where_onnx.empty()) throw;
    REMAT_USER_ERROR(cfg.where_onnx << ": " << e.what());
  }
  // A float model's [T, K] takes token_xent when the config says so (models/config.cpp).
  const bool sequence_output = !im.tokens && im.output.size() == 2;
  if (onnx_default_loss(im.output, im.tokens).empty() && !sequence_output)
    REMAT_USER_ERROR((cfg.where_onnx.empty() ? "" : cfg.where_onnx + ": ")
                     << cfg.onnx->path << ": the output is " << shape_str(im.output)
                     << " per sample; remat's losses read "
                     << (im.tokens ? "logits [N, T, V] of token ids (one class per token)"
                                   : "logits [N, K] (per sample), [N, K, H, W] (per pixel) or, "
                                     "with `loss: token_xent`, [N, T, K] (per position) of a "
                                     "float input"));
  cfg.layers = std::move(im.layers);
  if (im.tokens) {
    cfg.sequence = im.sequence;
    cfg.vocab = im.output.back();
    cfg.input.clear();
    cfg.classes = 0;
  } else {
    cfg.input = im.input;
    cfg.classes = sequence_output ? im.output[1] : im.output[0];
  }
  cfg.export_dims = std::move(im.onnx_dims);
  cfg.export_skip = std::move(im.constants);
  cfg.export_buffers.clear();
  for (auto& [name, b] : im.buffers)
    cfg.export_buffers[name] = {std::move(b.dims), std::move(b.values)};
  cfg.initial_values =
      std::make_shared<const std::map<std::string, std::vector<float>>>(std::move(im.initial));
  return OnnxApplied{im.output, im.static_batch};
}

}  // namespace remat
