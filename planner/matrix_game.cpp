#include "planner/matrix_game.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpipe {
namespace {

constexpr double kEps = 1e-10;
// Past this many pivots the tableau is rebuilt from the entries (rounding accumulates).
constexpr int kRebuildAfter = 400;

}  // namespace

MatrixGame::MatrixGame(double scale) : scale_(scale > 0 ? scale : 1.0) {}

void MatrixGame::Rebuild() {
  const int m = rows(), n = columns();
  z_ = a_;
  slack_.assign(m, std::vector<double>(m, 0.0));
  for (int i = 0; i < m; ++i) slack_[i][i] = 1.0;
  rhs_.resize(m);
  for (int i = 0; i < m; ++i) rhs_[i] = constraint_[i] ? 0.0 : 1.0;
  z_cost_.assign(n, -1.0);
  slack_cost_.assign(m, 0.0);
  objective_ = 0;
  basis_.resize(m);
  for (int i = 0; i < m; ++i) basis_[i] = kSlack + i;
  pivots_ = 0;
  optimal_ = false;
}

void MatrixGame::Pivot(int row, int id) {
  const int m = rows(), n = columns();
  const double p = At(row, id);
  for (double& x : z_[row]) x /= p;
  for (double& x : slack_[row]) x /= p;
  rhs_[row] /= p;
  const auto eliminate = [&](std::vector<double>& z, std::vector<double>& slack, double& rhs, double f) {
    for (int j = 0; j < n; ++j) z[j] -= f * z_[row][j];
    for (int k = 0; k < m; ++k) slack[k] -= f * slack_[row][k];
    rhs -= f * rhs_[row];
  };
  for (int i = 0; i < m; ++i) {
    if (i == row) continue;
    const double f = At(i, id);
    if (f != 0.0) eliminate(z_[i], slack_[i], rhs_[i], f);
  }
  const double f = CostOf(id);
  if (f != 0.0) eliminate(z_cost_, slack_cost_, objective_, f);
  basis_[row] = id;
  ++pivots_;
}

bool MatrixGame::PrimalSimplex() {
  const int m = rows(), n = columns();
  const int most = 50 * (m + n) + 50;
  for (int step = 0; step < most; ++step) {
    // Dantzig's rule (the most negative reduced cost); past half the steps allowed, Bland's
    // (the first that improves), which cannot cycle. Ties in the ratio test: the lowest id.
    const bool bland = step > most / 2;
    int enter = -1;
    double best = -kEps;
    for (int id = 0; id < n + m && (enter < 0 || !bland); ++id) {
      const int v = id < n ? id : kSlack + id - n;
      const double c = CostOf(v);
      if (c < best) {
        best = bland ? -kEps : c;
        enter = v;
      }
    }
    if (enter < 0) return true;
    int leave = -1;
    double ratio = 0;
    for (int i = 0; i < m; ++i) {
      const double x = At(i, enter);
      if (x <= kEps) continue;
      const double r = rhs_[i] / x;
      if (leave < 0 || r < ratio - kEps || (r <= ratio + kEps && basis_[i] < basis_[leave])) {
        leave = i;
        ratio = r;
      }
    }
    if (leave < 0) return false;  // unbounded: not with positive entries
    Pivot(leave, enter);
  }
  return false;
}

bool MatrixGame::DualSimplex() {
  const int m = rows(), n = columns();
  const int most = 50 * (m + n) + 50;
  for (int step = 0; step < most; ++step) {
    int leave = -1;
    for (int i = 0; i < m; ++i) {
      if (rhs_[i] < -kEps && (leave < 0 || rhs_[i] < rhs_[leave])) leave = i;
    }
    if (leave < 0) return true;
    int enter = -1;
    double ratio = 0;
    for (int id = 0; id < n + m; ++id) {
      const int v = id < n ? id : kSlack + id - n;
      const double x = At(leave, v);
      if (x >= -kEps) continue;
      const double r = std::max(0.0, CostOf(v)) / -x;
      if (enter < 0 || r < ratio - kEps) {
        enter = v;
        ratio = r;
      }
    }
    if (enter < 0) return false;  // infeasible: not with z = 0 feasible
    Pivot(leave, enter);
  }
  return false;
}

void MatrixGame::AddRow(const std::vector<double>& entries, bool constraint) {
  const int m = rows(), n = columns();
  std::vector<double> scaled(n);
  for (int j = 0; j < n; ++j) scaled[j] = constraint ? entries[j] : entries[j] / scale_ + 1.0;
  a_.push_back(scaled);
  constraint_.push_back(constraint ? 1 : 0);
  if (z_.size() != static_cast<size_t>(m) || m == 0) {
    optimal_ = false;
    z_.clear();  // (rebuilt by Solve)
    return;
  }
  // The new constraint's row in the current basis: its slack basic, the basic columns
  // eliminated. Its right-hand side is 1 less what the current z spends; negative where the
  // current solution breaks it (the dual simplex repairs it while the costs stay optimal).
  for (auto& row : slack_) row.push_back(0.0);
  slack_cost_.push_back(0.0);
  std::vector<double> z = scaled, slack(m + 1, 0.0);
  slack[m] = 1.0;
  double rhs = constraint ? 0.0 : 1.0;
  for (int i = 0; i < m; ++i) {
    if (basis_[i] >= kSlack) continue;
    const double f = z[basis_[i]];
    if (f == 0.0) continue;
    for (int j = 0; j < n; ++j) z[j] -= f * z_[i][j];
    for (int k = 0; k <= m; ++k) slack[k] -= f * slack_[i][k];
    rhs -= f * rhs_[i];
  }
  z_.push_back(std::move(z));
  slack_.push_back(std::move(slack));
  rhs_.push_back(rhs);
  basis_.push_back(kSlack + m);
  if (optimal_ && rhs < -kEps) optimal_ = DualSimplex() && PrimalSimplex();
}

void MatrixGame::AddColumn(const std::vector<double>& entries) {
  const int m = rows();
  for (int i = 0; i < m; ++i) a_[i].push_back(constraint_[i] ? entries[i] : entries[i] / scale_ + 1.0);
  if (z_.size() != static_cast<size_t>(m)) {
    optimal_ = false;
    return;
  }
  // Its tableau column is B^-1 a (B^-1: the slack columns), its reduced cost y a - 1.
  double cost = -1.0;
  for (int k = 0; k < m; ++k) cost += slack_cost_[k] * a_[k].back();
  z_cost_.push_back(cost);
  for (int i = 0; i < m; ++i) {
    double x = 0;
    for (int k = 0; k < m; ++k) x += slack_[i][k] * a_[k].back();
    z_[i].push_back(x);
  }
  if (cost < -kEps) optimal_ = false;
}

MatrixGame::Kept MatrixGame::Prune(const std::vector<char>& want_rows, const std::vector<char>& want_columns) {
  Kept kept{std::vector<char>(rows(), 1), std::vector<char>(columns(), 1)};
  const bool tableau = z_.size() == static_cast<size_t>(rows());
  std::vector<char> basic(columns(), 0), slack_basic(rows(), 0);
  std::vector<int> row_of_slack(rows(), -1);
  if (tableau) {
    for (int i = 0; i < rows(); ++i) {
      if (basis_[i] >= kSlack) {
        slack_basic[basis_[i] - kSlack] = 1;
        row_of_slack[basis_[i] - kSlack] = i;
      } else {
        basic[basis_[i]] = 1;
      }
    }
  }
  // Columns out of the basis, then constraints whose slack is basic (their tableau row and
  // slack column go; no other row depends on them).
  for (int j = columns() - 1; j >= 0; --j) {
    if (want_columns[j] || (tableau && basic[j])) continue;
    kept.columns[j] = 0;
    for (auto& row : a_) row.erase(row.begin() + j);
    if (!tableau) continue;
    for (auto& row : z_) row.erase(row.begin() + j);
    z_cost_.erase(z_cost_.begin() + j);
    for (int& b : basis_) b -= b < kSlack && b > j ? 1 : 0;
  }
  for (int k = rows() - 1; k >= 0; --k) {
    if (want_rows[k] || (tableau && !slack_basic[k])) continue;
    kept.rows[k] = 0;
    a_.erase(a_.begin() + k);
    constraint_.erase(constraint_.begin() + k);
    if (!tableau) continue;
    const int r = row_of_slack[k];
    z_.erase(z_.begin() + r);
    slack_.erase(slack_.begin() + r);
    rhs_.erase(rhs_.begin() + r);
    basis_.erase(basis_.begin() + r);
    for (int& other : row_of_slack) other -= other > r ? 1 : 0;
    for (auto& row : slack_) row.erase(row.begin() + k);
    slack_cost_.erase(slack_cost_.begin() + k);
    for (int& b : basis_) b -= b >= kSlack && b > kSlack + k ? 1 : 0;
  }
  return kept;
}

MatrixGameSolution MatrixGame::Solve() {
  const int m = rows(), n = columns();
  if (z_.size() != static_cast<size_t>(m) || pivots_ > kRebuildAfter) Rebuild();
  bool feasible = true;
  for (double r : rhs_) feasible = feasible && r >= -kEps;
  if (!optimal_ && !(feasible && PrimalSimplex())) {
    Rebuild();
    PrimalSimplex();
  }
  optimal_ = true;
  MatrixGameSolution out;
  const double total = objective_;  // sum z
  out.column.assign(n, 0.0);
  out.row.assign(m, 0.0);
  // The uniform mix over the rows that are not constraints, no prices.
  const auto uniform_rows = [&] {
    int mixed = 0;
    for (int k = 0; k < m; ++k) mixed += constraint_[k] ? 0 : 1;
    for (int k = 0; k < m; ++k) out.row[k] = constraint_[k] ? 0.0 : 1.0 / mixed;
  };
  if (total <= kEps) {
    // No mix of the columns keeps the constraints: the row player's prices have no bound.
    out.bounded = false;
    out.value = std::numeric_limits<double>::infinity();
    uniform_rows();
    for (double& y : out.column) y = 1.0 / n;
    return out;
  }
  out.value = (1.0 / total - 1.0) * scale_;
  for (int i = 0; i < m; ++i) {
    if (basis_[i] < kSlack) out.column[basis_[i]] = rhs_[i] / total;
  }
  // The dual prices: the mix's share relative to its total; a constraint's, in the value's units.
  double mix_total = 0;
  for (int k = 0; k < m; ++k) {
    const double x = std::max(0.0, slack_cost_[k]);
    out.row[k] = std::isfinite(x) ? x : 0.0;
    if (!constraint_[k]) mix_total += out.row[k];
  }
  for (int k = 0; k < m; ++k) {
    if (constraint_[k]) {
      out.row[k] = mix_total > 0 ? out.row[k] * scale_ / mix_total : 0.0;
    } else {
      out.row[k] = mix_total > 0 ? out.row[k] / mix_total : 0.0;
    }
  }
  double column_total = 0;
  for (double& y : out.column) {
    if (!std::isfinite(y) || y < 0) y = 0;
    column_total += y;
  }
  for (double& y : out.column) y = column_total > 0 ? y / column_total : 1.0 / n;
  if (mix_total <= 0) uniform_rows();
  return out;
}

MatrixGameSolution SolveMatrixGame(const std::vector<std::vector<double>>& a) {
  double most = 0;
  for (const auto& row : a) {
    for (double x : row) most = std::max(most, std::abs(x));
  }
  // (entries at least -scale: the shift keeps every scaled entry above 0)
  MatrixGame game(2 * most + 1e-300);
  for (size_t i = 0; i < a.size(); ++i) game.AddRow(std::vector<double>());
  for (size_t j = 0; j < a[0].size(); ++j) {
    std::vector<double> column;
    for (const auto& row : a) column.push_back(row[j]);
    game.AddColumn(column);
  }
  return game.Solve();
}

}  // namespace gpipe
