#include "core/statistics.h"

#include <algorithm>

namespace gpipe {
namespace {

double SortedQuantile(const std::vector<double>& sorted, double q) {
  const double x = q * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(x);
  const double f = x - static_cast<double>(i);
  return i + 1 < sorted.size() ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

}  // namespace

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return SortedQuantile(values, q);
}

double Median(std::vector<double> values) { return Quantile(std::move(values), 0.5); }

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (const double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double RelativeError(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / measured : 0.0;
}

double HalfIqr(std::vector<double> values) {
  if (values.size() < 2) return 0;
  std::sort(values.begin(), values.end());
  return 0.5 * (SortedQuantile(values, 0.75) - SortedQuantile(values, 0.25));
}

}  // namespace gpipe
