// What a training step costs beyond its layers' forward and backward, as `gpipe-plan profile`
// measures it on the device: the optimizer step per GiB of parameters for each optimizer, the
// fixed cost of a step (zeroing gradients, slicing the batch), and how much slower compute runs
// while n ranks compute at once on one node. Stored in a profile under "step_costs"
// (docs/formats.md). The simulator and planner use it as the calibration when the cluster file
// has none fitted from runs (simulator/cost_model.h, EffectiveCalibration).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/calibration.h"
#include "core/status.h"

namespace gpipe {

/// A measured number: the median of its samples and half their interquartile range.
struct Measured {
  double median = 0;
  double spread = 0;
};

/// The pipeline probe's figures at one micro-batch size (compare/pipeline_probe.h): entry n - 1 of
/// each is n ranks on the node. Ranks sharing a node slow each other most where their actions are
/// shortest: the tiny GPT's two-rank pipeline measured 1.19x one rank at 1 sample per micro-batch,
/// 1.09-1.14x at 2 and 0.99-1.00x at 8 (bench/RESULTS.md), so one size does not answer for all.
struct ColocatedAtSize {
  int64_t microbatch_size = 0;
  std::vector<Measured> compute_scale;
  std::vector<Measured> action_gap_ms;
  std::vector<Measured> send_ms;
};

struct StepCosts {
  /// Per optimizer name ("sgd", "momentum", "adam"): milliseconds of one optimizer step per GiB
  /// of parameters, measured over the whole model's parameters.
  std::map<std::string, Measured> optimizer_ms_per_gib;
  /// Paid once per step by every rank: zeroing gradients and taking its share of the batch.
  Measured step_overhead_ms;
  /// What the executor adds to every forward and every backward action (B, I and W each) beyond
  /// its layers' compute.
  Measured forward_overhead_ms;
  Measured backward_overhead_ms;
  /// Entry n - 1: the executor's forward and backward times when n ranks of a pipeline share the
  /// node, over the profile's layer times (compare/pipeline_probe.h; entry 0: the whole model run
  /// as one graph over its layers run one by one, executor::OneGraphScale). For n up to
  /// concurrent_ranks, the factor while all n compute at once, as the simulator's core sharing
  /// applies it (compare/core_sharing_fit.h); past it, the run's average.
  std::vector<Measured> compute_scale;
  /// Entry n - 1: the time the executor loses between actions, per forward or backward action,
  /// when n ranks of a pipeline share the node (the same probe; receives posted, sends reaped,
  /// the wire's threads). Added to each forward and backward action's overhead.
  std::vector<Measured> action_gap_ms;
  /// Entry n - 1: how long a send occupies its rank, on average, in the same n-rank pipeline run:
  /// on a CPU the wire's threads compete with the ranks' compute for the cores, and a send now and
  /// then stalls for milliseconds. 0 where the run had no sends (one stage). Plans with n ranks per
  /// node use it in place of the cluster's send_overhead_ms.
  std::vector<Measured> send_ms;
  /// How many ranks the profiled node computes at full speed at once: its hardware threads over
  /// the profile's intra-op threads per rank (CPU). Past that, ranks computing at the same moment
  /// share the node's cores (the simulator's core sharing, simulator/cost_model.h). 0: not
  /// measured (a GPU, or an older profile), and every count has its one factor.
  int concurrent_ranks = 0;
  /// The probe at every micro-batch size it ran, ascending. compute_scale, action_gap_ms and send_ms
  /// above are its figures at the profile's own size; AtMicrobatch answers for any size. Empty in
  /// profiles made before the probe ran per size (their one size answers for all).
  std::vector<ColocatedAtSize> by_microbatch_size;
  /// The executor's sends stay allocated until the step ends (Gloo on the CPU): memory counts them.
  bool sends_held = false;
  /// How it was measured, in words.
  std::string source;

  /// The calibration these measurements stand for, for the plan's optimizer ("adam-mixed" runs as
  /// "adam"); an optimizer that was not measured gets no optimizer term.
  Calibration AsCalibration(const std::string& optimizer) const;

  /// These costs for micro-batches of `microbatch_size` samples: compute_scale, action_gap_ms and
  /// send_ms from by_microbatch_size, the entry at that size; between two probed sizes, each figure
  /// interpolated linearly in the logarithm of the size (the slowdown fell about as much from 1 to
  /// 2 samples as from 2 to 8); outside them, the nearest size's. `note`, when given, receives how
  /// ("" when probed at that size or when nothing was probed per size).
  StepCosts AtMicrobatch(int64_t microbatch_size, std::string* note = nullptr) const;
};

Expected<StepCosts> StepCostsFromJson(const nlohmann::json& json, const std::string& where);
nlohmann::json StepCostsToJson(const StepCosts& costs);

}  // namespace gpipe
