// libFuzzer harness: the ONNX importer (Note [ONNX import]) on arbitrary bytes: the protobuf
// parse and ONNX's checker, then the translation of whatever they accept at a small input size
// (images 3 x 8 x 8, sequences of 8), and the forward graph built from it.
#include "models/onnx/onnx_config.h"
#include "models/onnx/onnx_source.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  static const OpRegistry ops = make_builtin_registry();
  fuzz::user_errors_only([&] {
    ModelConfig cfg;
    cfg.name = "fuzz";
    cfg.batch = 2;
    cfg.onnx = onnx_parse(fuzz::as_text(data, size), "fuzz.onnx");
    const OnnxApplied im = onnx_apply(cfg, OnnxOptions{Shape{3, 8, 8}, int64_t{8}});
    cfg.loss = onnx_default_loss(im.output, cfg.tokens());
    build_forward_graph(cfg, ops);
  });
  return 0;
}
