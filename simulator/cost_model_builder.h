// BuildCostModel in two parts, for pricing many partitions of one configuration (the planner's
// leaves: a thousand ranks' links and rings, and a profile copied to the plan's micro-batch size,
// cost more than simulating the step). What does not depend on where the stages cut is derived
// once: the profile at the plan's t and micro-batch size, the calibration and core sharing, the
// notes, the links between ranks and each rank's ring over the replicas. Then each partition's
// stages, its ranks' tied parameters held once, all-reduces and optimizer tails are filled in.
// Base() + FillStages(plan) is exactly BuildCostModel(plan), which is built this way.
#pragma once

#include <memory>

#include "core/plan.h"
#include "core/status.h"
#include "simulator/cost_model.h"

namespace gpipe {

class CostModelBuilder {
 public:
  /// REQUIRES as BuildCostModel, but only `plan`'s stages' ranks are read (its rank count). Where
  /// the plan's profile needs no change (its t and micro-batch size are the plan's), the builder
  /// reads it in place: `plan` must outlive the builder.
  static Expected<CostModelBuilder> Of(const Plan& plan);

  /// The cost model without stages, all-reduces, tails or shared bytes.
  const CostModel& Base() const;
  /// Writes `plan`'s stages, shared static bytes, optimizer tails and all-reduces into `model`
  /// (from Base(); those four vectors are overwritten, their storage reused). REQUIRES: `plan`
  /// differs from the one given to Of in its stages at most, on as many ranks. Fails as
  /// BuildCostModel does when a split schedule meets a layer without backward_weight_ms.
  Status FillStages(const Plan& plan, CostModel* model) const;

 private:
  struct Parts;
  explicit CostModelBuilder(std::shared_ptr<const Parts> parts) : parts_(std::move(parts)) {}
  std::shared_ptr<const Parts> parts_;
};

}  // namespace gpipe
