// The value of a zero-sum matrix game and an optimal mixed strategy for each player, by the
// simplex method on its linear program. The row player picks row i with probability x_i to
// maximize sum_i x_i a[i][j] against every column j; the column player picks column j with
// probability y_j to minimize sum_j a[i][j] y_j against every row i; both reach the same value.
// Used by the path bound (planner/path_bound.h): rows are chains of actions, columns partitions.
//
// The game grows a row or a column at a time and is solved again from the last basis (the dual
// simplex after a row, the primal after a column): a few pivots each, where solving anew takes
// as many as the game has rows and columns.
#pragma once

#include <vector>

namespace gpipe {

struct MatrixGameSolution {
  double value = 0;
  /// x: the maximizing row player's mix over the rows that are not constraints (summing to 1);
  /// at a constraint row, its price: the value is sum_i x_i a[i][j] over every row, constraint
  /// rows included, for every column j the column player uses (and at least that for the others).
  std::vector<double> row;
  std::vector<double> column;  // y: the minimizing column player's mix
  /// False when no mix of the columns keeps every constraint row at or below 0 (the value is
  /// then infinite, and `row` the uniform mix with no prices).
  bool bounded = true;
};

class MatrixGame {
 public:
  /// Entries are priced relative to `scale` (the size of a typical entry, > 0): the pivots'
  /// tolerances are relative to it.
  explicit MatrixGame(double scale);

  /// A row: its entry in each column so far. REQUIRES: finite, > -scale. With `constraint`, a
  /// row that the column player's mix must keep at or below 0 instead (any finite entries, best
  /// near 1 in size): the row player prices it, at any price >= 0, in addition to its mix.
  void AddRow(const std::vector<double>& entries, bool constraint = false);
  /// A column: its entry in each row so far (at least one). REQUIRES: as AddRow.
  void AddColumn(const std::vector<double>& entries);
  /// Drops the rows and columns not wanted (`want_rows[i]`, `want_columns[j]` false) where the
  /// basis allows it: a row whose constraint is slack, a column out of the basis. Returns which
  /// of each are kept (1), in the same order; the kept keep their order.
  struct Kept {
    std::vector<char> rows, columns;
  };
  Kept Prune(const std::vector<char>& want_rows, const std::vector<char>& want_columns);

  int rows() const { return static_cast<int>(a_.size()); }
  int columns() const { return a_.empty() ? 0 : static_cast<int>(a_[0].size()); }
  /// REQUIRES: at least one row and one column.
  MatrixGameSolution Solve();

 private:
  // Variables: the game's columns z_j (ids 0 .. columns - 1) and one slack per row (id
  // kSlack + i).
  static constexpr int kSlack = 1 << 24;
  double& At(int row, int id) { return id >= kSlack ? slack_[row][id - kSlack] : z_[row][id]; }
  double& CostOf(int id) { return id >= kSlack ? slack_cost_[id - kSlack] : z_cost_[id]; }
  void Rebuild();
  void Pivot(int row, int id);
  bool PrimalSimplex();
  bool DualSimplex();

  double scale_;
  std::vector<std::vector<double>> a_;  // the entries, scaled and shifted (a / scale + 1) but constraints'
  std::vector<char> constraint_;        // per row
  // The tableau of: maximize sum z subject to a z + slack = 1, z, slack >= 0; one row per
  // constraint row of the tableau: z_ and slack_ its coefficients, rhs_ its right-hand side,
  // basis_ the variable basic in it; z_cost_ and slack_cost_ the reduced costs (slack_cost_ the
  // dual prices), objective_ sum z.
  std::vector<std::vector<double>> z_, slack_;
  std::vector<double> rhs_, z_cost_, slack_cost_;
  double objective_ = 0;
  std::vector<int> basis_;
  bool optimal_ = false;
  int pivots_ = 0;  // since the last rebuild
};

/// The game `a` solved from scratch. REQUIRES: a row, a column, finite entries.
MatrixGameSolution SolveMatrixGame(const std::vector<std::vector<double>>& a);

}  // namespace gpipe
