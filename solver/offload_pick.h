// The choice among the schedules an offload strategy tries: the cheapest that fits both
// budgets, and what to say when the host budget kept copies out or the problem has no link.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "solver/problem.h"
#include "solver/schedule.h"

namespace remat {

class OffloadPick {
 public:
  OffloadPick(const Problem& p, int64_t budget, int64_t host_budget)
      : p_(p), budget_(budget), host_budget_(host_budget) {}

  // Keeps `c` when it fits the device and host budgets and costs less than the best so far;
  // remembers the cheapest that fit the device but not the host budget.
  void offer(std::optional<Schedule> c);

  const std::optional<Schedule>& best() const { return best_; }
  double best_cost() const { return best_cost_; }

  // A lower bound on every schedule with copies, proved by the schedule `proof` carries
  // (lower_bound, bound_source, models, status: the offload MILP's); finish() gives it to the
  // answer, whichever schedule that is.
  void prove(const Schedule& proof) { proof_ = proof; }

  // The answer, named `strategy`: nullopt with `why` (when given) saying what kept every
  // schedule out (`without_link` where the problem has no link). Otherwise the best, with the
  // proved bound, or every node's cost once ("heuristic"): a bound the schedule brought along
  // (checkmate's, lp's) holds only without copies, and is kept only where the problem has no
  // link, with the note `no_link_note`. A note also says when the host budget kept copies out.
  std::optional<Schedule> finish(const std::string& strategy, const std::string& without_link,
                                 const std::string& no_link_note, std::string* why);

 private:
  const Problem& p_;
  int64_t budget_, host_budget_;
  std::optional<Schedule> best_;
  double best_cost_ = 0;
  double host_rejected_ = -1;  // the cheapest schedule over the host budget only (-1: none)
  std::optional<Schedule> proof_;
};

}  // namespace remat
