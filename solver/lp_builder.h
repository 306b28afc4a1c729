// Column-wise assembly of an LP/MIP into MilpModel's arrays: columns with bounds, objective and
// integrality; rows as (column, coefficient) lists. Shared by every model the solver builds.
#pragma once

#include <utility>
#include <vector>

#include "solver/milp_model.h"

namespace remat {

struct LpBuilder {
  MilpModel& m;
  std::vector<std::vector<std::pair<int, double>>> cols;  // per column: (row, coefficient)

  int add_col(double lb, double ub, double obj, bool integer) {
    m.col_lb.push_back(lb);
    m.col_ub.push_back(ub);
    m.obj.push_back(obj);
    m.is_int.push_back(integer ? 1 : 0);
    cols.emplace_back();
    return m.num_cols() - 1;
  }
  // Adds a row lb <= sum coef * x[col] <= ub; entries with col < 0 or coef 0 are dropped.
  void add_row(double lb, double ub, const std::vector<std::pair<int, double>>& entries) {
    int row = m.num_rows();
    m.row_lb.push_back(lb);
    m.row_ub.push_back(ub);
    for (const auto& [col, coef] : entries)
      if (col >= 0 && coef != 0) cols[col].push_back({row, coef});
  }
  // Writes the column-major matrix (starts, index, value).
  void finish() {
    m.starts.assign(1, 0);
    for (const auto& c : cols) {
      for (const auto& [row, coef] : c) {
        m.index.push_back(row);
        m.value.push_back(coef);
      }
      m.starts.push_back(static_cast<int>(m.index.size()));
    }
  }
};

}  // namespace remat
