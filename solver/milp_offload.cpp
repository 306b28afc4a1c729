// The offload choices of the Checkmate MILP: which held values go to host memory and come back.
//
// Note [offload in the MILP]
// Follows Note [offload semantics] (solver/schedule.h) exactly, so that at integral points the
// model's cost is the simulator's and its memory an upper bound on the simulator's. Binaries per
// (stage t, value i < t) where S[t,i] has a column:
//   OUT[t,i] <= S[t,i]                  offload during t, only a value held entering t
//   FREE[t,i,k] + OUT[t,i] <= 1          (milp_model.cpp) it stays on the device until t ends
//   H[t+1,i] <= H[t,i] + OUT[t,i]        a host copy, from the end of its offload
//   IN[t,i] <= H[t,i], IN + S[t,i] <= 1, IN + R[t,i] <= 1
//   S[t+1,i] <= R[t,i] + S[t,i] + IN[t,i] (retention and link rows in milp_model.cpp)
//   U[t,0] += M_i IN[t,i]                device bytes from the stage's start
// and per stage a continuous E[t] >= 0 (in the objective) with
//   E[t] >= c * sum_i M_i OUT[t,i] - sum_i C_i R[t,i],  E[t] >= c * sum_i M_i IN[t,i] - sum_i C_i
//   R[t,i]
// where c = copy_cost_per_byte. With a host budget, sum_i M_i (H[t,i] + OUT[t,i]) <= host budget
// in every stage: the host copies the model may still read, plus the ones being made (an upper
// bound on the simulator's host peak, which frees a host copy after its last prefetch).
#include <algorithm>

#include "runtime/core/check.h"
#include "solver/lp_builder.h"
#include "solver/milp_model.h"

namespace remat {

void milp_add_offload_columns(const MilpBuildOptions& opt, MilpModel& m, LpBuilder& b) {
  REMAT_CHECK(opt.objective == MilpObjective::MinCost && !opt.paper_formulation,
              "offload columns need the MinCost tight formulation");
  const int n = m.n;
  m.out_col.assign(size_t(n) * n, -1);
  m.in_col.assign(size_t(n) * n, -1);
  m.host_col.assign(size_t(n) * n, -1);
  for (int t = 1; t < n; ++t)
    for (int i = 0; i < t; ++i) {
      if (m.s(t, i) < 0) continue;
      m.out_col[size_t(t) * n + i] = b.add_col(0, 1, 0, true);
      if (t > i + 1) m.host_col[size_t(t) * n + i] = b.add_col(0, 1, 0, true);
      if (t > i + 1 && t + 1 < n && m.s(t + 1, i) >= 0)
        m.in_col[size_t(t) * n + i] = b.add_col(0, 1, 0, true);
    }
  for (int t = 0; t < n; ++t) m.excess_col.push_back(b.add_col(0, 1e30, 1, false));
}

void milp_add_offload_rows(const Problem& p, const MilpBuildOptions& opt, MilpModel& m,
                           LpBuilder& b) {
  const int n = m.n;
  const double per_byte = p.copy_cost_per_byte / m.cost_scale;
  const double host_cap = double(opt.host_budget) / m.byte_scale;
  for (int t = 0; t < n; ++t) {
    std::vector<std::pair<int, double>> out_time{{m.excess_col[size_t(t)], -1}};
    std::vector<std::pair<int, double>> in_time{{m.excess_col[size_t(t)], -1}};
    std::vector<std::pair<int, double>> host;
    for (int i = 0; i <= t; ++i) {
      const double cost = p.nodes[i].cost / m.cost_scale;
      out_time.push_back({m.r(t, i), -cost});
      in_time.push_back({m.r(t, i), -cost});
      if (i == t) continue;
      const double bytes = double(p.nodes[i].bytes);
      out_time.push_back({m.out(t, i), per_byte * bytes});
      in_time.push_back({m.in(t, i), per_byte * bytes});
      host.push_back({m.out(t, i), bytes / m.byte_scale});
      host.push_back({m.host(t, i), bytes / m.byte_scale});
      if (m.out(t, i) >= 0) b.add_row(-1e30, 0, {{m.out(t, i), 1}, {m.s(t, i), -1}});
      if (t + 1 < n && m.host(t + 1, i) >= 0)
        b.add_row(-1e30, 0, {{m.host(t + 1, i), 1}, {m.host(t, i), -1}, {m.out(t, i), -1}});
      if (m.in(t, i) >= 0) {
        b.add_row(-1e30, 0, {{m.in(t, i), 1}, {m.host(t, i), -1}});
        b.add_row(-1e30, 1, {{m.in(t, i), 1}, {m.s(t, i), 1}});
        b.add_row(-1e30, 1, {{m.in(t, i), 1}, {m.r(t, i), 1}});
      }
    }
    b.add_row(-1e30, 0, out_time);
    b.add_row(-1e30, 0, in_time);
    if (opt.host_budget > 0) b.add_row(-1e30, host_cap, host);
  }
}

void milp_offload_point(const MilpModel& m, const Problem& p, const Schedule& s,
                        std::vector<double>& x) {
  const int n = m.n;
  if (m.out_col.empty()) return;
  const bool copies = s.has_copies();
  for (int t = 0; t < n; ++t) {
    double compute = 0, out = 0, in = 0;
    for (int i = 0; i <= t; ++i)
      if (s.R(t, i)) compute += p.nodes[i].cost;
    for (int i = 0; i < t && copies; ++i) {
      if (s.offload(t, i)) out += double(p.nodes[i].bytes);
      if (s.prefetch(t, i)) in += double(p.nodes[i].bytes);
      if (m.out(t, i) >= 0) x[size_t(m.out(t, i))] = s.offload(t, i);
      if (m.in(t, i) >= 0) x[size_t(m.in(t, i))] = s.prefetch(t, i);
    }
    const double excess = std::max(0.0, std::max(out, in) * p.copy_cost_per_byte - compute);
    x[size_t(m.excess_col[size_t(t)])] = excess / m.cost_scale;
  }
  if (!copies) return;
  // H[t,i] = 1 from the stage after an offload through the last prefetch that reads it.
  for (int i = 0; i < n; ++i) {
    int last_out = -1;
    for (int t = 0; t < n; ++t) {
      if (s.prefetch(t, i) && last_out >= 0)
        for (int u = last_out + 1; u <= t; ++u)
          if (m.host(u, i) >= 0) x[size_t(m.host(u, i))] = 1;
      if (s.offload(t, i)) last_out = t;
    }
  }
}

Schedule milp_offload_schedule(const MilpModel& m, const double* x) {
  const int n = m.n;
  Schedule s;
  s.R = BoolMatrix(n, n);
  s.S = BoolMatrix(n, n);
  s.offload = BoolMatrix(n, n);
  s.prefetch = BoolMatrix(n, n);
  auto on = [&](int col) { return col >= 0 && x[col] >= 0.5; };
  for (int t = 0; t < n; ++t)
    for (int i = 0; i <= t; ++i) {
      s.R.set(t, i, on(m.r(t, i)));
      if (i == t) continue;
      s.S.set(t, i, on(m.s(t, i)));
      s.offload.set(t, i, on(m.out(t, i)));
      s.prefetch.set(t, i, on(m.in(t, i)));
    }
  return s;
}

}  // namespace remat
