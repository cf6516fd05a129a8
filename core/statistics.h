// Robust summaries of repeated measurements: the median and half the interquartile range, with
// linear interpolation between order statistics. Used by the profiler, compare and validate; and
// the sign convention of a prediction's error.
#pragma once

#include <vector>

namespace gpipe {

/// The q-quantile (0 <= q <= 1) of `values`, interpolated; 0 for no values.
double Quantile(std::vector<double> values, double q);
double Median(std::vector<double> values);
/// The arithmetic mean; 0 for no values.
double Mean(const std::vector<double>& values);
/// The error of a prediction, in the one sign convention of every table, finding and JSON field:
/// (predicted - measured) / measured, negative when the prediction is too low (the run took
/// longer or held more than predicted); 0 when nothing was measured (measured == 0).
double RelativeError(double predicted, double measured);
/// That convention in words, printed once above each table of errors.
inline constexpr const char* kErrorConvention =
    "error = (predicted - measured) / measured: negative when the prediction is too low";
/// Half the interquartile range: the spread a median is reported with (0 for fewer than 2 values).
double HalfIqr(std::vector<double> values);

}  // namespace gpipe
