// `make_chain`: writes a linear-chain model config (tools/chain_yaml.h). main() only parses flags.
#include <iostream>

#include "models/config.h"
#include "runtime/io/atomic_file.h"
#include "tools/planning/chain_yaml.h"
#include "tools/common/cli.h"

int main(int argc, char** argv) {
  return remat::run_main([&] {
    remat::FlagParser f("make_chain", "Writes a YAML config of a chain of N conv layers + head.");
    f.add("layers", "N", "conv layers in the chain", "16")
        .add("width", "C", "filters of every conv", "64")
        .add("size", "HxW", "per-sample input height x width", "224x224")
        .add("classes", "K", "classes of the dense head", "1000")
        .add("batch", "N", "batch size written into the config", "32")
        .add("padding", "valid|same", "conv padding (valid: as Checkmate's chain)", "valid")
        .add("relu", "", "fuse a ReLU into every conv")
        .add("name", "NAME", "model name (default linear<N>)")
        .add("output", "FILE", "where to write the YAML (default: stdout)")
        .alias("-o", "output");
    if (!f.parse(argc, argv)) return 0;
    remat::ChainOptions opt;
    // The chain's convs plus its pooling and dense head stay within a model's layer limit.
    opt.layers = f.get_int("layers", 1, remat::kMaxModelLayers - 2);
    opt.width = f.get_int("width", 1, 1 << 20);
    remat::parse_flag_value([&] { remat::chain_parse_size(f.get("size"), &opt); });
    opt.classes = f.get_int("classes", 1, 1 << 24);
    opt.batch = f.get_int("batch", 1, 1 << 20);
    opt.same_padding = f.get_choice("padding", {"valid", "same"}) == "same";
    opt.relu = f.has("relu");
    opt.name = f.get("name");
    opt.command = "make_chain";
    for (int i = 1; i < argc; ++i) opt.command += std::string(" ") + argv[i];
    const std::string text = remat::chain_yaml(opt);
    if (!f.has("output")) {
      std::cout << text;
      return 0;
    }
    remat::write_file_atomic(f.get("output"), text);
    return 0;
  });
}
