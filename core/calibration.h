// What runs cost beyond the profile's layer times and the cluster's links, as `gpipe-plan
// calibrate` fits it from run records: the slowdown of compute when several ranks share a node,
// a fixed cost per compute action and per send, and what each rank does after its last action
// (the optimizer step, the step's bookkeeping). Stored in a cluster file under "calibration";
// absent, every term is neutral (scale 1, costs 0).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpipe {

struct Calibration {
  /// Compute times are multiplied by compute_scale[n - 1] when n ranks of the plan share a node;
  /// past the end, by the last entry. Empty: 1.
  std::vector<double> compute_scale;
  /// Added to every forward action, and to every backward action (B, I and W each), with n ranks
  /// of the plan on a node: entry n - 1 (past the end, the last entry; empty: 0).
  std::vector<double> forward_overhead_ms;
  std::vector<double> backward_overhead_ms;
  /// A send occupies its rank this long before its message goes on the link.
  double send_overhead_ms = 0;
  /// Per byte on top of send_overhead_ms, when measured (profile-links); 0: no per-byte term.
  double send_issue_bytes_per_s = 0;
  /// After its last action (and all-reduce) each rank spends step_overhead_ms plus
  /// optimizer_ms_per_gib for each GiB of its parameters before the step ends.
  double step_overhead_ms = 0;
  double optimizer_ms_per_gib = 0;
  /// Sent tensors stay allocated until the step ends (true of the executor on Gloo, whose sends
  /// report completion only when waited on): the memory model counts them.
  bool sends_held = false;
  /// Where the numbers come from (run records, fit residuals), in words.
  std::string source;

  double ComputeScale(int ranks_per_node) const;
  double ForwardOverheadMs(int ranks_per_node) const;
  double BackwardOverheadMs(int ranks_per_node) const;
  /// After the last action, for a rank holding `param_bytes` of parameters.
  double TailMs(double param_bytes) const;
};

Expected<Calibration> CalibrationFromJson(const nlohmann::json& json, const std::string& where);
nlohmann::json CalibrationToJson(const Calibration& calibration);

}  // namespace gpipe
