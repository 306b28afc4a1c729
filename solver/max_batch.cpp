// Max batch: the largest batch (or any size of a SizeFamily: a sequence length) whose schedule
// fits a budget with compute cost at most one extra forward pass over all-keep. Baselines:
// doubling and bisection over the size with solve(). "checkmate": bisection on the size with
// exact probes, Note [max-batch bisection].
#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/core/check.h"
#include "solver/max_batch_probe.h"
#include "solver/max_batch_sizes.h"
#include "solver/strategies.h"

namespace remat {

double cost_cap(const Problem& p) {
  double all = 0, fwd = 0;
  for (const auto& nd : p.nodes) {
    all += nd.cost;
    if (nd.kind == ProblemNodeKind::Forward) fwd += nd.cost;
  }
  return all + fwd;
}

bool Batches::fits(const Schedule& s, int64_t b, int64_t budget) {
  if (b <= 0) return true;
  if (b > max_size) return false;
  const Problem& pb = at(b);
  if (s.R.rows() != pb.size()) return false;
  SimResult sim = simulate(pb, s);
  return sim.valid && sim.peak_bytes <= budget && sim.total_cost <= cost_cap(pb) * (1 + 1e-9);
}

namespace {

void report(const SolveOptions& opt, const Deadline& d, int64_t lo, int64_t hi) {
  if (opt.batch_progress) opt.batch_progress(d.elapsed(), lo, hi, opt.progress_user);
}

// A strategy's schedule at `batch` if it fits within the cap, solved in the time left.
std::optional<Schedule> strategy_at(Batches& batches, const std::string& strategy, int64_t batch,
                                    int64_t budget, SolveOptions opt, const Deadline& d) {
  if (batch > batches.max_size || d.left() <= 0) return std::nullopt;
  const Problem& pb = batches.at(batch);
  if (problem_min_budget(pb) > budget) return std::nullopt;
  opt.time_limit_seconds = std::max(0.05, d.left());
  opt.cost_cap = cost_cap(pb);
  opt.progress = nullptr;
  opt.phase = nullptr;  // the line shows the batch bracket, not the solves inside it
  SolveResult r = solve(pb, strategy, budget, opt);
  if (!r.feasible || r.sim.total_cost > cost_cap(pb) * (1 + 1e-9)) return std::nullopt;
  return r.schedule;
}

// Doubling, then bisection, for the largest batch at which the strategy fits, within the
// deadline (batch 0 if even 1 does not fit). With a floor (a batch another strategy reached),
// only batches above it are searched: the first probe is floor + 1, and if that does not fit
// the answer is 0, "nothing above the floor" (Note [max-batch bisection]).
MaxBatchResult search_strategy(Batches& batches, const std::string& strategy, int64_t budget,
                               const SolveOptions& opt, const Deadline& d,
                               std::optional<Schedule>* best_sched, int64_t floor = 0) {
  MaxBatchResult res;
  res.strategy = strategy;
  int64_t lo = floor + 1;  // the first probe
  auto fits = [&](int64_t b) {
    auto s = strategy_at(batches, strategy, b, budget, opt, d);
    if (s && best_sched) *best_sched = s;  // probes that fit only rise
    return s.has_value();
  };
  if (!fits(lo)) {
    res.status = d.left() <= 0 ? "time-limit" : "exact-search";
    return res;
  }
  int64_t hi = 2 * lo;  // fits(lo); hi unknown
  while (d.left() > 0 && fits(hi)) {
    lo = hi;
    hi *= 2;
    report(opt, d, lo, 0);
  }
  while (hi - lo > 1 && d.left() > 0) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
    report(opt, d, lo, hi);
  }
  res.batch = lo;
  res.upper_bound = lo;
  res.status = d.left() <= 0 && hi - lo > 1 ? "time-limit"
               : lo == batches.max_size  ? "exact-search (largest size)"
                                         : "exact-search";
  return res;
}

// Note [max-batch bisection]
// Whether a batch b admits a schedule is monotone in b: bytes scale up with b and cost and the
// cost cap both scale linearly, so a schedule that fits at b + 1 fits at b. A probe at b
// answers Feasible (a schedule verified by simulate on the problem at b), Infeasible (a proof:
// the budget is below problem_min_budget, or the stage relaxation with the cost cap has no
// solution, Note [stage relaxation]) or Unknown (its time ran out). Cheap answers come first:
// schedules already found at other batches (a schedule's structure is batch-independent), then
// cheap drops within the cost cap (Note [cheap drops]; before the repairs, which take seconds
// each on NASNet-Large: 72 against 31 with the repairs first), then the known schedules'
// repair; the stage relaxation's LP with its rounding next; Cbc on the relaxation (or on the
// Checkmate MILP where that is small), stopped at its first incumbent, last. The bisection
// keeps lo feasible and hi proven infeasible, so upper_bound = hi - 1 is proven; an Unknown
// probe narrows only the search for lo. lo starts at the best baseline's batch; the baselines
// run with a floor (each searches only above the best batch so far) in a third of the limit,
// and then at the best answer of the strategies that ran before checkmate in the same maxbatch
// run (lp's with its full limit among them), their schedules checked at those answers: in
// one run, checkmate's answer is never below another strategy's.
// Time the two rounds leave (their last probes ended Unknown in their shares) goes to the next
// size above lo, whole. The first round (no MILP) gallops: it probes at most a quarter above lo, each probe with a
// quarter of the time left. The proven hi is often ten times the answer (NASNet-Large at
// 16 GB: 19 .. 234), and a probe far above lo spends its time to end Unknown, where near lo
// cheap drops fit, the known schedules repair or the LP rounds. With half the time left per
// probe, DenseNet-121's first probe above chen-greedy's 611 took 21 s of a 60 s limit to end
// Unknown, and 60 s found less than 30 s (687 against 736; with a quarter, 785 and 748).
// A share shrinks with each probe, and once it is below what the LP search needs to find a
// fit every later probe ends Unknown: a probe gets at least twice the longest LP search that
// fit (the LP starts after at most half the probe). ResNet-50 at 16 GB, 30 s, beside one other
// run: 898 with the shrinking shares alone (probes from 1096 down to 899 of 5.4 .. 1.2 s ended
// Unknown), 986 with the floor (its LP search fits in 3.3 s).
// Every Infeasible answer names its proof (MaxBatchResult::bound_source), and log level 2
// prints each probe: a bound can be traced to the probe that made it.
// On the larger zoo networks the probes above the answer end Unknown (neither the stage
// relaxation with the cap nor Cbc refutes the batch in its share), which leaves the working-set
// bound; tools/bench/zoo_maxbatch_bench.py records each network's proof.
// At 16 GB, 30 s, 2 cores (two runs at a time), with half the time per probe, against twice
// lo, no floors and no cheap drops: DenseNet-121 695-737 (611), DenseNet-169 666 (426),
// InceptionV3 708 (653), NASNet-Mobile 887 (220), NASNet-Large 72 (19; lp's doubling reaches
// 32).
// In the order checkmate runs them: each searches only above the best batch so far, so the
// usual winner (chen-greedy) comes early and the others mostly cost one probe each.
const char* const kBaselines[] = {"all-keep",           "chen-sqrtn",        "chen-greedy",
                                  "chen-greedy-linear", "chen-sqrtn-linear", "griewank"};

// The first size above `lo` (whose working set fits) at which the largest node's working set
// and the constant exceed the budget, or max_size + 1: no schedule fits there.
int64_t first_over_working_set(Batches& batches, int64_t budget, int64_t lo) {
  auto min_fits = [&](int64_t b) {
    return b <= batches.max_size && problem_min_budget(batches.at(b)) <= budget;
  };
  int64_t z = lo + 1;
  while (min_fits(z)) z *= 2;
  int64_t a = lo;  // min budget fits at a, not at z
  while (z - a > 1) {
    const int64_t mid = a + (z - a) / 2;
    (min_fits(mid) ? a : z) = mid;
  }
  return std::min(z, batches.max_size + 1);
}

// The answer's schedule cost over the compute cost at its size (MaxBatchResult::overhead).
void set_overhead(Batches& batches, MaxBatchResult& r) {
  if (!r.schedule || r.batch <= 0 || r.batch > batches.max_size) return;
  const Problem& pb = batches.at(r.batch);
  double compute = 0;
  for (const auto& nd : pb.nodes) compute += nd.cost;
  if (compute > 0) r.overhead = simulate(pb, *r.schedule).total_cost / compute;
}

MaxBatchResult search_strategy_sizes(Batches& batches, const std::string& strategy,
                                     int64_t budget, const SolveOptions& opt,
                                     const std::vector<MaxBatchResult>& earlier) {
  const Deadline d{Clock::now(), opt.time_limit_seconds};
  if (strategy != "checkmate") {
    // checkmate-offload searches above the best answer of the strategies before it (a
    // schedule without copies is one of its own; Note [checkmate-offload]).
    int64_t floor = 0;
    std::shared_ptr<const Schedule> floor_schedule;
    if (strategy == "checkmate-offload")
      for (const MaxBatchResult& e : earlier)
        if (e.schedule && e.batch > floor && batches.fits(*e.schedule, e.batch, budget))
          floor = e.batch, floor_schedule = e.schedule;
    if (floor_schedule && batches.at(floor).copy_cost_per_byte > 0)
      floor = offload_above_floor(batches, budget, opt, d, floor, &floor_schedule);
    std::optional<Schedule> s;
    MaxBatchResult r = search_strategy(batches, strategy, budget, opt, d, &s, floor);
    if (s && r.batch > 0) r.schedule = std::make_shared<const Schedule>(std::move(*s));
    if (r.batch < floor) r.batch = r.upper_bound = floor, r.schedule = floor_schedule;
    if (strategy == "checkmate-offload" && r.batch > 0) {
      // Its probes prove nothing about the sizes above its answer; the working-set bound does
      // (it binds every schedule, copies or not).
      const int64_t over = first_over_working_set(batches, budget, r.batch);
      r.working_set_bound = r.upper_bound = over - 1;
      r.bound_source = over > batches.max_size
                           ? "past the largest size"
                           : "the working set of the largest node at " + std::to_string(over);
      if (r.batch == r.upper_bound) r.status = "optimal";
      else if (r.status != "time-limit") r.status = "feasible";
    }
    r.solve_seconds = d.elapsed();
    return r;
  }
  MaxBatchResult res;
  res.strategy = strategy;
  if (budget <= batches.at(1).constant_bytes || problem_min_budget(batches.at(1)) > budget) {
    res.status = "optimal";  // not even batch 1 fits: batch 0 is exact
    res.bound_source = budget <= batches.at(1).constant_bytes
                           ? "the constant"
                           : "the working set of the largest node at 1";
    res.solve_seconds = d.elapsed();
    return res;
  }
  Prober prober{batches, budget, opt, {}, {}};
  // lo: the best baseline (verified by simulate); its schedules seed every probe. The
  // baselines get at most a third of the limit together: with a tenth, chen-greedy's own
  // bisection was cut short on InceptionV3 (checkmate 424 where chen-greedy alone found 575 in
  // 8 s of a 30 s limit).
  int64_t lo = 0;
  const Deadline base{Clock::now(), opt.time_limit_seconds / 3};
  SolveOptions quiet = opt;
  quiet.batch_progress = nullptr;
  for (const char* b : kBaselines) {
    std::optional<Schedule> s;
    MaxBatchResult r = search_strategy(batches, b, budget, quiet, base, &s, lo);
    if (s) prober.known.push_back(*s);
    lo = std::max(lo, r.batch);
  }
  if (auto all = solve_all_keep(batches.at(1))) prober.known.push_back(*all);
  // The strategies that ran before in the same search (lp among them): their schedules, checked
  // at their answers, raise lo and seed the probes.
  for (const MaxBatchResult& e : earlier)
    if (e.schedule && e.batch > lo && batches.fits(*e.schedule, e.batch, budget)) {
      prober.known.push_back(*e.schedule);
      lo = e.batch;
    }
  lo = std::max<int64_t>(lo, 1);
  // hi: the first batch whose working set alone exceeds the budget, or past the largest size
  // (proven infeasible).
  int64_t hi = first_over_working_set(batches, budget, lo);
  res.working_set_bound = std::min(hi - 1, batches.max_size);
  res.bound_source = hi > batches.max_size
                         ? "past the largest size"
                         : "the working set of the largest node at " + std::to_string(hi);
  report(opt, d, lo, hi);
  // Narrow with LP/heuristic probes first (no MILP), then with MILP probes.
  for (bool use_milp : {false, true}) {
    int64_t soft_hi = hi;
    while (soft_hi - lo > 1) {
      const double left = d.left();
      if (left <= 0) break;
      const int steps = int(std::ceil(std::log2(double(soft_hi - lo)))) + 1;
      // Without the MILP, probes gallop up from lo (Note [max-batch bisection]).
      const int64_t half = lo + (soft_hi - lo) / 2;
      const int64_t mid = use_milp ? half : std::min(half, lo + std::max<int64_t>(1, lo / 4));
      // A probe's LP starts after at most half its time (Note [max-batch bisection]): a probe
      // gets at least twice what the LP search took where it last fit, where time allows.
      const double share = use_milp ? left / steps : left / 4;
      const double seconds = std::max(share, std::min(left, 2 * prober.lp_fit_seconds));
      Probe r = prober.probe(mid, seconds, use_milp);
      if (r == Probe::Feasible) {
        lo = mid;
      } else if (r == Probe::Infeasible) {
        hi = soft_hi = mid;
        res.bound_source = prober.answer + " at " + std::to_string(mid);
      } else {
        soft_hi = mid;
      }
      report(opt, d, lo, hi);
    }
  }
  // Time left after both rounds (the last probes above lo ended Unknown in their shares): the
  // next size above lo gets all of it, and again while it fits.
  while (hi - lo > 1 && d.left() > 0.5) {
    const Probe r = prober.probe(lo + 1, d.left(), true);
    if (r == Probe::Feasible) {
      ++lo;
    } else {
      if (r == Probe::Infeasible) {
        hi = lo + 1;
        res.bound_source = prober.answer + " at " + std::to_string(hi);
      }
      break;
    }
    report(opt, d, lo, hi);
  }
  res.batch = lo;
  res.upper_bound = hi - 1;
  res.status = lo == hi - 1 ? "optimal" : d.left() <= 0 ? "time-limit" : "feasible";
  // The schedule behind the answer, for the strategies after it (checkmate-offload's floor).
  for (const Schedule& s : prober.known)
    if (batches.fits(s, lo, budget)) {
      res.schedule = std::make_shared<const Schedule>(s);
      break;
    }
  res.solve_seconds = d.elapsed();
  return res;
}

MaxBatchResult search_sizes(Batches& batches, const std::string& strategy, int64_t budget,
                            const SolveOptions& opt, const std::vector<MaxBatchResult>& earlier) {
  MaxBatchResult r = search_strategy_sizes(batches, strategy, budget, opt, earlier);
  set_overhead(batches, r);
  return r;
}

}  // namespace

MaxBatchResult with_sizes(MaxBatchResult r, const std::function<int64_t(int64_t)>& size_of) {
  auto map = [&](int64_t k) { return k > 0 ? size_of(k) : k; };
  r.batch = map(r.batch);
  r.upper_bound = map(r.upper_bound);
  r.working_set_bound = map(r.working_set_bound);
  // The proofs end " at <size>" (Note [max-batch bisection]).
  const size_t at = r.bound_source.rfind(" at ");
  const std::string k = at == std::string::npos ? "" : r.bound_source.substr(at + 4);
  if (!k.empty() && k.size() < 19 && k.find_first_not_of("0123456789") == std::string::npos)
    r.bound_source = r.bound_source.substr(0, at + 4) + std::to_string(map(std::stoll(k)));
  return r;
}

MaxBatchResult max_batch(const Problem& p, const std::string& strategy, int64_t budget,
                         const SolveOptions& opt, const ProblemAtBatch& at_batch,
                         const std::vector<MaxBatchResult>& earlier) {
  Batches batches;
  batches.make = at_batch ? at_batch : ProblemAtBatch([&p](int64_t b) { return problem_at_batch(p, b); });
  return search_sizes(batches, strategy, budget, opt, earlier);
}

MaxBatchResult max_size(const SizeFamily& family, const std::string& strategy, int64_t budget,
                        const SolveOptions& opt, const std::vector<MaxBatchResult>& earlier) {
  REMAT_CHECK(family.at && family.max_size >= 1, "max_size: an empty size family");
  Batches sizes;
  sizes.make = family.at;
  sizes.max_size = family.max_size;
  return search_sizes(sizes, strategy, budget, opt, earlier);
}

}  // namespace remat
