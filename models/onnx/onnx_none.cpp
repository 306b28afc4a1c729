// The importer's entry points in a build without ONNX (Note [ONNX in the portable build]):
// each says so.
#include "models/onnx/onnx_import.h"
#include "runtime/core/check.h"

namespace remat {

bool onnx_import_built() { return false; }

std::shared_ptr<const OnnxSource> onnx_read(const std::string& path) {
  REMAT_USER_ERROR(path << ": this build of remat has no ONNX importer (built without "
                           "libonnx-dev; tools/scripts/setup.sh installs it)");
}

std::shared_ptr<const OnnxSource> onnx_parse(const std::string&, const std::string& path) {
  return onnx_read(path);
}

OnnxImport onnx_import(const OnnxSource& src, const OnnxOptions&) {
  REMAT_USER_ERROR(src.path << ": this build of remat has no ONNX importer");
}

std::string onnx_supported_ops() { return ""; }

}  // namespace remat
