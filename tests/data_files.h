// Datasets the tests write in the field's on-disk layouts: llm.c token files and an
// ImageFolder tree of colour classes (JPEG and PNG), with the model config that trains on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/data.h"
#include "models/data_rng.h"
#include "models/images/image_decode.h"

namespace remat::test {

inline void write_file_bytes(const std::string& path, const std::string& bytes) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// llm.c's layout: 256 little-endian int32 (magic, version, count, zeros), then uint16 tokens.
// `declared` < 0 declares the true count.
inline void write_llmc_tokens(const std::string& path, const std::vector<uint16_t>& tokens,
                              int32_t magic = kTokenFileMagic, int32_t version = kTokenFileVersion,
                              int64_t declared = -1) {
  std::string b(1024, '\0');
  const int32_t header[3] = {magic, version,
                             static_cast<int32_t>(declared >= 0 ? declared
                                                                : static_cast<int64_t>(tokens.size()))};
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 4; ++j) b[static_cast<size_t>(4 * k + j)] = static_cast<char>(header[k] >> (8 * j));
  for (uint16_t t : tokens) {
    b.push_back(static_cast<char>(t & 0xFF));
    b.push_back(static_cast<char>(t >> 8));
  }
  write_file_bytes(path, b);
}

// root/{r,g,b}/<i>.{png,jpg}: class c of 3 is a noisy image of colour c (red, green, blue) of a
// random size from 18 to 37 pixels a side; odd i are JPEG, even i PNG.
inline void write_colour_tree(const std::string& root, int per_class, uint64_t seed) {
  Rng rng(seed);
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < per_class; ++i) {
      const int64_t w = 18 + rng.below(20), h = 18 + rng.below(20);
      std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
      for (size_t p = 0; p < px.size(); ++p)
        px[p] = static_cast<uint8_t>(std::clamp<double>(
            (static_cast<int>(p % 3) == c ? 170 : 60) + 40 * rng.normal(), 0, 255));
      const std::string name = root + "/" + "rgb"[c] + std::string("/") + std::to_string(i);
      if (i % 2) write_file_bytes(name + ".jpg", encode_jpeg(px.data(), w, h, 3, 90));
      else write_file_bytes(name + ".png", encode_png(px.data(), w, h, 3));
    }
}

// In `dir`: train/ (12 images a class), val/ (4 a class) and colours.yaml, a small CNN with
// batch norm that learns them at 16 x 16 with `val` validation. Returns the config's path.
inline std::string write_colours_dataset(const std::string& dir) {
  write_colour_tree(dir + "/train", 12, 1);
  write_colour_tree(dir + "/val", 4, 2);
  const std::string yaml = dir + "/colours.yaml";
  std::ofstream(yaml) << "name: colours\ninput: [3, 16, 16]\nclasses: 3\nbatch: 12\nseed: 4\n"
                         "optimizer: {op: sgd, lr: 0.1, momentum: 0.9}\n"
                         "data: {source: folder, path: train, seed: 5}\n"
                         "val: {source: folder, path: val}\n"
                         "layers:\n"
                         "  - {name: conv, op: conv2d, filters: 8, kernel: 3, padding: 1, activation: relu}\n"
                         "  - {name: bn, op: batchnorm}\n"
                         "  - {name: conv2, op: conv2d, filters: 8, kernel: 3, padding: 1, activation: relu}\n"
                         "  - {name: conv3, op: conv2d, filters: 8, kernel: 3, padding: 1, activation: relu}\n"
                         "  - {name: gap, op: global_avgpool}\n"
                         "  - {name: fc, op: dense, units: 3}\n";
  return yaml;
}

}  // namespace remat::test
