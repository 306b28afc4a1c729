// The stage relaxation of the Checkmate MILP.
//
// Note [stage relaxation]
// Group the n frontier-advancing stages (Note [frontier-advancing stages]) into T' super-stages,
// super-stage tau covering stages a..b. For any schedule (R, S) define
//   R'[tau, i] = 1 if i is computed in any stage of tau   (frontier nodes a..b: always),
//   S'[tau, i] = S[a, i]                                  (held entering the super-stage).
// Then (R', S') satisfies every row below, and sum_tau sum_i c_i R'[tau, i] <= the schedule's
// cost (R' counts a node once per super-stage however often it runs there). So the optimum of
// this model, and any bound a solver proves on it, is a lower bound on every schedule's cost:
// - dependencies: R'[tau, k] <= R'[tau, i] + S'[tau, i] for i a dependency of k, i < a (when
//   k runs its input is resident: computed earlier in tau, or held all the way from stage a);
// - retention: S'[tau+1, i] <= S'[tau, i] + R'[tau, i] (held entering tau + 1: held through
//   tau, or computed in it);
// - memory entering tau: constant + sum_i M_i S'[tau, i] <= budget (held values are resident
//   when stage a starts);
// - memory at the last frontier node b: constant + M_b + W_b + sum over deps of b of M_d +
//   sum over the other i of M_i S'[tau+1, i] <= budget (when b, the last node stage b computes,
//   runs, its inputs are resident, and so is every value held into the next stage).
// With one stage per super-stage the only thing given up is the memory inside a stage (values
// recomputed there, frees); wider super-stages also let a value be freed and recomputed inside
// one super-stage at the price of one computation. The model is a MIP like the Checkmate MILP
// but with T' rows of variables instead of n, and no U or FREE columns.
#include "solver/stage_relaxation.h"

#include <algorithm>

#include "runtime/core/check.h"
#include "solver/lp_builder.h"

namespace remat {

std::vector<int> uniform_stage_ends(int n, int width) {
  REMAT_CHECK(n > 0 && width > 0, "uniform_stage_ends(" << n << ", " << width << ")");
  std::vector<int> ends;
  for (int b = width - 1; b < n - 1; b += width) ends.push_back(b);
  ends.push_back(n - 1);
  return ends;
}

MilpModel relaxation_build(const Problem& p, int64_t budget, const std::vector<int>& stage_ends,
                           bool recompute_memory, double cost_cap) {
  const int n = p.size();
  const int T = static_cast<int>(stage_ends.size());
  REMAT_CHECK(T > 0 && stage_ends.back() == n - 1, "super-stages must end at node " << n - 1);
  for (int t = 1; t < T; ++t)
    REMAT_CHECK(stage_ends[t] > stage_ends[t - 1], "super-stage ends must ascend");
  REMAT_CHECK(budget > 0, "budget " << budget);
  MilpModel m;
  m.n = n;
  m.r_col.assign(size_t(T) * n, -1);
  m.s_col.assign(size_t(T) * n, -1);
  const auto users = problem_users(p);
  const auto md = max_descendant(p, users);
  m.byte_scale = double(budget);
  double cost_sum = 0;
  int cost_cnt = 0;
  for (const auto& nd : p.nodes)
    if (nd.cost > 0) cost_sum += nd.cost, ++cost_cnt;
  m.cost_scale = cost_cnt ? cost_sum / cost_cnt : 1.0;
  auto bytes = [&](int i) { return double(p.nodes[i].bytes) / m.byte_scale; };
  const double constant = double(p.constant_bytes) / m.byte_scale;
  auto first = [&](int t) { return t == 0 ? 0 : stage_ends[t - 1] + 1; };
  auto r = [&](int t, int i) { return m.r_col[size_t(t) * n + i]; };
  auto s = [&](int t, int i) { return t < T ? m.s_col[size_t(t) * n + i] : -1; };

  LpBuilder b{m, {}};
  for (int t = 0; t < T; ++t) {
    const int a = first(t), e = stage_ends[t];
    for (int i = 0; i <= e; ++i) {
      const double c = p.nodes[i].cost / m.cost_scale;
      if (i >= a) {
        m.r_col[size_t(t) * n + i] = b.add_col(1, 1, c, true);
      } else if (md[i] >= a) {
        m.r_col[size_t(t) * n + i] = b.add_col(0, 1, c, true);
        if (t > 0) m.s_col[size_t(t) * n + i] = b.add_col(0, 1, 0, true);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    const int a = first(t), e = stage_ends[t];
    // Dependencies of everything that may run in tau, on values from before it.
    for (int k = 0; k <= e; ++k) {
      if (r(t, k) < 0) continue;
      for (int i : p.nodes[k].deps)
        if (i < a) b.add_row(-1e30, 0, {{r(t, k), 1}, {r(t, i), -1}, {s(t, i), -1}});
    }
    // Retention into the next super-stage.
    if (t + 1 < T)
      for (int i = 0; i < a; ++i)
        if (s(t + 1, i) >= 0) b.add_row(-1e30, 0, {{s(t + 1, i), 1}, {r(t, i), -1}, {s(t, i), -1}});
    // Memory entering tau.
    if (t > 0) {
      std::vector<std::pair<int, double>> row;
      for (int i = 0; i < a; ++i) row.push_back({s(t, i), bytes(i)});
      b.add_row(-1e30, 1.0 - constant, row);
    }
    // Memory while a node runs that tau computes (recomputes) from before it: its inputs and
    // output, plus every value held through tau (Y), resident all along tau.
    if (recompute_memory && t > 0 && t + 1 < T) {
      std::vector<int> y(size_t(n), -1);
      std::vector<std::pair<int, double>> zrow;
      double z_max = 0;
      const auto& last_deps = p.nodes[e].deps;
      for (int i = 0; i < a; ++i) {
        if (s(t, i) < 0) continue;
        const bool used_last = std::find(last_deps.begin(), last_deps.end(), i) != last_deps.end();
        if (!used_last && s(t + 1, i) < 0) continue;
        y[size_t(i)] = b.add_col(0, 1, 0, false);
        if (used_last)  // Y >= S[tau] - R[tau]: held entering, read by the last node of tau
          b.add_row(-1e30, 0, {{s(t, i), 1}, {r(t, i), -1}, {y[size_t(i)], -1}});
        else  // Y >= S[tau] + S[tau+1] - R[tau] - 1: held entering and leaving
          b.add_row(-1e30, 1, {{s(t, i), 1}, {s(t + 1, i), 1}, {r(t, i), -1}, {y[size_t(i)], -1}});
        zrow.push_back({y[size_t(i)], bytes(i)});
        z_max += bytes(i);
      }
      if (!zrow.empty()) {
        const int z = b.add_col(0, z_max, 0, false);
        zrow.push_back({z, -1});
        b.add_row(0, 0, zrow);
        for (int k = 0; k < a; ++k) {
          if (r(t, k) < 0) continue;
          // Z + sum over k and its deps of M (1 - Y) + W_k <= 1 - constant + big_m (1 - R[k])
          double own = bytes(k) + double(p.nodes[k].workspace_bytes) / m.byte_scale;
          std::vector<std::pair<int, double>> row{{z, 1}};
          row.push_back({y[size_t(k)], -bytes(k)});
          for (int d : p.nodes[k].deps) {
            own += bytes(d);
            row.push_back({y[size_t(d)], -bytes(d)});
          }
          // One stage per super-stage: a node it recomputes before k (ascending order) for
          // the last node is resident while k runs.
          double earlier = 0;
          if (a == e)
            for (int j : last_deps) {
              const auto& kd = p.nodes[k].deps;
              if (j >= k || r(t, j) < 0 || std::find(kd.begin(), kd.end(), j) != kd.end()) continue;
              row.push_back({r(t, j), bytes(j)});
              earlier += bytes(j);
            }
          const double big_m = std::max(0.0, constant + z_max + own + earlier - 1.0);
          if (big_m <= 0) continue;  // fits whatever is held
          row.push_back({r(t, k), big_m});
          b.add_row(-1e30, 1.0 - constant - own + big_m, row);
        }
      }
    }
    // Memory while the last frontier node e runs.
    const ProblemNode& last = p.nodes[e];
    double fixed = constant + bytes(e) + double(last.workspace_bytes) / m.byte_scale;
    for (int d : last.deps) fixed += bytes(d);
    if (t + 1 < T) {
      std::vector<std::pair<int, double>> row;
      for (int i = 0; i < e; ++i) {
        if (std::find(last.deps.begin(), last.deps.end(), i) != last.deps.end()) continue;
        row.push_back({s(t + 1, i), bytes(i)});
      }
      b.add_row(-1e30, 1.0 - fixed, row);
    }
  }
  if (cost_cap > 0) {
    std::vector<std::pair<int, double>> row;
    for (int j = 0; j < m.num_cols(); ++j)
      if (m.obj[size_t(j)] != 0) row.push_back({j, m.obj[size_t(j)]});
    b.add_row(-1e30, cost_cap / m.cost_scale * (1 + 1e-9), row);
  }
  b.finish();
  return m;
}

}  // namespace remat

namespace remat {

// Note [stage relaxation rounding]
// From the values held entering each super-stage to a full schedule. The relaxation computes a
// value at most once per super-stage, so the schedule, built stage by stage, holds what a stage
// computed (or had) for the rest of the super-stage while a later node of it reads the value
// directly, and into the next super-stage where that holds it. Each stage recomputes what its
// nodes need and does not have (as derive_cheapest_r does); the last stage of a super-stage
// also computes values the next one holds but it did not have. The simulator then says what
// the schedule costs and where it peaks.
Schedule schedule_from_held_sets(const Problem& p, const std::vector<int>& stage_ends,
                                 const std::vector<std::vector<uint8_t>>& held) {
  const int n = p.size();
  const int T = static_cast<int>(stage_ends.size());
  const auto users = problem_users(p);
  Schedule s;
  s.S = BoolMatrix(n, n);
  s.R = BoolMatrix(n, n);
  std::vector<uint8_t> need(static_cast<size_t>(n));
  for (int tau = 0, a = 0; tau < T; a = stage_ends[size_t(tau)] + 1, ++tau) {
    const int b = stage_ends[size_t(tau)];
    const std::vector<uint8_t>* next = tau + 1 < T ? &held[size_t(tau) + 1] : nullptr;
    for (int i = 0; i < a; ++i)
      if (held[size_t(tau)][size_t(i)]) s.S.set(a, i, true);
    for (int t = a; t <= b; ++t) {
      std::fill(need.begin(), need.end(), 0);
      need[size_t(t)] = 1;
      if (t == b && next)  // the next super-stage holds it: have it by the end of b
        for (int i = 0; i < b; ++i)
          if ((*next)[size_t(i)] && !s.S(t, i)) need[size_t(i)] = 1;
      for (int i = t; i >= 0; --i) {
        if (!need[size_t(i)]) continue;
        s.R.set(t, i, true);
        for (int d : p.nodes[size_t(i)].deps)
          if (!s.S(t, d)) need[size_t(d)] = 1;
      }
      if (t + 1 >= n) break;
      for (int i = 0; i <= t; ++i) {
        if (!s.S(t, i) && !s.R(t, i)) continue;
        bool keep = next && (*next)[size_t(i)];
        if (t < b)
          for (int j : users[size_t(i)]) keep |= (j > t && j <= b);
        if (keep) s.S.set(t + 1, i, true);
      }
    }
  }
  s.R = derive_cheapest_r(p, s.S);
  return s;
}

std::vector<std::vector<uint8_t>> relaxation_held_sets(const MilpModel& m,
                                                       const std::vector<int>& stage_ends,
                                                       const double* x, double threshold) {
  const int n = m.n;
  std::vector<std::vector<uint8_t>> held(stage_ends.size(), std::vector<uint8_t>(size_t(n), 0));
  for (size_t t = 1; t < stage_ends.size(); ++t)
    for (int i = 0; i < n; ++i) {
      const int col = m.s_col[t * size_t(n) + size_t(i)];
      if (col >= 0 && x[col] >= threshold) held[t][size_t(i)] = 1;
    }
  return held;
}

}  // namespace remat
