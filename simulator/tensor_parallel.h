// Tensor parallelism as the simulator prices it: a plan with t > 1 runs each rank on t devices of
// one node, every layer split Megatron-style. What one of those devices computes, holds and sends
// is the profile's tensor_parallel_measurements entry for t (core/profile.h), and the layer's
// collectives over the t devices (all-reduces, or all-gathers and reduce-scatters with sequence
// parallelism) are priced on the node's links as a ring over the group and added to the forward
// (and so to a recompute) and to the backward's input-gradient part, which wait for them.
#pragma once

#include "core/cluster.h"
#include "core/profile.h"
#include "core/status.h"

namespace gpipe {

/// The profile as one device of a t-way group sees it: its layers, input and tied parameters
/// per device, times with the collectives on the ring over devices [0, t) of `cluster` added, and
/// tensor_parallel = t (so that applying it again changes nothing). t = 1, or a profile already at
/// t: the profile itself. A profile measured at several micro-batch sizes keeps only its own size at
/// t > 1 (the entry is measured there; other sizes scale linearly from it), and says so in its
/// `tensor_parallel_note`. Errors: CheckTensorParallel's.
Expected<Profile> ProfileAtTensorParallel(const Profile& profile, int tensor_parallel, const Cluster& cluster);

}  // namespace gpipe
