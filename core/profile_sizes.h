// A profile measured at several micro-batch sizes (`gpipe-plan profile --microbatch-size 4,8,16`
// keeps every size under "measurements") answers for any size: the numbers measured at that size;
// between two measured sizes, each layer's times and byte counts interpolated linearly; outside
// them, extrapolated linearly from the nearest two, and said so. A profile with one size scales
// linearly from it (what the simulator did before profiles had several sizes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/profile.h"

namespace gpipe {

/// The micro-batch sizes measured, ascending (the profile's own size when it has no measurements).
std::vector<int64_t> MeasuredMicrobatchSizes(const Profile& profile);

/// The profile for micro-batches of `microbatch_size` samples (its microbatch_size is that size),
/// its step_costs' co-located figures included (StepCosts::AtMicrobatch).
/// `note`, when given, receives one line saying how it was obtained ("" when measured at that size).
Profile ProfileAtMicrobatch(const Profile& profile, int64_t microbatch_size, std::string* note = nullptr);

}  // namespace gpipe
