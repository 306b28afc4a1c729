// Builds the Checkmate MILP (or its max-batch variant) as column-major arrays.
//
// Note [tight Checkmate formulation]
// Stages follow Note [frontier-advancing stages]; memory follows Note [memory semantics].
// U[t,k] is the resident bytes just after node k's slot in stage t, before the frees that
// follow k:
//   U[t,0] = constant + sum_i M_i S[t,i] + M_0 R[t,0]
//   U[t,k] = U[t,k-1] + M_k R[t,k] - sum_{i in deps(k-1) + {k-1}} M_i FREE[t,i,k-1]
//   U[t,k] + W_k R[t,k] <= budget            (a row only where W_k > 0 and k < t; else a bound)
// Differences from the paper that matter for Cbc:
// - FREE only lowers memory, so it needs only upper bounds: FREE[t,i,k] <= R[t,k],
//   FREE <= 1 - S[t+1,i], FREE <= 1 - R[t,j] for every user j of i with k < j <= t; no big-M
//   rows (the LP relaxation is tighter). Plus one "link" row per (t, i) with FREE columns:
//     sum_k FREE[t,i,k] + S[t+1,i] <= S[t,i] + R[t,i]
//   (a value is freed at most once, only if it is resident, and never if it is held on).
//   Valid: at integral (R, S) two FREE[t,i,k] can not both be 1 (the later k is a user of i
//   computed in t), FREE[t,i,k] = 1 needs i resident (k = i: R[t,i]; else R[t,k] and the
//   dependency row), and S[t+1,i] = 1 forces every FREE[t,i,.] to 0. Without it the LP frees
//   bytes it never charged (S[t,i] = S[t+1,i] = 0.5 with FREE = 0.5). With the link rows FREE
//   can be continuous: at integral (R, S) the largest allowed FREE is 0 or 1, and U only needs
//   FREE large enough (uniform 16-layer chain, budget 7: 0.3-0.5 s to optimal vs 12 s with
//   binary FREE and no link rows; binary FREE without link rows bounds far worse).
// - Only columns that can be nonzero exist: R lower-triangular with R[t,t] fixed to 1 by
//   bounds, S strictly lower-triangular, and R[t,i] = S[t,i] = 0 (no column) once no node
//   >= t depends on i transitively (a value nothing later can use is never worth holding).
// - Bytes and costs are scaled to O(1) (bytes by the budget, costs by their mean).
// paper_formulation = true gives the paper's model instead (binary FREE with the big-M
// "hazard" rows, every R/S column) for comparison in tools/solver_bench.
#include "solver/milp_model.h"

#include <algorithm>

#include "runtime/core/check.h"
#include "solver/lp_builder.h"

namespace remat {
namespace {

// Users j of i with k < j <= t (the ones that keep i alive after k in stage t).
std::vector<int> later_users(const std::vector<int>& users_i, int k, int t) {
  std::vector<int> out;
  for (int j : users_i)
    if (j > k && j <= t) out.push_back(j);
  return out;
}

}  // namespace

std::vector<int> max_descendant(const Problem& p, const std::vector<std::vector<int>>& users) {
  std::vector<int> md(p.size());
  for (int i = p.size() - 1; i >= 0; --i) {
    md[i] = i;
    for (int j : users[i]) md[i] = std::max(md[i], md[j]);
  }
  return md;
}

namespace {

// milp_build's parts: the scales, the columns (R, S, FREE, U, P), then the rows (dependencies,
// retention, FREE, links, the U recurrence with the memory rows, the cost cap). Each adds to
// the model what its comment says, in this order (the column and row numbers follow from it).
class MilpAssembly {
 public:
  MilpAssembly(const Problem& p, const MilpBuildOptions& opt, MilpModel& m)
      : p_(p), opt_(opt), m_(m), b_{m, {}}, n_(p.size()), paper_(opt.paper_formulation),
        min_peak_(opt.objective == MilpObjective::MinPeak), users_(problem_users(p)),
        md_(max_descendant(p, users_)) {}

  void build() {
    scales();
    rs_columns();
    if (opt_.offload) milp_add_offload_columns(opt_, m_, b_);
    free_columns();
    u_columns();
    dependency_and_retention_rows();
    free_rows();
    if (!paper_) link_rows();
    memory_rows();
    if (opt_.offload) milp_add_offload_rows(p_, opt_, m_, b_);
    if (min_peak_ || opt_.cost_cap > 0) cost_cap_row();  // MinCost: max batch's probes
    b_.finish();
  }

 private:
  double bytes(int i) const { return double(p_.nodes[i].bytes) * per_ / m_.byte_scale; }
  double ws(int i) const { return double(p_.nodes[i].workspace_bytes) * per_ / m_.byte_scale; }

  // MinPeak works in bytes per sample (constant excluded).
  void scales() {
    per_ = min_peak_ ? 1.0 / double(std::max<int64_t>(1, p_.batch)) : 1.0;
    if (min_peak_) {
      double mx = 1;
      for (const auto& nd : p_.nodes) mx = std::max(mx, double(nd.bytes + nd.workspace_bytes));
      m_.byte_scale = mx * per_;
    } else {
      REMAT_CHECK(opt_.budget > 0, "budget " << opt_.budget);
      m_.byte_scale = double(opt_.budget);
    }
    double cost_sum = 0;
    int cost_cnt = 0;
    for (const auto& nd : p_.nodes)
      if (nd.cost > 0) cost_sum += nd.cost, ++cost_cnt;
    m_.cost_scale = cost_cnt ? cost_sum / cost_cnt : 1.0;
    cap_ = min_peak_ ? 0 : 1.0;  // memory bound in model units (MinCost)
    constant_ = min_peak_ ? 0 : double(p_.constant_bytes) / m_.byte_scale;
  }

  void rs_columns() {
    for (int t = 0; t < n_; ++t) {
      for (int i = 0; i <= t; ++i) {
        const double cost = min_peak_ ? 0 : p_.nodes[i].cost / m_.cost_scale;
        if (i == t) {
          m_.r_col[size_t(t) * n_ + i] = b_.add_col(1, 1, cost, true);
          continue;
        }
        if (!paper_ && md_[i] < t) continue;
        m_.r_col[size_t(t) * n_ + i] = b_.add_col(0, 1, cost, true);
        m_.s_col[size_t(t) * n_ + i] = b_.add_col(0, 1, 0, true);
      }
    }
  }

  // FREE[t,i,k] for i in deps(k) + {k}, where R[t,k] can be 1 and no user j of i with
  // k < j == t forces i to stay (R[t,t] = 1).
  void free_columns() {
    for (int t = 0; t < n_; ++t) {
      for (int k = 0; k <= t; ++k) {
        if (m_.r(t, k) < 0) continue;
        std::vector<int> cand = p_.nodes[k].deps;
        cand.push_back(k);
        for (int i : cand) {
          bool pinned = false;
          for (int j : users_[i]) pinned |= (j > k && j == t);
          if (pinned) continue;
          int col = b_.add_col(0, 1, 0, paper_);  // continuous (paper: binary): see the Note
          m_.free_vars.push_back({t, i, k, col});
        }
      }
    }
  }

  // U[t,k] and P.
  void u_columns() {
    for (int t = 0; t < n_; ++t)
      for (int k = 0; k <= t; ++k) {
        double ub = min_peak_ ? 1e30 : (k == t ? cap_ - ws(k) : cap_);
        m_.u_col[size_t(t) * n_ + k] = b_.add_col(0, std::max(0.0, ub), 0, false);
      }
    if (min_peak_) m_.p_col = b_.add_col(0, 1e30, 1, false);
  }

  // Dependencies: R[t,k] <= R[t,i] + S[t,i]. Retention: S[t+1,i] <= R[t,i] + S[t,i].
  void dependency_and_retention_rows() {
    for (int t = 0; t < n_; ++t)
      for (int k = 0; k <= t; ++k) {
        if (m_.r(t, k) < 0) continue;
        for (int i : p_.nodes[k].deps)
          b_.add_row(-1e30, 0, {{m_.r(t, k), 1}, {m_.r(t, i), -1}, {m_.s(t, i), -1}});
      }
    for (int t = 0; t + 1 < n_; ++t)
      for (int i = 0; i <= t; ++i)
        if (m_.s(t + 1, i) >= 0)
          b_.add_row(-1e30, 0,
                     {{m_.s(t + 1, i), 1}, {m_.r(t, i), -1}, {t > i ? m_.s(t, i) : -1, -1},
                      {m_.in(t, i), -1}});
  }

  void free_rows() {
    for (const auto& f : m_.free_vars) {
      int s_next = f.t + 1 < n_ ? m_.s(f.t + 1, f.i) : -1;
      auto lu = later_users(users_[f.i], f.k, f.t);
      if (paper_) {
        double big_m = 2.0 + double(lu.size());
        std::vector<std::pair<int, double>> a{{m_.r(f.t, f.k), 1}, {s_next, -1}, {f.col, -1}};
        std::vector<std::pair<int, double>> c{{m_.r(f.t, f.k), -1}, {s_next, 1}, {f.col, big_m}};
        for (int j : lu) a.push_back({m_.r(f.t, j), -1}), c.push_back({m_.r(f.t, j), 1});
        b_.add_row(-1e30, 0, a);
        b_.add_row(-1e30, big_m - 1, c);
        continue;
      }
      if (f.k < f.t) b_.add_row(-1e30, 0, {{f.col, 1}, {m_.r(f.t, f.k), -1}});
      if (m_.out(f.t, f.i) >= 0) b_.add_row(-1e30, 1, {{f.col, 1}, {m_.out(f.t, f.i), 1}});
      if (s_next >= 0) b_.add_row(-1e30, 1, {{f.col, 1}, {s_next, 1}});
      for (int j : lu)
        if (m_.r(f.t, j) >= 0) b_.add_row(-1e30, 1, {{f.col, 1}, {m_.r(f.t, j), 1}});
    }
  }

  // Link rows: sum_k FREE[t,i,k] + S[t+1,i] <= S[t,i] + R[t,i] (see the Note).
  void link_rows() {
    std::vector<std::vector<int>> frees_of(size_t(n_) * n_);  // [t*n+i] -> FREE columns
    for (const auto& f : m_.free_vars) frees_of[size_t(f.t) * n_ + f.i].push_back(f.col);
    for (int t = 0; t < n_; ++t)
      for (int i = 0; i <= t; ++i) {
        const auto& cols = frees_of[size_t(t) * n_ + i];
        if (cols.empty()) continue;
        std::vector<std::pair<int, double>> e;
        for (int col : cols) e.push_back({col, 1});
        e.push_back({t + 1 < n_ ? m_.s(t + 1, i) : -1, 1});
        e.push_back({m_.r(t, i), -1});
        e.push_back({i < t ? m_.s(t, i) : -1, -1});
        e.push_back({m_.in(t, i), -1});
        b_.add_row(-1e30, 0, e);
      }
  }

  // U recurrence and memory rows.
  void memory_rows() {
    std::vector<std::vector<int>> frees_after(size_t(n_) * n_);  // [t*n+k] -> free_vars indices
    for (size_t v = 0; v < m_.free_vars.size(); ++v)
      frees_after[size_t(m_.free_vars[v].t) * n_ + m_.free_vars[v].k].push_back(int(v));
    for (int t = 0; t < n_; ++t) {
      std::vector<std::pair<int, double>> e{{m_.u(t, 0), 1}, {m_.r(t, 0), -bytes(0)}};
      for (int i = 0; i < t; ++i) e.push_back({m_.s(t, i), -bytes(i)});
      for (int i = 0; i < t; ++i) e.push_back({m_.in(t, i), -bytes(i)});
      b_.add_row(constant_, constant_, e);
      for (int k = 1; k <= t; ++k) {
        std::vector<std::pair<int, double>> r{
            {m_.u(t, k), 1}, {m_.u(t, k - 1), -1}, {m_.r(t, k), -bytes(k)}};
        for (int v : frees_after[size_t(t) * n_ + k - 1])
          r.push_back({m_.free_vars[v].col, bytes(m_.free_vars[v].i)});
        b_.add_row(0, 0, r);
      }
      for (int k = 0; k <= t; ++k) {
        if (m_.r(t, k) < 0) continue;
        if (min_peak_) {
          b_.add_row(-1e30, 0, {{m_.u(t, k), 1}, {m_.r(t, k), ws(k)}, {m_.p_col, -1}});
        } else if (k < t && p_.nodes[k].workspace_bytes > 0) {
          b_.add_row(-1e30, cap_, {{m_.u(t, k), 1}, {m_.r(t, k), ws(k)}});
        }
      }
    }
  }

  void cost_cap_row() {
    std::vector<std::pair<int, double>> e;
    for (int t = 0; t < n_; ++t)
      for (int i = 0; i <= t; ++i)
        if (m_.r(t, i) >= 0) e.push_back({m_.r(t, i), p_.nodes[i].cost / m_.cost_scale});
    for (int col : m_.excess_col) e.push_back({col, 1});
    b_.add_row(-1e30, opt_.cost_cap / m_.cost_scale * (1 + 1e-9), e);
  }

  const Problem& p_;
  const MilpBuildOptions& opt_;
  MilpModel& m_;
  LpBuilder b_;
  const int n_;
  const bool paper_, min_peak_;
  const std::vector<std::vector<int>> users_;
  const std::vector<int> md_;  // max_descendant
  double per_ = 1;             // bytes per sample (MinPeak) or 1
  double cap_ = 1;             // memory bound in model units (MinCost)
  double constant_ = 0;        // the constant in model units (MinCost)
};

}  // namespace

MilpModel milp_build(const Problem& p, const MilpBuildOptions& opt) {
  REMAT_CHECK(p.size() > 0, "empty problem");
  const int n = p.size();
  MilpModel m;
  m.n = n;
  m.r_col.assign(size_t(n) * n, -1);
  m.s_col.assign(size_t(n) * n, -1);
  m.u_col.assign(size_t(n) * n, -1);
  MilpAssembly(p, opt, m).build();
  return m;
}

std::vector<double> milp_point_from_schedule(const MilpModel& m, const Problem& p,
                                             const BoolMatrix& R, const BoolMatrix& S,
                                             const Schedule* copies) {
  const int n = m.n;
  const bool moved = copies && copies->has_copies();
  const auto users = problem_users(p);
  std::vector<double> x(m.num_cols(), 0.0);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i <= t; ++i) {
      if (m.r(t, i) >= 0) x[m.r(t, i)] = R(t, i) ? 1 : 0;
      if (i < t && m.s(t, i) >= 0) x[m.s(t, i)] = S(t, i) ? 1 : 0;
    }
  std::vector<double> freed(size_t(n) * n, 0.0);  // bytes freed after (t,k), model units
  double per = m.p_col >= 0 ? 1.0 / double(std::max<int64_t>(1, p.batch)) : 1.0;
  auto bytes = [&](int i) { return double(p.nodes[i].bytes) * per / m.byte_scale; };
  for (const auto& f : m.free_vars) {
    bool ok = R(f.t, f.k) && !(f.t + 1 < n && S(f.t + 1, f.i)) &&
              !(moved && copies->offload(f.t, f.i));
    for (int j : users[f.i])
      if (j > f.k && j <= f.t && R(f.t, j)) ok = false;
    x[f.col] = ok ? 1 : 0;
    if (ok) freed[size_t(f.t) * n + f.k] += bytes(f.i);
  }
  double constant = m.p_col >= 0 ? 0 : double(p.constant_bytes) / m.byte_scale;
  double peak = 0;
  for (int t = 0; t < n; ++t) {
    double u = constant;
    for (int i = 0; i < t; ++i) u += S(t, i) || (moved && copies->prefetch(t, i)) ? bytes(i) : 0;
    for (int k = 0; k <= t; ++k) {
      if (k > 0) u -= freed[size_t(t) * n + k - 1];
      if (R(t, k)) u += bytes(k);
      x[m.u(t, k)] = std::max(0.0, u);
      if (R(t, k))
        peak = std::max(peak, u + double(p.nodes[k].workspace_bytes) * per / m.byte_scale);
    }
  }
  if (m.p_col >= 0) x[m.p_col] = peak;
  if (copies) milp_offload_point(m, p, *copies, x);
  return x;
}


BoolMatrix schedule_repair_s(const Problem& p, BoolMatrix S, BoolMatrix* R_out) {
  const int n = p.size();
  for (int t = 0; t < n; ++t) S.set(0, t, false);
  // Stage by stage: R's row t reads only S's row t (no retention), and dropping a hold from
  // row t + 1 changes only what comes after, so one forward pass repairs every stage.
  BoolMatrix R(n, n);
  std::vector<uint8_t> need(size_t(n), 0);
  for (int t = 0; t < n; ++t) {
    derive_cheapest_r_row(p, S, t, /*compute_held=*/false, need, R);
    if (t + 1 >= n) break;
    const uint8_t* computed = R.row(t);
    const uint8_t* held = S.row(t);
    const uint8_t* held_next = S.row(t + 1);  // the loop clears entries behind its scan
    for (int i = first_set(held_next, 0, t + 1); i <= t; i = first_set(held_next, i + 1, t + 1))
      if (!computed[i] && !(i < t && held[i])) S.set(t + 1, i, false);
  }
  if (R_out) *R_out = std::move(R);
  return S;
}

BoolMatrix schedule_trim_s(const Problem& p, const BoolMatrix& S_in) {
  const int n = p.size();
  BoolMatrix S = S_in;
  BoolMatrix R = derive_cheapest_r(p, S, /*compute_held=*/false);
  const auto users = problem_users(p);
  for (int t = n - 1; t >= 1; --t)
    for (int i = 0; i < t; ++i) {
      if (!S(t, i) || (t + 1 < n && S(t + 1, i))) continue;
      bool used = false;
      for (int j : users[i]) used |= (j <= t && R(t, j));
      if (!used) S.set(t, i, false);
    }
  return S;
}

BoolMatrix milp_s_from_solution(const MilpModel& m, const double* x, double threshold) {
  BoolMatrix S(m.n, m.n);
  for (int t = 1; t < m.n; ++t)
    for (int i = 0; i < t; ++i)
      if (m.s(t, i) >= 0 && x[m.s(t, i)] >= threshold) S.set(t, i, true);
  return S;
}

std::vector<Schedule> schedule_candidates_for_s(const Problem& p, const BoolMatrix& S) {
  Schedule s;
  s.S = S;
  s.R = derive_cheapest_r(p, s.S);
  Schedule repaired;
  repaired.S = schedule_repair_s(p, s.S, &repaired.R);
  return {std::move(s), std::move(repaired)};
}

}  // namespace remat
