// The two searches over a monotone predicate that the partition search uses: the largest integer
// that still passes (a stage's last layer), and the bracket of a real threshold (a cutoff or a
// work cap), each written once here.
#pragma once

#include <algorithm>
#include <optional>

namespace gpipe {

// The largest x in [lo, hi] with fits(x), for `fits` true up to some point and false after it;
// lo - 1 when fits(lo) is false. Gallops out from `guess`, so a close guess costs a few calls.
template <typename Fits>
int LargestTrue(int lo, int hi, int guess, const Fits& fits) {
  guess = std::clamp(guess, lo, hi);
  int below = lo - 1, above = hi + 1;  // fits(below) holds (or below < lo); fits(above) does not
  if (fits(guess)) {
    below = guess;
    for (int step = 1; below < hi; step *= 2) {
      const int x = std::min(hi, guess + step);
      if (!fits(x)) {
        above = x;
        break;
      }
      below = x;
    }
  } else {
    above = guess;
    for (int step = 1; above > lo; step *= 2) {
      const int x = std::max(lo, guess - step);
      if (fits(x)) {
        below = x;
        break;
      }
      above = x;
    }
  }
  while (above - below > 1) {
    const int mid = below + (above - below) / 2;
    if (fits(mid)) below = mid; else above = mid;
  }
  return below;
}

// The bracket [lo, hi] of the threshold of a predicate false below it and true from it on,
// `passes(x)` monotone in x >= 0: 60 bisection steps from [0, hi0], hi0 doubled from `start`
// until it passes. lo fails (or is 0); hi passes. nullopt when nothing up to 1e30 passes.
struct Bracket {
  double lo, hi;
};
template <typename Passes>
std::optional<Bracket> Threshold(double start, const Passes& passes) {
  double lo = 0, hi = start;
  while (!passes(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > 1e30) return std::nullopt;
  }
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (passes(mid)) hi = mid; else lo = mid;
  }
  return Bracket{lo, hi};
}

}  // namespace gpipe
