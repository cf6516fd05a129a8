#include "core/files.h"

#include <filesystem>
#include <fstream>

namespace gpipe {

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return Status::Invalid(path + ": cannot write " + tmp +
                             " (does the directory exist and is it writable?)");
    }
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return Status::Invalid(path + ": write error on " + tmp + " (is the disk full?)");
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return Status::Invalid(path + ": cannot rename " + tmp + " over it: " + error.message());
  }
  return Status::Ok();
}

}  // namespace gpipe
