// Units: parsing byte sizes people type ("80GiB", "80GB", "512MiB", "1e9") and printing bytes and
// times readably. Binary suffixes (KiB, MiB, GiB, TiB) are powers of 1024; decimal ones (KB, MB,
// GB, TB) powers of 1000. A bare number is bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpipe {

/// Parses a byte size; the error names the text and the accepted suffixes.
Expected<int64_t> ParseBytes(std::string_view text);

/// "1.50 GiB", "512.0 MiB", "12 B".
std::string FormatBytes(double bytes);
/// A device's memory as its card is sold and in the binary unit every other figure uses: "80 GB =
/// 74.51 GiB" when the size is a whole number of decimal GB (or MB, TB) and not of GiB, else as
/// FormatBytes ("8.00 GiB").
std::string FormatMemoryLimit(double bytes);
/// "1.234 ms", "12.35 s".
std::string FormatMs(double ms);

}  // namespace gpipe
