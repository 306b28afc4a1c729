// Config overrides the zoo tests share to run a full-size network at a small input.
#pragma once

#include <string>
#include <vector>

namespace remat::test {

// PSPNet's pyramid at a 192x192 input (f5 6x6): Keras's pool kernels and upsampling factors for
// that size (the configs hold those of 384x576, Keras computes them from f5's size).
inline std::vector<std::string> psp_overrides_6x6() {
  std::vector<std::string> o;
  for (int bins : {1, 2, 3, 6}) {
    const std::string k = std::to_string(6 / bins);
    o.push_back("layers.psp" + std::to_string(bins) + "_pool.kernel=[" + k + "," + k + "]");
    o.push_back("layers.psp" + std::to_string(bins) + "_up.factor=[" + k + "," + k + "]");
  }
  return o;
}

}  // namespace remat::test
