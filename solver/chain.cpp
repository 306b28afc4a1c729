// Builds linear-chain rematerialization problems (see solver/chain.h for the layout).
#include "solver/chain.h"

#include <string>

#include "runtime/core/check.h"

namespace remat {

Problem make_chain_problem(const std::vector<double>& cost, const std::vector<int64_t>& bytes,
                           int64_t constant_bytes) {
  REMAT_CHECK(cost.size() == bytes.size() && !cost.empty(),
              "chain needs one cost and one size per layer");
  const int n = static_cast<int>(cost.size());
  Problem p;
  p.name = "chain" + std::to_string(n);
  p.constant_bytes = constant_bytes;
  for (int k = 0; k < n; ++k) {
    ProblemNode f;
    f.name = "f" + std::to_string(k);
    f.kind = ProblemNodeKind::Forward;
    f.cost = cost[k];
    f.bytes = bytes[k];
    if (k > 0) f.deps = {k - 1};
    p.nodes.push_back(f);
  }
  ProblemNode loss;
  loss.name = "loss";
  loss.kind = ProblemNodeKind::Loss;
  loss.cost = 1;
  loss.bytes = 4;
  loss.deps = {n - 1};
  p.nodes.push_back(loss);
  for (int k = n - 1; k >= 0; --k) {
    ProblemNode b;
    b.name = "b" + std::to_string(k);
    b.kind = ProblemNodeKind::Backward;
    b.cost = 2 * cost[k];
    b.bytes = k > 0 ? bytes[k - 1] : bytes[0];
    if (k > 0) b.deps.push_back(k - 1);                  // layer input
    b.deps.push_back(k);                                 // layer output
    b.deps.push_back(k == n - 1 ? chain_loss_index(n)    // incoming gradient
                                : chain_backward_index(n, k + 1));
    p.nodes.push_back(b);
  }
  return p;
}

Problem make_uniform_chain(int n) {
  return make_chain_problem(std::vector<double>(n, 1.0), std::vector<int64_t>(n, 1));
}

}  // namespace remat
