// The square input sizes an image model can be searched over (`maxbatch --vary input`): the
// sizes its architecture builds at, in steps of its stride product, up to the first whose
// working set alone exceeds a budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "solver/strategies.h"
#include "tools/planning/problem_flags.h"

namespace remat {

// Note [input-size search]: the paper's other result is the largest input, not the largest
// batch: how large an image trains at all under a budget. Costs and bytes are not linear in the
// input size (a dense layer after a flatten grows its weights with H W), so every probe builds
// the graph at its size, as a sequence length is searched (SizeFamily). Sizes are square,
// H = W = k x step: step is the architecture's stride product (the input's side over the
// smallest feature map's that grows with the input, rounded down to a power of two: 32
// for VGG19, ResNet-50 and PSPNet, 16 for U-Net), or --input-step. Sizes the architecture
// refuses (a concat of maps that no longer match, PSPNet's bins that do not divide its feature
// map; Note [size-relative attributes]) are skipped, not errors: the search runs over
// the sizes that build, in order, and the answer names how many were skipped. The list ends
// at the first size whose constant or largest node's working set exceeds the budget (proven
// too large: every larger size needs more), or at kMaxInputSide; its last size is then the
// search's proven upper bound.
constexpr int64_t kMaxInputSide = int64_t{1} << 15;
constexpr int64_t kMaxInputProbes = 4096;  // sizes listed, each a graph built

struct InputSizes {
  int64_t channels = 0;
  int64_t step = 0;
  std::vector<int64_t> sizes;    // H = W of each size that builds, ascending
  std::vector<int64_t> refused;  // multiples of step in that range that do not build
  std::string refused_why;       // the first refusal's message
  std::string end;               // why the list ends: "the constant exceeds the budget at 1024"
};

// UserError for a token model (its size is the sequence: --vary seq) and for a model that
// builds at no multiple of step up to kMaxInputSide.
InputSizes input_sizes(const ConfigProblem& c, int64_t budget, std::optional<int64_t> step);

// The family of problems over `sizes` (index i: sizes.sizes[i - 1]) for max_size.
SizeFamily input_size_family(const ConfigProblem& c, const InputSizes& sizes);

// A max_size answer over the family's indices as sizes (H): the answer, its bounds and the
// size its proof names (with_sizes).
MaxBatchResult as_input_sizes(MaxBatchResult r, const InputSizes& sizes);

}  // namespace remat
