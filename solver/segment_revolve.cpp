// Binomial checkpointing (revolve) over a segmentation of any graph: Note [segment revolve].
#include "solver/segment_revolve.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "solver/baselines.h"
#include "solver/griewank.h"

namespace remat {

// Note [segment revolve]
// Revolve (solver/griewank.cpp) reverses a chain of l steps holding at most c states at once, and
// takes checkpoints on several levels: while reversing the steps after a checkpoint it advances
// again from it and holds new checkpoints further on. The segment schedules of Chen's baselines
// (Note [segment schedule]) have two levels only: the forward pass holds every checkpoint, the
// backward pass recomputes each segment from the one before it. Where the budget holds few
// checkpoints, their segments are long and each is recomputed in full; an unrolled recurrent
// layer of T steps at the smallest budgets has this shape, and the MILP's LP rounding does not
// find the deeper schedules (checkmate stopped at 1.35x with gaps of ~20 % on the tests' LSTM).
// Here the forward nodes, in index order, are cut at chosen positions into steps; the state at a
// cut is every forward value computed before it and read by a forward or loss node after it (its
// cut set, Note [cut sets]), so a step can be recomputed from the state before it. Revolve's
// table over the steps (unit cost per step, c states) says which states to hold and when:
//   - a state taken while the forward pass runs is held from there; one taken while reversing
//     the steps [m, hi) is computed in the first backward stage that recomputes one of them;
//     either way it is held until the last backward stage that recomputes a step of [m, hi);
//   - a step is reversed in the first backward stage that reads one of its values that no later
//     step reads (in a stacked recurrent layer, the backward pass of the layer above reads the
//     step's output long before it reverses the step's gates): that stage recomputes the step
//     from the nearest state held, and the step's values that the backward pass reads are held
//     from there (or from their own first backward reader, when earlier) to their last reader;
//     the last step's values are held from the forward pass on (revolve's first reversal
//     follows the sweep);
//   - the loss and every gradient are held until their last reader, forward values until their
//     last forward reader.
// R follows from S (derive_cheapest_r): a stage recomputes what it needs and what it starts to
// hold from what it holds. On a chain cut after every node this is revolve exactly: the
// recomputations are the table's count (test_deeper_schedules.cpp). Elsewhere steps' costs and
// states' sizes differ, which the table ignores, so the search simulates the greedy rule's
// segmentations (Note [greedy thresholds]), each with the most slots that fit (by bisection:
// more slots hold more and recompute less), and keeps the cheapest schedule that fits.
// Measured on the tests' imported two-layer LSTM (Adam, batch 16, FLOPs, 1,279 nodes): it fits
// 150 KB at 1.89x and 130 KB at 4.60x, where checkmate had found 34x and 41x (the LP rounding's
// repairs); the two-level baselines fit neither.

namespace {

// Segmentations into more steps go untried: revolve's table takes steps^3 / 2 operations (a
// tenth of a second at 400), and finer steps than that gain little where a step is a few nodes.
constexpr int kMaxSteps = 400;

struct Steps {
  std::vector<int> begin;  // begin[k]: the first forward node of step k (index order)
  std::vector<int> end;    // one past step k's last forward node
};

class SegmentRevolve {
 public:
  explicit SegmentRevolve(const Problem& p) : p_(p), users_(problem_users(p)) {
    const int n = p.size();
    fwd_ = forward_nodes(p);
    last_forward_reader_.assign(n, -1);
    first_backward_reader_.assign(n, -1);
    last_user_.assign(n, -1);
    for (int i = 0; i < n; ++i) {
      for (int u : users_[i]) {
        if (p.nodes[u].kind == ProblemNodeKind::Backward) {
          if (first_backward_reader_[i] < 0) first_backward_reader_[i] = u;
        } else {
          last_forward_reader_[i] = std::max(last_forward_reader_[i], u);
        }
      }
      if (!users_[i].empty()) last_user_[i] = users_[i].back();
    }
  }

  // The steps that cuts after each of `checkpoints` make (empty steps dropped).
  Steps steps_after(const std::vector<int>& checkpoints) const {
    Steps s;
    if (fwd_.empty()) return s;
    std::vector<int> cuts = {fwd_.front()};
    for (int c : checkpoints)
      if (c + 1 > cuts.back() && c < fwd_.back()) cuts.push_back(c + 1);
    for (size_t k = 0; k < cuts.size(); ++k) {
      s.begin.push_back(cuts[k]);
      s.end.push_back(k + 1 < cuts.size() ? cuts[k + 1] : fwd_.back() + 1);
    }
    return s;
  }

  Schedule schedule(const Steps& steps, const RevolveTable& table, int slots) const {
    const int n = p_.size();
    const int l = static_cast<int>(steps.begin.size());
    Schedule s;
    s.strategy = "segment-revolve";
    s.status = "heuristic";
    s.S = BoolMatrix(n, n);
    auto hold = [&](int node, int from, int to) {
      for (int t = std::max(from, node + 1); t <= to && t < n; ++t) s.S.set(t, node, true);
    };
    // reversal[k]: the first backward stage reading a value of step k (-1: none reads one).
    // Values that later steps read (in the state after k) do not set it.
    std::vector<int> reversal(l, -1);
    for (int k = 0; k < l; ++k)
      for (int pass = 0; pass < 2 && reversal[k] < 0; ++pass)
        for (int v = steps.begin[k]; v < steps.end[k]; ++v) {
          if (!is_forward(v) || first_backward_reader_[v] < 0) continue;
          if (pass == 0 && last_forward_reader_[v] >= steps.end[k]) continue;
          const int r = first_backward_reader_[v];
          if (reversal[k] < 0 || r < reversal[k]) reversal[k] = r;
        }
    for (int i = 0; i < n; ++i) {
      if (is_forward(i)) hold(i, i + 1, last_forward_reader_[i]);
      else hold(i, i + 1, last_user_[i]);
    }
    for (int k = 0; k < l; ++k) {
      if (reversal[k] < 0) continue;
      for (int v = steps.begin[k]; v < steps.end[k]; ++v) {
        if (!is_forward(v) || first_backward_reader_[v] < 0) continue;
        const int from = k + 1 == l ? 0 : std::min(reversal[k], first_backward_reader_[v]) + 1;
        hold(v, from, last_user_[v]);
      }
    }
    // The first and last backward stages that reverse a step of [m, hi) (-1 when none does).
    auto reversals = [&](int m, int hi) {
      int first = -1, last = -1;
      for (int k = m; k < hi; ++k) {
        if (reversal[k] < 0) continue;
        if (first < 0 || reversal[k] < first) first = reversal[k];
        last = std::max(last, reversal[k]);
      }
      return std::pair<int, int>(first, last);
    };
    auto hold_state = [&](int m, int from, int to) {
      for (int v : fwd_) {
        if (v >= steps.begin[m]) break;
        if (last_forward_reader_[v] >= steps.begin[m]) hold(v, from, to);
      }
    };
    std::function<void(int, int, int, bool)> reverse = [&](int lo, int hi, int c, bool sweep) {
      if (hi - lo <= 1) return;
      const int m = c >= 2 ? lo + table.split[c][hi - lo] : lo;
      if (m == lo) return;
      const auto [first, last] = reversals(m, hi);
      if (first >= 0) hold_state(m, sweep ? steps.begin[m] : first + 1, last);
      reverse(m, hi, c - 1, sweep);
      reverse(lo, m, c, false);
    };
    reverse(0, l, slots, true);
    s.R = derive_cheapest_r(p_, s.S);
    return s;
  }

 private:
  bool is_forward(int i) const { return p_.nodes[i].kind == ProblemNodeKind::Forward; }

  const Problem& p_;
  std::vector<std::vector<int>> users_;
  std::vector<int> fwd_;
  std::vector<int> last_forward_reader_, first_backward_reader_, last_user_;
};

}  // namespace

std::optional<Schedule> segment_revolve_schedule(const Problem& p,
                                                 const std::vector<int>& checkpoints, int slots) {
  const SegmentRevolve sr(p);
  const Steps steps = sr.steps_after(checkpoints);
  const int l = static_cast<int>(steps.begin.size());
  if (l == 0 || slots < 1) return std::nullopt;
  slots = std::min(slots, l);
  return sr.schedule(steps, revolve_table(l, slots), slots);
}

std::optional<Schedule> solve_segment_revolve(const Problem& p, int64_t budget, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto late = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds;
  };
  const SegmentRevolve sr(p);
  const std::vector<int> fwd = forward_nodes(p);
  CheapestSchedule best;
  // Simulates revolve with `slots` states over `steps`; true when it fits.
  auto try_slots = [&](const Steps& steps, const RevolveTable& table, int slots) {
    Schedule s = sr.schedule(steps, table, slots);
    const SimResult sim = simulate(p, s);
    if (!sim.valid || sim.peak_bytes > budget) return false;
    best.offer(std::move(s), sim);
    return true;
  };
  // One table serves every segmentation: a split depends on the slots and the steps left only.
  const int max_steps = std::min(static_cast<int>(fwd.size()), kMaxSteps);
  const RevolveTable table = revolve_table(max_steps, max_steps);
  for (int64_t b : greedy_search_order(p, fwd)) {
    const Steps steps = sr.steps_after(greedy_checkpoints(p, fwd, b));
    const int l = static_cast<int>(steps.begin.size());
    if (l < 2 || l > max_steps) continue;
    // More states cost less and hold more: the most that fit, by bisection.
    int lo = 0, hi = l + 1;  // lo fits (0: none known), hi does not
    while (hi - lo > 1) {
      if (late()) return best.schedule;
      const int mid = (lo + hi) / 2;
      (try_slots(steps, table, mid) ? lo : hi) = mid;
    }
  }
  return best.schedule;
}

}  // namespace remat
