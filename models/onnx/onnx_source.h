// An ONNX model file read with ONNX's own library (protobuf messages and onnx::checker), checked
// once, and kept for the importer, which translates it at each input size asked for
// (onnx_import.h). Built only where CMake found ONNX; elsewhere onnx_read says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace onnx {
class ModelProto;
}

namespace remat {

// The opsets of the default domain the importer reads: what torch.onnx.export writes at
// opset_version 13 to 17 (Debian's ONNX 1.12 knows up to 17).
constexpr int64_t kOnnxMinOpset = 13;
constexpr int64_t kOnnxMaxOpset = 17;

struct OnnxSource {
  std::string path;
  int64_t opset = 0;                          // of the default domain
  std::shared_ptr<onnx::ModelProto> model;    // parsed and checked
};

// False in a build without ONNX (the importer is left out; Note [ONNX in the portable build]).
bool onnx_import_built();

// Reads and checks `path`: a regular file that parses as an ONNX ModelProto, passes
// onnx::checker (a graph in topological order, every input produced, no cycle), and imports
// an opset of the default domain in [kOnnxMinOpset, kOnnxMaxOpset]. Every failure is a
// UserError starting with the path.
std::shared_ptr<const OnnxSource> onnx_read(const std::string& path);
// The same checks on the bytes of a file; `path` names it in errors.
std::shared_ptr<const OnnxSource> onnx_parse(const std::string& bytes, const std::string& path);

}  // namespace remat
