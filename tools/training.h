// The `train` command's work, separate from flag parsing: load a model config, build the
// training graph, pick a backend, and run N steps printing one line per step and a summary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace remat {

struct TrainOptions {
  std::string config;              // model YAML
  std::string device = "cpu";      // cpu | cuda
  int64_t steps = 50;
  std::optional<int64_t> batch;    // overrides the config's batch
  std::optional<Shape> input;      // overrides the config's per-sample input size
  uint64_t seed = 0;               // 0: use the config's seed
  int log_every = 1;               // print every k-th step (the first and last always)
};

struct TrainSummary {
  float first_loss = 0, last_loss = 0;
  std::vector<float> losses;       // every step's loss, in order
  double samples_per_second = 0;   // over all steps after the first
  int64_t peak_bytes = 0;          // largest measured per-step peak
};

// Trains and prints progress to stdout. Throws UserError for bad configs or devices.
TrainSummary run_training(const TrainOptions& opt);

}  // namespace remat
