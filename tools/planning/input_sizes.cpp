// Square input sizes of an image model for the input-size search (Note [input-size search]).
#include "tools/planning/input_sizes.h"

#include <algorithm>
#include <map>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

// The input's height over the smallest feature map's that grows with it, rounded down to a
// power of two. `twice`: the same graph at twice the input, where it builds: a map no larger
// there (a global pool, PSPNet's bins) does not bound the step; without it every map but the
// one-pixel ones counts.
int64_t stride_product(const Graph& fwd, const Graph* twice, bool channels_last, int64_t side) {
  const bool compare = twice && twice->values.size() == fwd.values.size();
  auto height = [&](const Value& v) {
    return v.desc.shape.size() == 4 ? v.desc.shape[channels_last ? 1 : 2] : 0;
  };
  int64_t smallest = side;
  for (size_t k = 0; k < fwd.values.size(); ++k) {
    const Value& v = fwd.values[k];
    const int64_t h = height(v);
    const bool scales = compare ? height(twice->values[k]) > h : h > 1;
    if (v.kind == ValueKind::Activation && h > 0 && scales) smallest = std::min(smallest, h);
  }
  int64_t step = 1;
  while (smallest > 0 && 2 * step * smallest <= side) step *= 2;
  return step;
}

class SizeProbe {
 public:
  SizeProbe(const ConfigProblem& c, int64_t budget)
      : c_(c), cfg_(c.loaded ? *c.loaded : load_model_config(c.config, c.overrides)),
        ops_(make_builtin_registry()), budget_(budget) {
    if (cfg_.tokens())
      REMAT_USER_ERROR(c.config << ": a token model: its input size is the sequence length "
                                   "(--vary seq), not an image size");
    if (cfg_.input.size() != 3)
      REMAT_USER_ERROR(c.config << ": input " << shape_str(cfg_.input)
                                << " is not an image [C, H, W]: its size cannot vary");
  }

  const ModelConfig& config() const { return cfg_; }
  Shape input_at(int64_t side) const { return Shape{cfg_.input[0], side, side}; }

  // The forward graph at `side` (at the config's own input), or the reason the architecture
  // refuses it.
  std::optional<Graph> build(int64_t side, std::string* why) const {
    return build_at(input_at(side), why);
  }
  std::optional<Graph> build_own(std::string* why) const { return build_at(cfg_.input, why); }
  std::optional<Graph> build_at(const Shape& input, std::string* why) const {
    BuildOptions bo;
    bo.batch = c_.batch;  // the search's: train-mode batch norm needs two values per channel
    bo.input = input;
    bo.precision = c_.precision;
    try {
      return build_forward_graph(cfg_, ops_, bo);
    } catch (const UserError& e) {
      if (why) *why = e.what();
      return std::nullopt;
    }
  }

  // "" when the problem at `side` may fit the budget, else why it cannot: its constant, or
  // its largest node's working set, exceeds the budget.
  std::string too_large(int64_t side) const {
    ConfigProblem at = c_;
    at.input = input_at(side);
    const Problem p = problem_from_config(at);
    if (p.constant_bytes >= budget_)
      return "the constant (" + format_bytes(p.constant_bytes) + ") reaches the budget at " +
             std::to_string(side) + " x " + std::to_string(side);
    if (problem_min_budget(p) > budget_)
      return "the working set of the largest node exceeds the budget at " + std::to_string(side) +
             " x " + std::to_string(side);
    return "";
  }

 private:
  const ConfigProblem& c_;
  ModelConfig cfg_;
  OpRegistry ops_;
  int64_t budget_;
};

}  // namespace

InputSizes input_sizes(const ConfigProblem& c, int64_t budget, std::optional<int64_t> step) {
  const SizeProbe probe(c, budget);
  InputSizes out;
  out.channels = probe.config().input[0];
  if (step) {
    out.step = *step;
  } else {
    std::string why;
    const std::optional<Graph> own = probe.build_own(&why);
    if (!own) REMAT_USER_ERROR(c.config << ": does not build at its own input: " << why);
    const Shape& in = probe.config().input;
    const std::optional<Graph> twice = probe.build_at(Shape{in[0], 2 * in[1], 2 * in[2]}, nullptr);
    out.step = stride_product(*own, twice ? &*twice : nullptr, probe.config().channels_last,
                              in[1]);
  }
  // The first multiple of step (from 1) that is proven too large, by doubling then bisection
  // over the multiples that build; sizes that do not build are passed over.
  // Each multiple is built, and checked against the budget, once.
  const int64_t last = kMaxInputSide / out.step;
  std::map<int64_t, bool> built;
  auto builds = [&](int64_t k) {
    auto it = built.find(k);
    if (it != built.end()) return it->second;
    std::string why;
    const bool ok = probe.build(k * out.step, &why).has_value();
    if (!ok && out.refused_why.empty()) out.refused_why = why;
    return built[k] = ok;
  };
  std::map<int64_t, std::string> too_large_why;  // "" for a size that may fit
  auto too_large_at = [&](int64_t j) -> const std::string& {
    auto it = too_large_why.find(j);
    if (it == too_large_why.end()) it = too_large_why.emplace(j, probe.too_large(j * out.step)).first;
    return it->second;
  };
  // The multiple of the first size from the k-th on that builds (within kNearby) and is too
  // large, or 0 when it fits or none builds.
  constexpr int64_t kNearby = 8;
  auto too_large = [&](int64_t k) -> int64_t {
    for (int64_t j = k; j < k + kNearby && j <= last; ++j)
      if (builds(j)) return too_large_at(j).empty() ? 0 : j;
    return 0;
  };
  int64_t lo = 0, hi = 1;  // no multiple up to lo is known too large
  while (hi <= last && too_large(hi) == 0) lo = hi, hi *= 2;
  hi = std::min(hi, last + 1);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (too_large(mid) > 0 ? hi : lo) = mid;
  }
  // The list runs to the size proven too large (its last), or to the largest side searched.
  const int64_t end = hi <= last ? too_large(hi) : last;
  if (end > kMaxInputProbes)
    REMAT_USER_ERROR(c.config << ": " << end << " input sizes in steps of " << out.step
                              << " to search; give a larger --input-step");
  for (int64_t k = 1; k <= end; ++k)
    (builds(k) ? out.sizes : out.refused).push_back(k * out.step);
  out.end = hi <= last ? too_large_at(end)
                       : "the largest side searched (" + std::to_string(last * out.step) + ")";
  if (out.sizes.empty())
    REMAT_USER_ERROR(c.config << ": builds at no square input of a multiple of " << out.step
                              << " up to " << end * out.step << ": "
                              << out.refused_why);
  return out;
}

SizeFamily input_size_family(const ConfigProblem& c, const InputSizes& sizes) {
  SizeFamily f;
  const Shape base{sizes.channels, 0, 0};
  f.at = [c, list = sizes.sizes, base](int64_t i) {
    ConfigProblem at = c;
    const int64_t side = list.at(static_cast<size_t>(i - 1));
    at.input = Shape{base[0], side, side};
    return problem_from_config(at);
  };
  f.max_size = static_cast<int64_t>(sizes.sizes.size());
  return f;
}

MaxBatchResult as_input_sizes(MaxBatchResult r, const InputSizes& sizes) {
  return with_sizes(std::move(r), [&](int64_t i) {
    return sizes.sizes.at(static_cast<size_t>(std::min<int64_t>(i, sizes.sizes.size()) - 1));
  });
}

}  // namespace remat
