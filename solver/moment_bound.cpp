// Moment bounds (Note [moment bounds]): for a few moments of the step, an LP over what is
// resident then and what must be computed again after it.
#include "solver/moment_bound.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <vector>

#include "solver/lp_builder.h"
#include "solver/milp_model.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

// Note [moment bounds]
// In every schedule (Note [frontier-advancing stages]) node b first runs last in stage b:
// every node before b has run at least once, none after it has. While it runs, memory holds
// the constant, b's inputs, output and workspace, and whatever else is resident (Note [memory
// semantics]). Take a value v < b that is not an input of b. If a node after b consumes v (v is
// *needed*), v is resident now or is computed again after b, at cost >= cost(v). Computing v
// again needs each input w of v then: w is an input of b (resident now), or resident now, or
// computed again after b as well. With h_v (resident now) and r_v (computed again after b):
//   min sum cost_v r_v  s.t.  h_v + r_v >= 1 (v needed),  h_w + r_w >= r_v (w an input of v),
//   constant + b's working set + sum bytes_v h_v <= budget,  0 <= h, r <= 1.
// Each r_v = 1 is a computation beyond v's first, so every schedule that fits costs at least
// every node's cost once plus the optimum of the binary problem, and so at least that plus the
// LP's optimum (a relaxation of it). One moment at a time: the same recomputation can serve
// many moments, so bounds of different moments do not add; the strongest one counts.
// Where it helps: the stage relaxation lets a stage hold a value fractionally and recompute
// it fractionally within the stage, and on GPT-2 with fused attention at 60 % its optimum is
// no more than running every node once. Without the inputs' rows (a plain knapsack) the bound
// is as weak: a reshape or a residual sum is free to drop, but computing it again needs its
// input, which is as large and costs a matrix product to get back.
// Which moments: those whose needed bytes exceed the budget the most (an LP per moment; the
// knapsack's order says little where reshapes are free). Checkmate then gives the strongest
// moment's binary problem to Cbc (moment_milp_bound) while the gap is open: its bound lies
// between the LP's and the binary optimum (U-Net on ResNet-50 at 40 %: gap 1.00 -> 0.97 %,
// PSPNet on ResNet-50: 1.71 -> 1.63 %).

struct Moment {
  int node = -1;
  int64_t excess = 0;  // constant + working set + needed bytes - budget
};

double every_node_once(const Problem& p) {
  double c = 0;
  for (const ProblemNode& nd : p.nodes) c += nd.cost;
  return c;
}

// last[v] = the last node that reads v (-1: none).
std::vector<int> last_uses(const Problem& p) {
  std::vector<int> last(size_t(p.size()), -1);
  for (int i = 0; i < p.size(); ++i)
    for (int d : p.nodes[size_t(i)].deps) last[size_t(d)] = std::max(last[size_t(d)], i);
  return last;
}

// For every node b with needed values beyond the budget, the excess; ascending by node.
std::vector<Moment> moments_over_budget(const Problem& p, int64_t budget,
                                        const std::vector<int>& last) {
  const int n = p.size();
  // live[b] = bytes of values v < b with a consumer after b (difference array over (v, last)).
  std::vector<__int128> delta(size_t(n) + 1, 0);
  for (int v = 0; v < n; ++v)
    if (last[size_t(v)] > v + 1) {
      delta[size_t(v) + 1] += p.nodes[size_t(v)].bytes;
      delta[size_t(last[size_t(v)])] -= p.nodes[size_t(v)].bytes;
    }
  std::vector<Moment> out;
  __int128 live = 0;
  for (int b = 0; b < n; ++b) {
    live += delta[size_t(b)];
    __int128 need = __int128(p.constant_bytes) + problem_working_set(p, b) + live;
    for (int d : p.nodes[size_t(b)].deps)  // inputs needed later are in live and the working set
      need -= last[size_t(d)] > b ? p.nodes[size_t(d)].bytes : 0;
    const __int128 excess = need - budget;
    if (excess > 0) out.push_back({b, int64_t(std::min<__int128>(excess, INT64_MAX))});
  }
  return out;
}

// The model of Note [moment bounds] at node b, objective in units of `cost_scale`; binary
// columns when `integer`. Empty (no columns) when nothing before b matters.
MilpModel moment_model(const Problem& p, int64_t budget, int b, const std::vector<int>& last,
                       double cost_scale, bool integer) {
  std::vector<uint8_t> is_input(size_t(p.size()), 0);
  for (int d : p.nodes[size_t(b)].deps) is_input[size_t(d)] = 1;
  const int64_t fixed = p.constant_bytes + problem_working_set(p, b);
  // Columns for the values that matter: the needed ones and, transitively, their inputs (all
  // before b). Inputs of b are resident and need none.
  std::vector<int> h(size_t(b), -1), r(size_t(b), -1);
  std::vector<uint8_t> relevant(size_t(b), 0);
  for (int v = b - 1; v >= 0; --v) {
    if (is_input[size_t(v)]) continue;
    if (last[size_t(v)] > b) relevant[size_t(v)] = 1;
    if (relevant[size_t(v)])
      for (int w : p.nodes[size_t(v)].deps) relevant[size_t(w)] = 1;
  }
  MilpModel m;
  m.cost_scale = cost_scale;
  LpBuilder lp{m, {}};
  // Memory coefficients of at most 1 (a right-hand side near 0 is harmless: Clp's tolerance
  // there can only lower the optimum, which keeps it a bound).
  int64_t largest = std::max<int64_t>(1, budget - fixed);
  for (int v = 0; v < b; ++v)
    if (relevant[size_t(v)]) largest = std::max(largest, p.nodes[size_t(v)].bytes);
  const double byte_scale = double(largest);
  std::vector<std::pair<int, double>> memory;
  for (int v = 0; v < b; ++v) {
    if (!relevant[size_t(v)] || is_input[size_t(v)]) continue;
    h[size_t(v)] = lp.add_col(0, 1, 0, integer);
    r[size_t(v)] = lp.add_col(0, 1, p.nodes[size_t(v)].cost / cost_scale, integer);
    memory.push_back({h[size_t(v)], double(p.nodes[size_t(v)].bytes) / byte_scale});
  }
  if (memory.empty()) return m;
  lp.add_row(-1e30, double(budget - fixed) / byte_scale, memory);
  for (int v = 0; v < b; ++v) {
    if (h[size_t(v)] < 0) continue;
    if (last[size_t(v)] > b) lp.add_row(1, 1e30, {{h[size_t(v)], 1}, {r[size_t(v)], 1}});
    for (int w : p.nodes[size_t(v)].deps)
      if (h[size_t(w)] >= 0)
        lp.add_row(0, 1e30, {{h[size_t(w)], 1}, {r[size_t(w)], 1}, {r[size_t(v)], -1}});
  }
  lp.finish();
  return m;
}

// The working set of b alone over the budget: no moment bound (problem_min_budget reports it).
bool working_set_fits(const Problem& p, int64_t budget, int b) {
  return p.constant_bytes + problem_working_set(p, b) <= budget;
}

// The LP's optimum in Problem cost units, or < 0 when it did not finish.
double moment_lp(const Problem& p, int64_t budget, int b, const std::vector<int>& last,
                 double cost_scale, double seconds) {
  if (!working_set_fits(p, budget, b)) return -1;
  const MilpModel m = moment_model(p, budget, b, last, cost_scale, false);
  if (m.num_cols() == 0) return 0;
  double obj = 0;
  if (milp_solve_lp(m, seconds, 0, nullptr, &obj) != LpStatus::Optimal) return -1;
  return std::max(0.0, obj) * cost_scale;
}

}  // namespace

MomentBound moment_lower_bound(const Problem& p, int64_t budget, double seconds,
                               int max_moments) {
  const auto t0 = Clock::now();
  auto left = [&] { return seconds - std::chrono::duration<double>(Clock::now() - t0).count(); };
  MomentBound out;
  const double once = every_node_once(p);
  if (once <= 0) return out;
  const std::vector<int> last = last_uses(p);
  std::vector<Moment> moments = moments_over_budget(p, budget, last);
  std::stable_sort(moments.begin(), moments.end(),
                   [](const Moment& a, const Moment& b) { return a.excess > b.excess; });
  if (int(moments.size()) > max_moments) moments.resize(size_t(max_moments));
  double best = -1;
  for (size_t k = 0; k < moments.size() && left() > 0; ++k) {
    const double lp = moment_lp(p, budget, moments[k].node, last, once,
                                left() / double(moments.size() - k));
    ++out.lps;
    if (lp > best) best = lp, out.node = moments[k].node;
  }
  if (out.node < 0) return out;
  out.bound = once + best;
  std::ostringstream os;
  os << "moment LP at '" << p.nodes[size_t(out.node)].name << "'";
  out.source = os.str();
  return out;
}

MomentBound moment_milp_bound(const Problem& p, int64_t budget, int node,
                              const SolveOptions& opt) {
  MomentBound out;
  if (node < 0 || node >= p.size() || !working_set_fits(p, budget, node)) return out;
  const double once = every_node_once(p);
  if (once <= 0) return out;
  const MilpModel m = moment_model(p, budget, node, last_uses(p), once, true);
  if (m.num_cols() == 0) return out;
  const MilpRun run = milp_run_cbc(m, opt, nullptr, nullptr);
  if (!run.failure.empty() || run.infeasible || !(run.bound > 0 && run.bound < 1e30)) return out;
  out.node = node;
  out.bound = once + run.bound * m.cost_scale;
  out.lps = 1;
  out.source = "moment MILP at '" + p.nodes[size_t(node)].name + "'";
  return out;
}

}  // namespace remat
