#include "compare/core_sharing_fit.h"

#include <cmath>

#include "core/schedule/validate.h"
#include "core/step_costs.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace gpipe {

Expected<double> FitToCoreSharing(Plan plan, const std::vector<double>& fitted, double ratio, int capacity) {
  // Sharing only ever slows a rank (a rate above one rank's is capped): at or below one rank's
  // speed there is nothing to fit, and the average stands.
  if (ratio <= 1.0) return ratio;
  Expected<Schedule> schedule = BuildSchedule(plan);
  if (!schedule.ok()) return schedule.status();
  StepCosts costs;
  costs.concurrent_ranks = capacity;
  // The compute the simulator prices for the run with these factors, counts 1..n.
  const auto busy = [&](const std::vector<double>& factors) -> Expected<double> {
    costs.compute_scale.clear();
    for (double f : factors) costs.compute_scale.push_back({f, 0.0});
    plan.profile.step_costs = costs;
    Expected<CostModel> model = BuildCostModel(plan);
    if (!model.ok()) return model.status();
    Expected<SimResult> sim = Simulate(*schedule, *model, SimOptions{false});
    if (!sim.ok()) return sim.status();
    double total = 0;
    for (const RankResult& rank : sim->ranks) total += rank.busy_ms;
    return total;
  };
  const Expected<double> alone = busy(std::vector<double>(fitted.size() + 1, 1.0));
  if (!alone.ok()) return alone.status();
  if (!(*alone > 0)) return Status::Invalid("the probe's plan prices no compute");
  // The priced average grows with q (more slowly: part of the run is priced at lower counts).
  const auto average = [&](double q) -> Expected<double> {
    std::vector<double> factors = fitted;
    factors.push_back(q);
    Expected<double> priced = busy(factors);
    if (!priced.ok()) return priced.status();
    return *priced / *alone;
  };
  double lo = 1.0, hi = 16;
  for (int i = 0; i < 50; ++i) {
    const double mid = std::sqrt(lo * hi);
    Expected<double> priced = average(mid);
    if (!priced.ok()) return priced.status();
    (*priced < ratio ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

}  // namespace gpipe
