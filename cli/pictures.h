// The pictures several subcommands draw: the --trace and --svg flags and writing a timeline to
// them.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "simulator/trace.h"

namespace gpipe::cli {

struct PictureFlags {
  std::string trace_path;
  std::string svg_path;

  /// Adds --trace FILE and --svg FILE to `app`.
  void Add(CLI::App& app, const std::string& what);
  bool any() const { return !trace_path.empty() || !svg_path.empty(); }
  /// Writes the Chrome trace and the SVG that were asked for; errors name the file.
  Status Write(const Timeline& timeline) const;
};

}  // namespace gpipe::cli
