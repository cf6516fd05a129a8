// The value of a zero-sum matrix game and an optimal mixed strategy for each player, by the
// simplex method on its linear program. The row player picks row i with probability x_i to
// maximize sum_i x_i a[i][j] against every column j; the column player picks column j with
// probability y_j to minimize sum_j a[i][j] y_j against every row i; both reach the same value.
// Used by the path bound (planner/path_bound.h): rows are chains of actions, columns partitions.
#pragma once

#include <vector>

namespace gpipe {

struct MatrixGameSolution {
  double value = 0;
  std::vector<double> row;     // x: the maximizing row player's mix
  std::vector<double> column;  // y: the minimizing column player's mix
};

/// REQUIRES: `a` has at least one row, every row the same number of columns (at least one),
/// finite entries.
MatrixGameSolution SolveMatrixGame(const std::vector<std::vector<double>>& a);

}  // namespace gpipe
