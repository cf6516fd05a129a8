#include "cli/pictures.h"

#include "simulator/svg.h"

namespace gpipe::cli {

void PictureFlags::Add(CLI::App& app, const std::string& what) {
  app.add_option("--trace", trace_path, "Write " + what + " as a Chrome trace-event file (open it in Perfetto)");
  app.add_option("--svg", svg_path, "Draw " + what + " as an SVG picture");
}

Status PictureFlags::Write(const Timeline& timeline) const {
  if (!trace_path.empty()) GPIPE_RETURN_IF_ERROR(WriteChromeTrace(trace_path, timeline));
  if (!svg_path.empty()) GPIPE_RETURN_IF_ERROR(WriteSvg(svg_path, timeline));
  return Status::Ok();
}

}  // namespace gpipe::cli
