#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpipe {
namespace {

/// Writes `pieces` one after another to a new file `tmp` and flushes it to the disk; on failure
/// the message names the system's reason (ENOSPC: "No space left on device") and `tmp` is removed.
Status WriteAndSync(const std::string& path, const std::string& tmp, const std::vector<std::string_view>& pieces) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::Invalid(path + ": cannot write " + tmp + ": " + std::strerror(errno) +
                           " (does the directory exist and is it writable?)");
  }
  size_t total = 0, written = 0;
  for (std::string_view piece : pieces) total += piece.size();
  int error = 0;
  for (std::string_view piece : pieces) {
    const char* data = piece.data();
    size_t left = piece.size();
    while (left > 0 && error == 0) {
      const ssize_t wrote = ::write(fd, data, left);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) {
        error = wrote < 0 ? errno : ENOSPC;
      } else {
        data += wrote;
        left -= static_cast<size_t>(wrote);
        written += static_cast<size_t>(wrote);
      }
    }
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0) return Status::Ok();
  ::unlink(tmp.c_str());
  return Status::Invalid(path + ": write error on " + tmp + " after " + std::to_string(written) + " of " +
                         std::to_string(total) + " bytes: " + std::strerror(error) + " (is the disk full?); " + path +
                         " is as it was");
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  return WriteFileAtomically(path, std::vector<std::string_view>{contents});
}

Status WriteFileAtomically(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = path + ".tmp";
  GPIPE_RETURN_IF_ERROR(WriteAndSync(path, tmp, pieces));
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return Status::Invalid(path + ": cannot rename " + tmp + " over it: " + error.message());
  }
  return Status::Ok();
}

Expected<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  // A file that is not a regular one (a device, a pipe) is read up to this size: a path such as
  // /dev/zero must end in an error, not fill the memory.
  constexpr size_t kMaxStreamBytes = size_t{256} << 20;
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status)) return Status::Invalid(path + ": is a directory; give the path of " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Invalid(path + ": cannot open the file (does it exist and is it readable?)");
  std::string text;
  if (std::filesystem::is_regular_file(status)) {
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = std::move(buffer).str();
  } else {
    std::vector<char> chunk(size_t{1} << 16);
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      text.append(chunk.data(), static_cast<size_t>(in.gcount()));
      if (text.size() > kMaxStreamBytes) {
        return Status::Invalid(path + ": more than 256 MiB and not a regular file; give the path of " + what);
      }
    }
  }
  if (in.bad()) return Status::Invalid(path + ": read error");
  return text;
}

}  // namespace gpipe
