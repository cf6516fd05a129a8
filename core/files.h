// Writing files so that a reader never sees half of one: write a sibling "<path>.tmp", then rename
// it over the target (atomic on POSIX file systems). On failure the target is left as it was.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpipe {

/// Replaces the file at `path` with `contents`; the error names the path and the likely cause.
Status WriteFileAtomically(const std::string& path, const std::string& contents);
/// The same for a file made of `pieces` written one after another (no copy of them is made).
Status WriteFileAtomically(const std::string& path, const std::vector<std::string_view>& pieces);

/// The whole file at `path` (a regular file, or a stream such as /dev/stdin up to 256 MiB); errors
/// name the path and say what to give instead ("give the path of `what`", e.g. "a JSON file").
Expected<std::string> ReadTextFile(const std::string& path, const std::string& what);

}  // namespace gpipe
