// A Timeline drawn as an SVG Gantt chart to look at: one lane per rank with its compute actions
// colored by op (the recomputed forward of a remat backward hatched), idle time left blank so the
// bubbles show, a thin lane under each rank for the messages it sends, a memory sparkline per rank
// at the right, a time axis in ms, a title and a legend. Every bar has a tooltip. The output is
// deterministic: numbers are printed with fixed formats.
#pragma once

#include <string>

#include "core/status.h"
#include "simulator/trace.h"

namespace gpipe {

/// The picture of `t` as a standalone SVG document (about 1200 px wide, height by rank count).
std::string TimelineToSvg(const Timeline& t);

/// Writes TimelineToSvg(t) to `path` atomically; errors name the path.
Status WriteSvg(const std::string& path, const Timeline& t);

}  // namespace gpipe
