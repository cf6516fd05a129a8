// Writing files so that a reader never sees half of one: write a sibling "<path>.tmp", then rename
// it over the target (atomic on POSIX file systems). On failure the target is left as it was.
#pragma once

#include <string>

#include "core/status.h"

namespace gpipe {

/// Replaces the file at `path` with `contents`; the error names the path and the likely cause.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace gpipe
