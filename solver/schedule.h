// A rematerialization schedule in Checkmate's form (R, S per stage) and the one simulator that
// replays any schedule into ordered compute/free steps with exact memory accounting.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "solver/problem.h"

namespace remat {

// Row-major T x n matrix of 0/1.
class BoolMatrix {
 public:
  BoolMatrix() = default;
  BoolMatrix(int rows, int cols) : rows_(rows), cols_(cols), v_(size_t(rows) * cols, 0) {}
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  bool operator()(int r, int c) const { return v_[size_t(r) * cols_ + c] != 0; }
  void set(int r, int c, bool x) { v_[size_t(r) * cols_ + c] = x ? 1 : 0; }
  // Row r's entries, one byte (0 or 1) each, for the scans below.
  const uint8_t* row(int r) const { return v_.data() + size_t(r) * cols_; }
  // Sets row r's first `count` entries from `v` (each 0 or 1).
  void set_row(int r, const uint8_t* v, int count) {
    std::memcpy(v_.data() + size_t(r) * cols_, v, size_t(count));
  }
  bool operator==(const BoolMatrix& o) const {
    return rows_ == o.rows_ && cols_ == o.cols_ && v_ == o.v_;
  }

 private:
  int rows_ = 0, cols_ = 0;
  std::vector<uint8_t> v_;
};

// Note [row scans]
// Schedules are sparse: a stage computes a few nodes of hundreds and holds a fraction of them,
// and the simulator and the derivation of R run on every candidate a search judges (thousands
// of times per repair). Their loops over a row therefore skip zero entries 32, then eight at a
// time.

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "row scans read words little-endian");

// Index of the first nonzero entry of row[from, to), or `to` if none (Note [row scans]).
inline int first_set(const uint8_t* row, int from, int to) {
  int i = from;
  for (; i + 32 <= to; i += 32) {  // four words at a time while they are all zero
    uint64_t w[4];
    std::memcpy(w, row + i, 32);
    if (w[0] | w[1] | w[2] | w[3]) break;
  }
  for (; i + 8 <= to; i += 8) {
    uint64_t w;
    std::memcpy(&w, row + i, 8);
    if (w) return i + __builtin_ctzll(w) / 8;
  }
  for (; i < to; ++i)
    if (row[i]) return i;
  return to;
}

// Index of the last nonzero entry of row[from, to), or from - 1 if none.
inline int last_set(const uint8_t* row, int from, int to) {
  int i = to;
  for (; i - 32 >= from; i -= 32) {
    uint64_t w[4];
    std::memcpy(w, row + i - 32, 32);
    if (w[0] | w[1] | w[2] | w[3]) break;
  }
  for (; i - 8 >= from; i -= 8) {
    uint64_t w;
    std::memcpy(&w, row + i - 8, 8);
    if (w) return i - 1 - __builtin_clzll(w) / 8;
  }
  for (; i > from; --i)
    if (row[i - 1]) return i - 1;
  return from - 1;
}

// Note [frontier-advancing stages]
// A schedule has T = n stages. Stage t computes node t for the first time (R[t][t] = 1) and may
// recompute earlier nodes (R[t][i], i < t) in ascending order before it. S[t][i] = 1 means the
// value of node i is held in memory entering stage t (i < t; S[0] is all zero). A value may be
// held entering t+1 only if it was held entering t or computed in t.
// Note [offload semantics]
// A schedule may also move values over the host link, each direction on its own copy stream.
// offload[t][i]: value i, held entering stage t (S[t][i]), is copied to host memory during
// stage t; the copy starts with the stage and the device copy stays until the stage ends. The
// host copy exists from then until the end of the last stage that prefetches it.
// prefetch[t][i]: value i is copied from an earlier stage's host copy to the device during stage
// t, for stage t + 1 on (S[t+1][i] may then hold it); its device bytes count from the stage's
// start, and i is neither held entering stage t nor computed in it. Stage t lasts as long as
// the longest of its computes (their summed cost) and its two copy streams (bytes times
// Problem::copy_cost_per_byte each); the excess over its computes is the copies' cost. Stages are
// synchronisation points: a stage's copies start with it and end with it (a copy spans one
// stage, so each one hides only behind the compute of its own stage). This is
// CopyOverlap::Stage, the model the offload MILP solves.
// Note [streamed copies]
// CopyOverlap::Stream: the same matrices, but a copy queues on its stream when its stage starts
// and runs for as long as it takes, across later stages; the compute stream waits for it only
// where it must be done (solver/simulate.cpp's StreamClock): before a compute reads a
// prefetched value, before a device copy being copied is freed, and before a host copy being
// read is released. So that a copy can outlast its stage, lifetimes follow the copies: an
// offloaded value's device copy stays through the stages after its offload that hold it (S
// set; when the last of them reads it, until that read), and a host copy stays until the end
// of the stage before the first one that reads the prefetched value. The MILP counts a held
// value for its whole stage, so its memory stays an upper bound on the simulator's. Every wait is one the stage
// model also meets by the same point, so for any schedule the time under Stream is at most the
// time under Stage: the MILP's cost is an upper bound there, not the optimum.
struct Schedule {
  std::string strategy;
  BoolMatrix R;  // T x n: node i computed in stage t
  BoolMatrix S;  // T x n: value i held entering stage t
  // Note [offload semantics]; both 0 x 0 (no copies) or both T x n.
  BoolMatrix offload;   // T x n: value i copied device -> host during stage t
  BoolMatrix prefetch;  // T x n: value i copied host -> device during stage t
  bool has_copies() const { return offload.rows() > 0; }
  // Solver report (filled by strategies that solve something).
  double solve_seconds = 0;
  double lower_bound = 0;  // proven lower bound on cost (0 if none); gap = (cost-lb)/cost
  std::string bound_source;  // the relaxation that proves lower_bound, e.g. "Checkmate LP"
  std::string models;        // the models solved, with their sizes ("rows x cols")
  std::string status;      // "optimal", "feasible", "time-limit", "heuristic", ...
  std::string note;        // how the strategy got here when it fell back (empty otherwise)
  // What a loaded schedule file says it was made for (empty when it does not say).
  std::string problem_name;
  int64_t problem_batch = 0;
  std::vector<std::string> node_names;
};

// Cheapest valid R for a given S: R[t][t] = 1; with `compute_held`, a value held entering stage
// t+1 but not stage t is computed in stage t (retention; the MILP recomputes values only to
// checkpoint them for later stages); and every dependency a stage's computations need that is
// not held in S[t] is recomputed in that stage (transitively). Without `compute_held`, held
// values nothing in the stage needs are left to the caller (rounding drops them instead).
// See Note [frontier-advancing stages].
BoolMatrix derive_cheapest_r(const Problem& p, const BoolMatrix& S, bool compute_held = true);
// Row t of that R, written into R (which is n x n); `need` is scratch of n zero entries, left
// zero. Row t reads only rows t and (with compute_held) t + 1 of S.
void derive_cheapest_r_row(const Problem& p, const BoolMatrix& S, int t, bool compute_held,
                           std::vector<uint8_t>& need, BoolMatrix& R);
// derive_cheapest_r (with compute_held) for a schedule that may have copies: a value
// prefetched in stage t arrives for stage t + 1, which holds it without t computing it. The
// same R as derive_cheapest_r(p, s.S) where nothing is prefetched.
BoolMatrix derive_cheapest_r_with_copies(const Problem& p, const Schedule& s);
// Its row t (`need` as for derive_cheapest_r_row).
void derive_cheapest_r_row_with_copies(const Problem& p, const Schedule& s, int t,
                                       std::vector<uint8_t>& need, BoolMatrix& R);

// Note [memory semantics]
// Identical in the MILP, the simulator and the executor. While node k runs, everything resident
// plus k's output and k's workspace are in memory (its inputs are resident by definition).
// After k runs its workspace is released, then every value that nothing later in the schedule
// still needs before it would be recomputed is freed (including k's own output if unused). The
// budget is total bytes: constant_bytes + resident values (+ workspace while running).
// Offload (Note [offload semantics]): a copy to host issued at the stage's start (no device
// bytes change); Prefetch: the device bytes of a copy from host, allocated at the stage's start.
// HostFree: a host copy released after the last prefetch that reads it (or its own stage).
enum class StepKind { Compute, Free, Offload, Prefetch, HostFree };

struct SimStep {
  StepKind kind = StepKind::Compute;
  int node = -1;            // node computed, or node whose value is freed, offloaded, prefetched
  int stage = -1;
  bool recompute = false;   // Compute of a node already computed earlier in the step
  int64_t bytes_during = 0; // Compute: bytes in use while it runs (incl. workspace)
  int64_t bytes_after = 0;  // bytes in use after this step
};

struct SimResult {
  bool valid = false;
  std::string error;            // why not valid: names stage, node and missing dependency
  std::vector<SimStep> steps;   // ordered compute/free steps
  double total_cost = 0;        // compute_cost + copy_cost: what strategies minimise
  double compute_cost = 0;      // sum of costs of all computes
  double copy_cost = 0;         // time the copies add beyond the computes (Note [offload
                                // semantics], Note [streamed copies])
  int64_t peak_bytes = 0;       // max bytes_during/bytes_after, constant included
  int peak_step = -1;           // index into steps where the peak occurs
  int computes = 0, recomputes = 0;
  int offloads = 0, prefetches = 0;
  int64_t copied_bytes = 0;     // both directions
  int64_t host_peak_bytes = 0;  // host copies alive at once, at most
};

// True when stage t reads value i: it computes i (again) or a user of i.
bool stage_reads(const std::vector<std::vector<int>>& users, const Schedule& s, int t, int i);

// Replays `s` on `p`. Checks shape (T = n, R[t][t] = 1, no R/S above the frontier), that every
// dependency of every compute is resident, that S only holds available values, and that copies
// follow Note [offload semantics] (with copy_cost_per_byte > 0).
SimResult simulate(const Problem& p, const Schedule& s);

// JSON ("remat-schedule/1", solver/schedule_io.cpp): {"format", "strategy", "n", "R": [[nodes
// computed in stage t, ascending], ...], "S": [[nodes held entering stage t], ...], "status",
// "peak_bytes", "cost"}; peak/cost come from `sim` when given. Loading checks the shape and
// indices (errors name the file, stage and field); validity against a problem is simulate()'s.
// With `p`, the file also records the problem it solves ("problem": name, batch, node names),
// so a schedule can be checked against a graph before it runs (schedule_check_problem).
std::string schedule_to_json_text(const Schedule& s, const SimResult* sim = nullptr,
                                  const Problem* p = nullptr);
Schedule schedule_from_json_text(const std::string& text, const std::string& source);
void schedule_save(const Schedule& s, const std::string& path, const SimResult* sim = nullptr,
                   const Problem* p = nullptr);
Schedule schedule_load(const std::string& path);

// UserError naming `source` when the schedule was made for another problem: a different node
// count, or (when the file recorded them) another model name, batch or node names.
void schedule_check_problem(const Schedule& s, const Problem& p, const std::string& source);

}  // namespace remat
