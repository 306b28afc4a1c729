// derive_cheapest_r: the cheapest recomputation matrix R that makes a given S valid.
#include "solver/schedule.h"

#include "runtime/core/check.h"

namespace remat {

// For each stage t (Note [frontier-advancing stages]): node t is computed; walking down from t,
// a node is recomputed iff it is not held in S[t] and some node computed later in the stage
// needs it. Every recompute is therefore forced, so no valid R for this S computes less.
BoolMatrix derive_cheapest_r(const Problem& p, const BoolMatrix& S, bool compute_held) {
  const int n = p.size();
  REMAT_CHECK(S.rows() == n && S.cols() == n,
              "S is " << S.rows() << "x" << S.cols() << ", expected " << n << "x" << n);
  BoolMatrix R(n, n);
  std::vector<uint8_t> need(n, 0);
  for (int t = 0; t < n; ++t) {
    std::fill(need.begin(), need.end(), 0);
    need[t] = 1;
    // Retention: S[t+1][i] <= R[t][i] + S[t][i].
    for (int i = 0; compute_held && i < t && t + 1 < n; ++i)
      if (S(t + 1, i) && !S(t, i)) need[i] = 1;
    for (int i = t; i >= 0; --i) {
      if (!need[i]) continue;
      R.set(t, i, true);
      for (int d : p.nodes[i].deps)
        if (!S(t, d)) need[d] = 1;
    }
  }
  return R;
}

}  // namespace remat
