// derive_cheapest_r: the cheapest recomputation matrix R that makes a given S valid.
#include "solver/schedule.h"

#include "runtime/core/check.h"

namespace remat {

namespace {

// For each stage t (Note [frontier-advancing stages]): node t is computed; walking down from t,
// a node is recomputed iff it is not held in S[t] and some node computed later in the stage
// needs it. Every recompute is therefore forced, so no valid R for this S computes less.
// `held_next` (or null: no retention) is S[t+1]; `arriving` (or null) the values prefetched in
// stage t, which stage t + 1 holds without t computing them.
void derive_row(const Problem& p, const uint8_t* held, const uint8_t* held_next,
                const uint8_t* arriving, int t, std::vector<uint8_t>& need, BoolMatrix& R) {
  const int n = p.size();
  // Retention: S[t+1][i] <= R[t][i] + S[t][i] (+ prefetch[t][i]).
  if (held_next && t + 1 < n && arriving)
    for (int i = 0; i < t; ++i) need[size_t(i)] = held_next[i] & ~held[i] & ~arriving[i];
  else if (held_next && t + 1 < n)
    for (int i = 0; i < t; ++i) need[size_t(i)] = held_next[i] & ~held[i];
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

}  // namespace

void derive_cheapest_r_row(const Problem& p, const BoolMatrix& S, int t, bool compute_held,
                           std::vector<uint8_t>& need, BoolMatrix& R) {
  const bool next = compute_held && t + 1 < p.size();
  derive_row(p, S.row(t), next ? S.row(t + 1) : nullptr, nullptr, t, need, R);
}

void derive_cheapest_r_row_with_copies(const Problem& p, const Schedule& s, int t,
                                       std::vector<uint8_t>& need, BoolMatrix& R) {
  const bool next = t + 1 < p.size();
  const uint8_t* arriving = s.has_copies() ? s.prefetch.row(t) : nullptr;
  derive_row(p, s.S.row(t), next ? s.S.row(t + 1) : nullptr, arriving, t, need, R);
}

BoolMatrix derive_cheapest_r_with_copies(const Problem& p, const Schedule& s) {
  const int n = p.size();
  BoolMatrix R(n, n);
  std::vector<uint8_t> need(size_t(n), 0);
  for (int t = 0; t < n; ++t) derive_cheapest_r_row_with_copies(p, s, t, need, R);
  return R;
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
