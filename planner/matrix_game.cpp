#include "planner/matrix_game.h"

#include <algorithm>
#include <cmath>

namespace gpipe {

MatrixGameSolution SolveMatrixGame(const std::vector<std::vector<double>>& a) {
  const int rows = static_cast<int>(a.size()), columns = static_cast<int>(a[0].size());
  // Every entry mapped into [1, 2] (x -> 1 + (x - least) / range): the value maps alike, the
  // strategies do not change, and the pivots' tolerances hold whatever the entries' scale.
  double least = a[0][0], most = a[0][0];
  for (const auto& row : a) {
    least = std::min(least, *std::min_element(row.begin(), row.end()));
    most = std::max(most, *std::max_element(row.begin(), row.end()));
  }
  const double range = most > least ? most - least : 1.0;
  // The column player's program: maximize sum_j z_j subject to sum_j a'[i][j] z_j <= 1
  // for every row i, z >= 0; the value is 1 / sum z, y = z x value, and the row player's x are
  // the constraints' dual prices x value. The slack basis is feasible (right-hand sides 1).
  // Tableau: rows x (columns + rows slacks + right-hand side), and the objective row.
  const int width = columns + rows + 1;
  std::vector<std::vector<double>> t(rows + 1, std::vector<double>(width, 0.0));
  std::vector<int> basis(rows);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < columns; ++j) t[i][j] = 1.0 + (a[i][j] - least) / range;
    t[i][columns + i] = 1.0;
    t[i][width - 1] = 1.0;
    basis[i] = columns + i;
  }
  for (int j = 0; j < columns; ++j) t[rows][j] = -1.0;  // reduced costs of maximizing sum z
  constexpr double kEps = 1e-9;
  const int most_pivots = 20 * (rows + columns);
  for (int pivots = 0; pivots < most_pivots; ++pivots) {
    // Dantzig's rule (the most negative reduced cost), then, past half the pivots allowed,
    // Bland's (the lowest-numbered column that improves), which cannot cycle; ties in the ratio
    // test go to the lowest-numbered basic variable.
    int enter = -1;
    for (int j = 0; j < width - 1; ++j) {
      if (t[rows][j] >= -kEps) continue;
      if (enter < 0 || (pivots < most_pivots / 2 && t[rows][j] < t[rows][enter])) enter = j;
      if (pivots >= most_pivots / 2) break;
    }
    if (enter < 0) break;
    int leave = -1;
    double best_ratio = 0;
    for (int i = 0; i < rows; ++i) {
      if (t[i][enter] <= kEps) continue;
      const double ratio = t[i][width - 1] / t[i][enter];
      if (leave < 0 || ratio < best_ratio - kEps || (ratio <= best_ratio + kEps && basis[i] < basis[leave])) {
        leave = i;
        best_ratio = ratio;
      }
    }
    if (leave < 0) break;  // unbounded: impossible with positive entries
    const double pivot = t[leave][enter];
    for (double& x : t[leave]) x /= pivot;
    for (int i = 0; i <= rows; ++i) {
      if (i == leave || t[i][enter] == 0.0) continue;
      const double factor = t[i][enter];
      for (int j = 0; j < width; ++j) t[i][j] -= factor * t[leave][j];
    }
    basis[leave] = enter;
  }
  const double total = t[rows][width - 1];  // sum z at the optimum
  MatrixGameSolution out;
  out.value = least + (1.0 / total - 1.0) * range;
  out.column.assign(columns, 0.0);
  for (int i = 0; i < rows; ++i) {
    if (basis[i] < columns) out.column[basis[i]] = t[i][width - 1] / total;
  }
  out.row.assign(rows, 0.0);
  for (int i = 0; i < rows; ++i) out.row[i] = std::max(0.0, t[rows][columns + i]) / total;
  // (rounding: make each mix sum to 1; a mix that rounding ruined is the uniform one)
  for (std::vector<double>* mix : {&out.row, &out.column}) {
    double sum = 0;
    for (double& x : *mix) {
      if (!std::isfinite(x) || x < 0) x = 0;
      sum += x;
    }
    for (double& x : *mix) x = sum > 0 ? x / sum : 1.0 / static_cast<double>(mix->size());
  }
  return out;
}

}  // namespace gpipe
