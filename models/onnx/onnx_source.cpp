// onnx_read: parse with protobuf, check with onnx::checker, and refuse opsets we do not read.
#include "models/onnx/onnx_source.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>


#include "runtime/core/check.h"
#include "runtime/io/input_file.h"

namespace remat {

bool onnx_import_built() { return true; }

std::shared_ptr<const OnnxSource> onnx_read(const std::string& path) {
  // read_file refuses a FIFO or device, naming it. protobuf refuses messages of 2 GiB and more; ONNX keeps larger weights in external files.
  return onnx_parse(read_file(path, "ONNX model", (int64_t{1} << 31) - 1), path);
}

std::shared_ptr<const OnnxSource> onnx_parse(const std::string& bytes, const std::string& path) {
  auto src = std::make_shared<OnnxSource>();
  src->path = path;
  src->model = std::make_shared<onnx::ModelProto>();
  if (bytes.empty() || !src->model->ParseFromString(bytes))
    REMAT_USER_ERROR(path << ": not an ONNX model (the file does not parse as an ONNX "
                             "ModelProto: truncated, or another format)");
  if (!src->model->has_graph() || src->model->graph().node_size() == 0)
    REMAT_USER_ERROR(path << ": not an ONNX model (no graph, or a graph without nodes)");
  for (const auto& o : src->model->opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") src->opset = o.version();
  if (src->opset < kOnnxMinOpset || src->opset > kOnnxMaxOpset)
    REMAT_USER_ERROR(path << ": opset " << src->opset << " of the default ONNX domain is not "
                          << "supported (supported: " << kOnnxMinOpset << " to " << kOnnxMaxOpset
                          << "; export with torch.onnx.export(..., opset_version=17))");
  try {
    onnx::checker::check_model(*src->model);
  } catch (const std::exception& e) {
    std::string msg;  // the checker's message on one line
    for (char c : std::string(e.what())) {
      const char w = c == '\n' ? ' ' : c;
      if (!(w == ' ' && (msg.empty() || msg.back() == ' '))) msg += w;
    }
    while (!msg.empty() && msg.back() == ' ') msg.pop_back();
    REMAT_USER_ERROR(path << ": invalid ONNX model: " << msg);
  }
  return src;
}

}  // namespace remat
