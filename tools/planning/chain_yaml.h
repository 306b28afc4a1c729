// Linear-chain model configs for solver studies: the YAML text of a chain of N conv layers plus
// a pooled classifier head (Checkmate's `linear_model`), written by the make_chain tool.
#pragma once

#include <cstdint>
#include <string>

namespace remat {

struct ChainOptions {
  int64_t layers = 16;          // conv layers in the chain (>= 1)
  int64_t width = 64;           // filters of every conv (C)
  int64_t height = 224;         // per-sample input H
  int64_t width_px = 224;       // per-sample input W
  int64_t classes = 1000;
  int64_t batch = 32;           // N
  bool same_padding = false;    // false: 'valid' (each conv shrinks H and W by 2, as Checkmate)
  bool relu = false;            // fused ReLU after each conv (Checkmate's chain has none)
  std::string name;             // "" -> "linear<layers>"
  std::string command;          // the command line, recorded in the file's header comment
};

// Parses "HxW" (e.g. "224x224") into opt->height, opt->width_px; UserError naming --size.
void chain_parse_size(const std::string& text, ChainOptions* opt);

// The config text: conv0..conv<N-1> (3x3, stride 1, no bias), global_avgpool, dense `classes`.
// Throws UserError naming the flag when the options are out of range or a valid-padding chain
// would shrink the image to nothing.
std::string chain_yaml(const ChainOptions& opt);

}  // namespace remat
