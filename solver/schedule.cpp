// derive_cheapest_r: the cheapest recomputation matrix R that makes a given S valid.
#include "solver/schedule.h"

#include "runtime/core/check.h"

namespace remat {

// For each stage t (Note [frontier-advancing stages]): node t is computed; walking down from t,
// a node is recomputed iff it is not held in S[t] and some node computed later in the stage
// needs it. Every recompute is therefore forced, so no valid R for this S computes less.
void derive_cheapest_r_row(const Problem& p, const BoolMatrix& S, int t, bool compute_held,
                           std::vector<uint8_t>& need, BoolMatrix& R) {
  const int n = p.size();
  const uint8_t* held = S.row(t);
  // Retention: S[t+1][i] <= R[t][i] + S[t][i].
  if (compute_held && t + 1 < n) {
    const uint8_t* held_next = S.row(t + 1);
    for (int i = 0; i < t; ++i) need[size_t(i)] = held_next[i] & ~held[i];
  }
  need[size_t(t)] = 1;
  // Walking down, every needed node is computed (Note [row scans] skips the others); `need`
  // is cleared behind the walk.
  for (int i = last_set(need.data(), 0, t + 1); i >= 0; i = last_set(need.data(), 0, i)) {
    R.set(t, i, true);
    for (int d : p.nodes[i].deps)
      if (!held[d]) need[size_t(d)] = 1;
    need[size_t(i)] = 0;
  }
}

BoolMatrix derive_cheapest_r(const Problem& p, const BoolMatrix& S, bool compute_held) {
  const int n = p.size();
  REMAT_CHECK(S.rows() == n && S.cols() == n,
              "S is " << S.rows() << "x" << S.cols() << ", expected " << n << "x" << n);
  BoolMatrix R(n, n);
  std::vector<uint8_t> need(size_t(n), 0);
  for (int t = 0; t < n; ++t) derive_cheapest_r_row(p, S, t, compute_held, need, R);
  return R;
}

}  // namespace remat
