// The stage relaxation at work: LP rounding into schedules, Cbc on the relaxation MILP, and a
// cost-lowering local search. Every schedule returned has been simulated and fits the budget.
#include "solver/relaxation_search.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "solver/baselines.h"
#include "solver/local_search.h"
#include "solver/stage_relaxation.h"

namespace remat {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Keeps the cheapest schedule that fits (and costs at most cap, when cap > 0).
struct Best {
  const Problem& p;
  int64_t budget;
  double cap = 0;
  std::optional<Schedule> s;
  double cost = 0;
  // With a cap: the cheapest schedule offered that fits the budget but costs more than the cap
  // (Note [held to the cost cap] in solver/max_batch_probe.cpp), and its cost.
  std::optional<Schedule> over_cap;
  double over_cap_cost = 0;

  // Simulates `c`; keeps it if it fits and is cheaper. Returns its simulation.
  SimResult offer(Schedule c) {
    SimResult sim = simulate(p, c);
    if (!sim.valid || sim.peak_bytes > budget) return sim;
    if (cap > 0 && sim.total_cost > cap * (1 + 1e-9)) {
      if (!over_cap || sim.total_cost < over_cap_cost) {
        over_cap_cost = sim.total_cost;
        over_cap = std::move(c);
      }
    } else if (!s || sim.total_cost < cost) {
      cost = sim.total_cost;
      s = std::move(c);
    }
    return sim;
  }
};

std::string width_label(const char* what, int width) {
  return std::string(what) + ", width " + std::to_string(width);
}

std::string model_label(const char* what, int width, const MilpModel& m) {
  return width_label(what, width) + " " + std::to_string(m.num_rows()) + " x " +
         std::to_string(m.num_cols());
}

}  // namespace

int relaxation_width(const Problem& p, int64_t max_cols) {
  const int n = p.size();
  const auto md = max_descendant(p, problem_users(p));
  for (int width = 1;; width *= 2) {
    if (width >= n) return n;
    int64_t cols = 0;
    for (int b : uniform_stage_ends(n, width)) {
      const int a = b - width + 1 < 0 ? 0 : b - width + 1;
      cols += b - a + 1;
      for (int i = 0; i < a; ++i) cols += md[i] >= a ? 3 : 0;  // R', S', Y
    }
    if (cols <= max_cols) return width;
  }
}

// Note [relaxation margin]
// The relaxation charges the memory of a stage only at a few moments (Note [stage relaxation]),
// so a rounding can peak above the budget between them, by more than repair can take back. The
// LP solved again at a budget lowered by that overshoot holds less, and its roundings then fit
// more often; its bound is not used (it bounds another problem).
RelaxationSearch relaxation_lp_search(const Problem& p, int64_t budget, const SolveOptions& opt,
                                      double seconds, int width, double cost_cap) {
  const auto t0 = Clock::now();
  auto left = [&] { return seconds - since(t0); };
  RelaxationSearch out;
  if (budget < problem_min_budget(p)) {
    out.infeasible = true;
    return out;
  }
  if (width <= 0) width = relaxation_width(p, 40000);
  const std::vector<int> ends = uniform_stage_ends(p.size(), width);
  Best best{p, budget, cost_cap, std::nullopt, 0, std::nullopt, 0};
  std::mt19937_64 rng(opt.seed);
  int64_t model_budget = budget;
  for (int round = 0; round < 4 && left() > 0; ++round) {
    MilpModel m = relaxation_build(p, model_budget, ends, true, cost_cap);
    std::vector<double> x;
    double obj = 0;
    const auto solve_start = Clock::now();
    LpStatus st = milp_solve_lp(m, left(), opt.log_level, &x, &obj);
    if (st == LpStatus::Infeasible && round == 0) {
      // Note [confirmed infeasibility]
      // A proof that no schedule fits ends a max-batch search's upper side for good, and one
      // such "proof" was wrong (DenseNet-121 at 16 GB: 692 answered infeasible in one run, where
      // schedules that fit were found at 692 and 785 later). Which step answered was not
      // recorded and it has not recurred, so whether a solver status was at fault is unknown;
      // so that a status that does not repeat cannot end a search, Clp's "infeasible" counts
      // only when a second solve of the same LP (twice the first one's time, at least a
      // second) says so too, and Cbc's only when a second run without Cbc's preprocessing
      // says so too. It recurred once more on 2026-11-29: DenseNet-121 at 16 GB, batch 1016
      // answered infeasible by the stage relaxation's MILP at width 256 (Cbc, confirmed by a
      // second identical run), where cheap drops held to the cap fit (peak 15.995 GB, 0.997 of
      // the cap) and the same MILP, run alone at 0.5 to 40 s, never said infeasible. Cbc's
      // preprocessing is known to call feasible models infeasible (coin-or/Cbc issues 466, 737,
      // 740, 747), and a run that is deterministic repeats its mistake, hence the run without it.
      const double first = since(solve_start);
      st = milp_solve_lp(m, std::max(1.0, 2 * first), opt.log_level, &x, &obj);
      if (st == LpStatus::Infeasible) {
        out.infeasible = true;  // the relaxation has no point: no schedule fits
        out.failure = "no schedule fits: the stage relaxation's LP is infeasible (a proof)";
        return out;
      }
    }
    if (st != LpStatus::Optimal) {
      if (round == 0) out.failure = "the stage relaxation's LP did not finish within the limit";
      break;
    }
    if (round == 0) {
      out.bound = obj * m.cost_scale;
      out.bound_source = width_label("stage-relaxation LP", width);
      out.model = model_label("stage-relaxation LP", width, m);
    }
    // Roundings: thresholds, then seeded random ones.
    std::vector<std::vector<std::vector<uint8_t>>> roundings;
    for (double th : {0.5, 0.75, 0.9, 0.99, 0.999})
      roundings.push_back(relaxation_held_sets(m, ends, x.data(), th));
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    for (int k = 0; k < opt.rounding_samples / 4; ++k) {
      std::vector<std::vector<uint8_t>> held(ends.size(), std::vector<uint8_t>(size_t(p.size()), 0));
      for (size_t t = 1; t < ends.size(); ++t)
        for (int i = 0; i < p.size(); ++i) {
          const int col = m.s_col[t * size_t(p.size()) + size_t(i)];
          if (col >= 0 && uni(rng) < x[size_t(col)]) held[t][size_t(i)] = 1;
        }
      roundings.push_back(std::move(held));
    }
    // The cheapest over-budget schedules are repaired (Note [budget repair]).
    std::vector<std::pair<double, Schedule>> over;
    int64_t least_peak = INT64_MAX;
    for (const auto& held : roundings) {
      if (left() <= 0) break;
      Schedule s = schedule_from_held_sets(p, ends, held);
      SimResult sim = best.offer(s);
      if (!sim.valid || sim.peak_bytes <= budget) continue;
      least_peak = std::min(least_peak, sim.peak_bytes);
      over.emplace_back(sim.total_cost, std::move(s));
    }
    std::sort(over.begin(), over.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = 0; k < over.size() && k < 3 && left() > 0; ++k) {
      if (best.s && over[k].first >= best.cost) break;  // repair only adds cost
      auto fit = schedule_fit_budget(p, over[k].second.S, budget, left() / 3);
      if (fit) best.offer(std::move(*fit));
    }
    if (best.s || least_peak == INT64_MAX) break;
    model_budget -= least_peak - budget;  // Note [relaxation margin]
    if (model_budget < problem_min_budget(p)) break;
  }
  // The all-keep schedule repaired to the budget: it drops what is cheapest to recompute per
  // byte first, which the LP's fractional holds can hide (a value held 95 % of the way).
  if (left() > 0 && (!best.s || best.cost > 1.001 * out.bound)) {
    auto fit = schedule_fit_budget(p, all_keep_schedule(p).S, budget, left() / 2);
    if (fit) best.offer(std::move(*fit));
  }
  // Cheaper still where memory allows: hold what the best schedule recomputes. Under a cap any
  // schedule within it answers; without one, the cheapest over-cap schedule is held toward it.
  if (cost_cap <= 0 && best.s && left() > 0)
    best.offer(schedule_improve(p, *best.s, budget, left() / 2));
  if (cost_cap > 0 && !best.s && best.over_cap && left() > 0)
    best.offer(schedule_improve(p, *best.over_cap, budget, left() / 2, cost_cap));
  if (best.s) {
    best.s->lower_bound = std::min(out.bound, best.cost);
    out.best = std::move(best.s);
  } else if (out.failure.empty()) {
    out.failure = left() > 0 ? "the LP relaxation was solved, but neither its roundings nor the "
                               "keep-everything schedule could be repaired to fit the budget"
                             : "the LP relaxation was solved, but none of its roundings could be "
                               "repaired to fit the budget before the time limit";
  }
  return out;
}

std::vector<double> relaxation_point(const MilpModel& m, const Problem& p,
                                     const std::vector<int>& stage_ends, const Schedule& s) {
  const int n = p.size();
  const BoolMatrix S = schedule_trim_s(p, s.S);
  std::vector<double> x(size_t(m.num_cols()), 0.0);
  for (int tau = 0, a = 0; tau < int(stage_ends.size()); a = stage_ends[size_t(tau)] + 1, ++tau) {
    const int b = stage_ends[size_t(tau)];
    for (int i = 0; i <= b; ++i) {
      const int r = m.r_col[size_t(tau) * n + size_t(i)];
      if (r >= 0) {
        bool computed = false;
        for (int t = std::max(a, i); t <= b && !computed; ++t) computed = s.R(t, i);
        x[size_t(r)] = computed || i >= a ? 1.0 : 0.0;
      }
      const int sc = m.s_col[size_t(tau) * n + size_t(i)];
      if (sc >= 0) x[size_t(sc)] = S(a, i) ? 1.0 : 0.0;
    }
  }
  return x;
}

RelaxationSearch relaxation_milp_search(const Problem& p, int64_t budget, const SolveOptions& opt,
                                        double seconds, const Schedule* incumbent, int width,
                                        double cost_cap) {
  const auto t0 = Clock::now();
  RelaxationSearch out;
  if (budget < problem_min_budget(p)) {
    out.infeasible = true;
    return out;
  }
  // Cbc stays quick below ~15k columns; where the Checkmate MILP itself is small, one stage per
  // super-stage (the tightest relaxation, ~20-30k columns there) is worth its price.
  if (width <= 0) width = relaxation_width(p, full_milp_is_small(p) ? 30000 : 15000);
  const std::vector<int> ends = uniform_stage_ends(p.size(), width);
  MilpModel m = relaxation_build(p, budget, ends, true, cost_cap);
  std::vector<double> start;
  if (incumbent) start = relaxation_point(m, p, ends, *incumbent);
  SolveOptions mopt = opt;
  mopt.time_limit_seconds = std::max(0.05, seconds);
  // Progress shows the best real schedule known (the incumbent we were given), never the
  // relaxation MILP's own incumbent: that is a relaxation value, a schedule's cost only once
  // converted, and below what the conversion may reach.
  const double known = opt.progress && incumbent ? simulate(p, *incumbent).total_cost : -1;
  MilpProgress progress;
  if (opt.progress)
    progress = [&](double el, double, double bound) {
      opt.progress(el, known, bound * m.cost_scale, opt.progress_user);
      return false;
    };
  MilpRun run = milp_run_cbc(m, mopt, start.empty() ? nullptr : &start, progress);
  out.model = model_label("stage-relaxation MILP", width, m);
  if (run.infeasible) {  // Note [confirmed infeasibility]
    SolveOptions plain = mopt;
    plain.cbc_preprocess = false;
    run = milp_run_cbc(m, plain, start.empty() ? nullptr : &start, progress);
  }
  if (run.infeasible) {
    out.infeasible = true;  // a proof: the relaxation has no integer point
    out.failure = "no schedule fits: the stage relaxation's MILP is infeasible (a proof)";
    return out;
  }
  if (!run.has_solution)
    out.failure = run.root_lp_unfinished ? "the stage relaxation's MILP did not finish its root LP"
                                         : "Cbc found no solution of the stage relaxation in time";
  if (!run.root_lp_unfinished) {
    out.bound = std::max(0.0, run.bound * m.cost_scale);
    out.bound_source = width_label(run.optimal ? "stage-relaxation MILP optimum"
                                               : "stage-relaxation MILP bound",
                                   width);
  }
  if (run.has_solution) {
    Best best{p, budget, cost_cap, std::nullopt, 0, std::nullopt, 0};
    Schedule s = schedule_from_held_sets(p, ends, relaxation_held_sets(m, ends, run.x.data(), 0.5));
    SimResult sim = best.offer(s);
    if (sim.valid && sim.peak_bytes > budget) {
      auto fit = schedule_fit_budget(p, s.S, budget, std::max(0.0, seconds - since(t0)));
      if (fit) best.offer(std::move(*fit));
    }
    out.best = std::move(best.s);
  }
  return out;
}

}  // namespace remat
