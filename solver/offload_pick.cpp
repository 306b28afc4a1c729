// The cheapest fitting schedule among an offload strategy's candidates (solver/offload_pick.h).
#include "solver/offload_pick.h"

#include <algorithm>

#include "runtime/memory/allocator.h"
#include "solver/offload_moves.h"

namespace remat {

void OffloadPick::offer(std::optional<Schedule> c) {
  if (!c) return;
  SimResult sim = simulate(p_, *c);
  if (sim.valid && sim.peak_bytes <= budget_ && !fits_budgets(sim, budget_, host_budget_) &&
      (host_rejected_ < 0 || sim.total_cost < host_rejected_))
    host_rejected_ = sim.total_cost;
  if (!fits_budgets(sim, budget_, host_budget_) || (best_ && sim.total_cost >= best_cost_)) return;
  best_ = std::move(c), best_cost_ = sim.total_cost;
}

std::optional<Schedule> OffloadPick::finish(const std::string& strategy,
                                            const std::string& without_link,
                                            const std::string& no_link_note, std::string* why) {
  const bool host_bound = host_rejected_ >= 0 && (!best_ || host_rejected_ < best_cost_);
  const std::string host_note =
      host_bound ? "the host budget " + pool_format_bytes(host_budget_) +
                       " is too small for the copies that would help"
                 : "";
  if (!best_) {
    if (why)
      *why = p_.copy_cost_per_byte <= 0 ? without_link
             : host_bound ? "no schedule without copies fits the budget, and " + host_note
                          : "no schedule with or without copies fits the budget";
    return std::nullopt;
  }
  best_->strategy = strategy;
  // Copy matrices with nothing set say no more than none: the answer is then a schedule
  // without copies, printed and written as one.
  bool copies = false;
  const int n = best_->offload.cols();
  for (int t = 0; t < best_->offload.rows() && !copies; ++t)
    copies = first_set(best_->offload.row(t), 0, n) < n ||
             first_set(best_->prefetch.row(t), 0, n) < n;
  if (!copies) best_->offload = best_->prefetch = BoolMatrix();
  if (p_.copy_cost_per_byte <= 0) {
    best_->note = no_link_note;
    return best_;
  }
  if (proof_) {
    best_->lower_bound = std::min(proof_->lower_bound, best_cost_);
    best_->bound_source = proof_->bound_source;
    best_->models = proof_->models;
    // A bound that reaches the cost proves the schedule optimal, whoever found it.
    best_->status = best_->lower_bound >= best_cost_ * (1 - 1e-9) ? "optimal" : proof_->status;
  } else {
    double once = 0;  // every node runs at least once, whatever moves
    for (const ProblemNode& nd : p_.nodes) once += nd.cost;
    best_->lower_bound = std::min(once, best_cost_);
    best_->bound_source = "every node runs once";
    best_->status = once >= best_cost_ ? "optimal" : "heuristic";
  }
  if (host_bound && !best_->has_copies()) best_->note = host_note + ": a schedule without copies";
  return best_;
}

}  // namespace remat
