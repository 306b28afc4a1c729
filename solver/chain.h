// Linear-chain problems (n forward layers, a loss, n backward layers) used by tests, benchmarks
// and the Griewank baseline's checks. Node order: f_0..f_{n-1}, loss, b_{n-1}..b_0.
#pragma once

#include <cstdint>
#include <vector>

#include "solver/problem.h"

namespace remat {

// cost[k], bytes[k]: forward layer k's compute cost and output bytes (k = 0..n-1).
// f_k depends on f_{k-1}; loss (cost 1, 4 bytes) on f_{n-1}; b_k (cost 2 * cost[k], bytes of
// layer k's input: bytes[k-1], or bytes[0] for k = 0) on the incoming gradient (b_{k+1}, or the
// loss for k = n-1), on f_{k-1} (layer k's input, k > 0) and on f_k (layer k's output).
Problem make_chain_problem(const std::vector<double>& cost, const std::vector<int64_t>& bytes,
                           int64_t constant_bytes = 0);

// make_chain_problem with cost 1 and 1 byte per forward layer.
Problem make_uniform_chain(int n);

// Index helpers for make_chain_problem's layout.
inline int chain_forward_index(int /*n*/, int k) { return k; }
inline int chain_loss_index(int n) { return n; }
inline int chain_backward_index(int n, int k) { return 2 * n - k; }

}  // namespace remat
