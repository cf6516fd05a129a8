// Robust summaries of repeated measurements: the median and half the interquartile range, with
// linear interpolation between order statistics. Used by the profiler, compare and validate.
#pragma once

#include <vector>

namespace gpipe {

/// The q-quantile (0 <= q <= 1) of `values`, interpolated; 0 for no values.
double Quantile(std::vector<double> values, double q);
double Median(std::vector<double> values);
/// The arithmetic mean; 0 for no values.
double Mean(const std::vector<double>& values);
/// Half the interquartile range: the spread a median is reported with (0 for fewer than 2 values).
double HalfIqr(std::vector<double> values);

}  // namespace gpipe
