// A lower bound on the busiest rank's work when whole layers are dealt to ranks, each rank
// getting at least a given number of them (several stages per rank, none empty: at least v
// layers each), however they are dealt, contiguous or not. With the layers' works sorted from
// the heaviest, p_1 >= p_2 >= ...: among the jK + 1 heaviest, some rank holds j + 1 or more, so
// its work is at least the j + 1 lightest of them (p_{jK+1-j} + ... + p_{jK+1}), and, where the
// rank must hold more layers than that, the lightest of the others too (the classic bound of
// scheduling on identical machines, with the count). It sees what the work spread evenly cannot:
// 42 equal blocks on 8 ranks put 6 on one of them, not 5.25.
#pragma once

#include <vector>

namespace gpipe {

/// The bound, for `works` (one per layer, >= 0) on `ranks` ranks each holding at least
/// `at_least` layers (>= 1). 0 when there are no layers; REQUIRES ranks >= 1.
double BusiestRankLowerBound(std::vector<double> works, int ranks, int at_least);

}  // namespace gpipe
