// libFuzzer harness: command-line config overrides (KEY=VALUE, one per input line) applied to
// configs/small_cnn.yaml, then validated and built into the forward graph as train would.
#include <algorithm>
#include <string>
#include <vector>

#include "runtime/io/input_file.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  static const std::string config_path = std::string(REMAT_SOURCE_DIR) + "/configs/small_cnn.yaml";
  static const std::string config_text = read_file(config_path, "model config");
  static const OpRegistry ops = make_builtin_registry();
  std::vector<std::string> overrides;
  const std::string text = fuzz::as_text(data, size);
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    overrides.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  fuzz::user_errors_only([&] {
    const ModelConfig cfg = parse_model_config(config_text, config_path, overrides);
    describe_overrides(cfg);
    constexpr size_t kMaxBuiltLayers = 64;
    if (cfg.layers.size() > kMaxBuiltLayers) return;
    build_forward_graph(cfg, ops, {});
  });
  return 0;
}
