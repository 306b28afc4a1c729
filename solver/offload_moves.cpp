// The moves the offload strategies make (Note [offload to fit]).
#include "solver/offload_moves.h"

namespace remat {
namespace {

// Spreads w's copies over the stages around it (Note [offload to fit], streamed copies): the
// offload back through the stages that hold the value, then the stages after it that keep it;
// the prefetch back from the read; each until the stages' compute covers the copy, none
// reaching stage t.
void spread(const Problem& p, const Schedule& s, const std::vector<double>& stage_cost, int t,
            Wait& w) {
  const double copy = double(p.nodes[size_t(w.value)].bytes) * p.copy_cost_per_byte;
  if (w.offload_stage >= 0) {
    double hidden = stage_cost[size_t(w.offload_stage)];
    for (int& o = w.offload_stage; hidden < copy && o - 1 > w.value && s.S(o - 1, w.value); --o)
      hidden += stage_cost[size_t(o - 1)];
    for (; hidden < copy && w.clear_from < t; ++w.clear_from)
      hidden += stage_cost[size_t(w.clear_from)];
  }
  for (double hidden = stage_cost[size_t(w.prefetch_stage)];
       hidden < copy && w.prefetch_stage - 1 > t; --w.prefetch_stage)
    hidden += stage_cost[size_t(w.prefetch_stage - 1)];
}

}  // namespace

bool fits_budgets(const SimResult& sim, int64_t budget, int64_t host_budget) {
  return sim.valid && sim.peak_bytes <= budget &&
         (host_budget <= 0 || sim.host_peak_bytes <= host_budget);
}

std::vector<uint8_t> values_with_copies(const Schedule& s, int n) {
  std::vector<uint8_t> has(size_t(n), 0);
  for (int t = 0; t < s.offload.rows(); ++t) {
    const uint8_t* out = s.offload.row(t);
    const uint8_t* in = s.prefetch.row(t);
    for (int i = 0; i < n; ++i) has[size_t(i)] |= out[i] | in[i];
  }
  return has;
}

std::vector<double> stage_costs(const Problem& p, const Schedule& s) {
  if (p.copy_overlap == CopyOverlap::Stage) return {};
  const int n = p.size();
  std::vector<double> c(size_t(n), 0);
  for (int t = 0; t < n; ++t)
    for (int i = first_set(s.R.row(t), 0, t + 1); i <= t; i = first_set(s.R.row(t), i + 1, t + 1))
      c[size_t(t)] += p.nodes[size_t(i)].cost;
  return c;
}

std::vector<Wait> waits_at(const Problem& p, const std::vector<std::vector<int>>& users,
                           const std::vector<double>& stage_cost, const Schedule& s, int t) {
  const int n = p.size();
  std::vector<Wait> out;
  for (int i = 0; i < t; ++i) {
    if (!s.S(t, i) || stage_reads(users, s, t, i)) continue;
    int c = t + 1;
    while (c < n && s.S(c, i) && !stage_reads(users, s, c, i)) ++c;
    if (c >= n || !s.S(c, i)) continue;  // not read again while held: nothing to bring back
    int a = t;
    while (a - 1 > i && s.S(a - 1, i) && !stage_reads(users, s, a - 1, i)) --a;
    // a: the first stage of the wait; the value was read (or made) in stage a - 1.
    bool on_host = false;
    for (int u = 0; u < a && !on_host; ++u) on_host = s.offload(u, i) != 0;
    Wait w{i, on_host ? -1 : a, on_host ? a : a + 1, c - 1, a, c};
    if (t < w.clear_from || t >= w.prefetch_stage) continue;
    if (!stage_cost.empty()) spread(p, s, stage_cost, t, w);
    out.push_back(w);
  }
  return out;
}

void apply_wait(Schedule& s, const Wait& w) {
  if (w.offload_stage >= 0) s.offload.set(w.offload_stage, w.value, true);
  for (int u = w.clear_from; u <= w.prefetch_stage; ++u) s.S.set(u, w.value, false);
  s.prefetch.set(w.prefetch_stage, w.value, true);
}

}  // namespace remat
