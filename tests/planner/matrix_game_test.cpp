// SolveMatrixGame against games whose values are known in closed form, and on random games
// against the definition: the row mix guarantees the value against every column, the column
// mix holds every row to it.
#include "planner/matrix_game.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace gpipe {
namespace {

double RowGuarantee(const std::vector<std::vector<double>>& a, const std::vector<double>& x) {
  double least = 1e300;
  for (size_t j = 0; j < a[0].size(); ++j) {
    double v = 0;
    for (size_t i = 0; i < a.size(); ++i) v += x[i] * a[i][j];
    least = std::min(least, v);
  }
  return least;
}

double ColumnGuarantee(const std::vector<std::vector<double>>& a, const std::vector<double>& y) {
  double most = -1e300;
  for (const auto& row : a) {
    double v = 0;
    for (size_t j = 0; j < row.size(); ++j) v += row[j] * y[j];
    most = std::max(most, v);
  }
  return most;
}

TEST(MatrixGame, KnownValues) {
  // Matching pennies: value 0, both players half and half.
  MatrixGameSolution pennies = SolveMatrixGame({{1, -1}, {-1, 1}});
  EXPECT_NEAR(pennies.value, 0.0, 1e-9);
  EXPECT_NEAR(pennies.row[0], 0.5, 1e-9);
  EXPECT_NEAR(pennies.column[0], 0.5, 1e-9);
  // Rock, paper, scissors shifted by 3: value 3, a third each.
  MatrixGameSolution rps = SolveMatrixGame({{3, 2, 4}, {4, 3, 2}, {2, 4, 3}});
  EXPECT_NEAR(rps.value, 3.0, 1e-9);
  for (double x : rps.row) EXPECT_NEAR(x, 1.0 / 3, 1e-9);
  // One row: the least entry, the column player all on it.
  MatrixGameSolution one = SolveMatrixGame({{5, 2, 7}});
  EXPECT_NEAR(one.value, 2.0, 1e-9);
  EXPECT_NEAR(one.column[1], 1.0, 1e-9);
  // A saddle point: row 1 dominates, column 0 is its least.
  MatrixGameSolution saddle = SolveMatrixGame({{1, 3}, {4, 6}});
  EXPECT_NEAR(saddle.value, 4.0, 1e-9);
  EXPECT_NEAR(saddle.row[1], 1.0, 1e-9);
  // 2 x 2 without a saddle: value (ad - bc) / (a + d - b - c) = (8 - 1) / (2 + 4 - 1 - 1) = 1.75.
  MatrixGameSolution mixed = SolveMatrixGame({{2, 1}, {1, 4}});
  EXPECT_NEAR(mixed.value, 1.75, 1e-9);
}

// A constraint row: the column player's mix must keep it at or below 0. Column 0 costs 1 and
// breaks the constraint by 1, column 1 costs 3 and keeps it by 1: the best mix is half and half,
// value 2, and the constraint's price 1 (2 = 1 + 1 x 1 = 3 - 1 x 1). With no column that keeps it,
// the value is unbounded.
TEST(MatrixGame, ConstraintRowsArePriced) {
  MatrixGame game(3.0);
  game.AddRow({});
  game.AddRow({}, /*constraint=*/true);
  game.AddColumn({1.0, 1.0});
  EXPECT_FALSE(game.Solve().bounded);
  game.AddColumn({3.0, -1.0});
  const MatrixGameSolution s = game.Solve();
  ASSERT_TRUE(s.bounded);
  EXPECT_NEAR(s.value, 2.0, 1e-9);
  EXPECT_NEAR(s.row[0], 1.0, 1e-9);
  EXPECT_NEAR(s.row[1], 1.0, 1e-9);
  EXPECT_NEAR(s.column[0], 0.5, 1e-9);
  // Added after the columns, as the path bound adds them: the same.
  MatrixGame late(3.0);
  late.AddRow({});
  late.AddColumn({1.0});
  late.AddColumn({3.0});
  EXPECT_NEAR(late.Solve().value, 1.0, 1e-9);
  late.AddRow({1.0, -1.0}, /*constraint=*/true);
  const MatrixGameSolution t = late.Solve();
  EXPECT_NEAR(t.value, 2.0, 1e-9);
  EXPECT_NEAR(t.row[1], 1.0, 1e-9);
}

// Random games, square and not, with entries on scales from 1 to 1e4 (the path bound's are
// milliseconds): both mixes are distributions and meet at the value.
TEST(MatrixGame, RandomGamesMeetAtTheValue) {
  std::mt19937 rng(7);
  int games = 0;
  for (int rows : {1, 2, 5, 17, 40}) {
    for (int columns : {1, 3, 8, 33, 64}) {
      for (double scale : {1.0, 1e4}) {
        std::uniform_real_distribution<double> entry(0.3 * scale, scale);
        std::vector<std::vector<double>> a(rows, std::vector<double>(columns));
        for (auto& row : a) {
          for (double& x : row) x = entry(rng);
        }
        const MatrixGameSolution s = SolveMatrixGame(a);
        double row_sum = 0, column_sum = 0;
        for (double x : s.row) {
          EXPECT_GE(x, 0.0);
          row_sum += x;
        }
        for (double y : s.column) {
          EXPECT_GE(y, 0.0);
          column_sum += y;
        }
        EXPECT_NEAR(row_sum, 1.0, 1e-9);
        EXPECT_NEAR(column_sum, 1.0, 1e-9);
        const double tolerance = 1e-7 * scale;
        EXPECT_NEAR(RowGuarantee(a, s.row), s.value, tolerance) << rows << " x " << columns;
        EXPECT_NEAR(ColumnGuarantee(a, s.column), s.value, tolerance) << rows << " x " << columns;
        ++games;
      }
    }
  }
  EXPECT_EQ(games, 50);
}

// A game grown a row and a column at a time, solved after each and pruned now and then (as the
// path bound grows its game), against the same entries solved from scratch: the same value,
// and mixes that guarantee it.
TEST(MatrixGame, GrownGameMatchesSolvingAnew) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> entry(100.0, 400.0);
  int solves = 0, pruned = 0;
  for (int trial = 0; trial < 20; ++trial) {
    MatrixGame game(250.0);
    std::vector<std::vector<double>> a = {{entry(rng)}};  // the entries kept, as the game's
    game.AddRow({});
    game.AddColumn({a[0][0]});
    for (int step = 0; step < 60; ++step) {
      const MatrixGameSolution grown = game.Solve();
      const MatrixGameSolution anew = SolveMatrixGame(a);
      ASSERT_NEAR(grown.value, anew.value, 1e-6) << "trial " << trial << " step " << step;
      EXPECT_NEAR(RowGuarantee(a, grown.row), grown.value, 1e-6);
      EXPECT_NEAR(ColumnGuarantee(a, grown.column), grown.value, 1e-6);
      ++solves;
      if (step % 15 == 14) {
        // Keep what either mix uses (and a few more); drop the rest where the basis allows.
        std::vector<char> want_rows(a.size()), want_columns(a[0].size());
        for (size_t i = 0; i < a.size(); ++i) want_rows[i] = grown.row[i] > 0 || i % 3 == 0;
        for (size_t j = 0; j < a[0].size(); ++j) want_columns[j] = grown.column[j] > 0 || j % 4 == 0;
        const MatrixGame::Kept kept = game.Prune(want_rows, want_columns);
        std::vector<std::vector<double>> b;
        for (size_t i = 0; i < a.size(); ++i) {
          if (!kept.rows[i]) continue;
          b.emplace_back();
          for (size_t j = 0; j < a[i].size(); ++j) {
            if (kept.columns[j]) b.back().push_back(a[i][j]);
          }
        }
        pruned += static_cast<int>(a.size() - b.size());
        a = std::move(b);
        ASSERT_EQ(game.rows(), static_cast<int>(a.size()));
        ASSERT_EQ(game.columns(), static_cast<int>(a[0].size()));
        continue;
      }
      std::vector<double> row;
      for (size_t j = 0; j < a[0].size(); ++j) row.push_back(entry(rng));
      game.AddRow(row);
      a.push_back(row);
      std::vector<double> column;
      for (auto& r : a) {
        r.push_back(entry(rng));
        column.push_back(r.back());
      }
      game.AddColumn(column);
    }
  }
  EXPECT_EQ(solves, 20 * 60);
  EXPECT_GT(pruned, 0);
}

}  // namespace
}  // namespace gpipe
