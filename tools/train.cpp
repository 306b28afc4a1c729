// `train`: trains a model from a YAML config. main() only parses flags and dispatches.
#include "models/build.h"
#include "runtime/check.h"
#include "tools/cli.h"
#include "tools/training.h"

int main(int argc, char** argv) {
  return remat::run_main([&] {
    remat::FlagParser f("train", "Trains a model described in YAML (see README).");
    f.add("config", "FILE", "model YAML (required)")
        .add("device", "cpu|cuda", "where to train", "cpu")
        .add("steps", "N", "training steps", "50")
        .add("batch", "N", "override the config's batch size")
        .add("input", "CxHxW", "override the per-sample input size, e.g. 3x32x32")
        .add("seed", "S", "override the config's seed (weights, dropout)")
        .add("log-every", "K", "print every K-th step", "1");
    if (!f.parse(argc, argv)) return 0;
    if (!f.has("config")) throw remat::UserError("train: --config FILE is required\n" + f.usage());
    remat::TrainOptions opt;
    opt.config = f.get("config");
    opt.device = f.get_choice("device", {"cpu", "cuda"});
    opt.steps = f.get_int("steps", 1, 100000000);
    if (f.has("batch")) opt.batch = f.get_int("batch", 1, 1 << 20);
    if (f.has("input")) opt.input = remat::parse_input_size(f.get("input"), "train: --input");
    if (f.has("seed")) opt.seed = static_cast<uint64_t>(f.get_int("seed", 1, INT64_MAX));
    opt.log_every = static_cast<int>(f.get_int("log-every", 1, 1000000));
    remat::run_training(opt);
    return 0;
  });
}
