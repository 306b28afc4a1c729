// The rematerialization problem: a DAG of single-output nodes in topological order, each with a
// compute cost, output bytes and workspace bytes, plus the constant bytes resident all step.
// Read from / written to "remat-problem/1" JSON; built from a training graph + cost table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace remat {

enum class ProblemNodeKind { Forward, Loss, Backward };

// How copies over the host link overlap compute (Note [offload semantics] and Note [streamed
// copies] in solver/schedule.h): Stage, each copy runs within its own stage (what the MILP
// models); Stream, copies queue on their streams and run across stages, waited for only where
// their value is freed or read.
enum class CopyOverlap { Stage, Stream };

const char* copy_overlap_name(CopyOverlap overlap);
// UserError naming `where` unless `name` is "stage" or "stream".
CopyOverlap copy_overlap_from_name(const std::string& name, const std::string& where);

const char* problem_node_kind_name(ProblemNodeKind kind);

struct ProblemNode {
  std::string name;
  ProblemNodeKind kind = ProblemNodeKind::Forward;
  double cost = 0;              // compute cost: FLOPs or milliseconds (Problem::cost_unit)
  int64_t bytes = 0;            // output bytes held while the value is resident
  int64_t workspace_bytes = 0;  // scratch bytes only while this node runs
  std::vector<int> deps;        // indices of earlier nodes, strictly ascending, no duplicates
};

// The most nodes a problem may have: schedules are n x n matrices (Note [checked sizes]).
constexpr int kMaxProblemNodes = 100000;

struct Problem {
  std::string name;
  std::string cost_unit = "flops";  // "flops" or "ms"
  int64_t batch = 1;                // batch size the bytes (and costs) were measured at
  int64_t constant_bytes = 0;       // params, grads, optimizer state, batch, labels
  int64_t batch_constant_bytes = 0; // the part of constant_bytes that scales with the batch
                                    // (the input batch and labels); <= constant_bytes
  // The host link (Note [offload semantics] in solver/schedule.h): cost units per byte copied
  // between device and host, each direction having its own stream. 0: no link, so no schedule
  // offloads. Tools set it from a bandwidth (and, for FLOPs costs, a device rate).
  double copy_cost_per_byte = 0;
  CopyOverlap copy_overlap = CopyOverlap::Stage;
  std::vector<ProblemNode> nodes;

  int size() const { return static_cast<int>(nodes.size()); }
};

// Sets p.copy_cost_per_byte for a host link of `bytes_per_second` each way (nothing when <= 0):
// 1000 / bytes_per_second ms per byte for measured costs, device_flops / bytes_per_second FLOPs
// per byte for FLOPs costs (the device's sustained rate turns copy time into FLOPs); and how its
// copies overlap compute.
void problem_set_link(Problem& p, double bytes_per_second, double device_flops,
                      CopyOverlap overlap = CopyOverlap::Stage);

// users[i] = indices of nodes that depend on node i, ascending.
std::vector<std::vector<int>> problem_users(const Problem& p);

// Throws UserError naming `source` and the node for: forward references, cycles, self or
// duplicate deps, negative sizes/costs, non-finite costs, empty problem, duplicate node names,
// more than kMaxProblemNodes nodes, and sizes whose sum (constant + every node's bytes + the
// largest workspace) exceeds kMaxCount (Note [checked sizes]).
void problem_validate(const Problem& p, const std::string& source = "problem");

// JSON ("remat-problem/1"). Load/parse validate; errors name the file and the node index/field.
Problem problem_from_json_text(const std::string& text, const std::string& source);
std::string problem_to_json_text(const Problem& p);
Problem problem_load(const std::string& path);
void problem_save(const Problem& p, const std::string& path);

// Bytes in memory while node k runs, besides the constant and other resident values: its
// output, its workspace and its inputs (Note [memory semantics]).
int64_t problem_working_set(const Problem& p, int k);

// Smallest budget any schedule can meet (bytes, constant included): max over nodes k of
// constant + problem_working_set(p, k).
int64_t problem_min_budget(const Problem& p);

// Bytes if every value were kept for the whole step (an upper bound on any sane schedule).
int64_t problem_total_bytes(const Problem& p);

// The same graph at another batch size: activation bytes, workspace, cost and the batch part of
// the constant (input and labels) scale linearly with batch (rounded up to whole bytes); the
// rest of the constant (parameters, gradients, optimizer state) does not. A size that leaves
// kMaxCount at `batch` is a UserError naming the node and field.
Problem problem_at_batch(const Problem& p, int64_t batch);

}  // namespace remat
