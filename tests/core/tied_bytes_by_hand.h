// The parameter bytes of a set of layers with tied parameters, counted by hand for the tests
// (independent of core/profile.h's ParamBytesOfLayers): each layer's own bytes (param_bytes less
// its tied parameters), plus each tied parameter once when any of its layers is held.
#pragma once

#include <cstdint>
#include <set>

#include "core/profile.h"

namespace gpipe {

inline int64_t TiedBytesByHand(const Profile& profile, const std::set<int>& held) {
  int64_t bytes = 0;
  for (int l : held) {
    bytes += profile.layers[static_cast<size_t>(l)].param_bytes;
    for (const TiedParameter& tie : profile.tied_parameters) {
      for (int t : tie.layers) bytes -= t == l ? tie.bytes : 0;
    }
  }
  for (const TiedParameter& tie : profile.tied_parameters) {
    bool any = false;
    for (int t : tie.layers) any = any || held.count(t) > 0;
    if (any) bytes += tie.bytes;
  }
  return bytes;
}

}  // namespace gpipe
