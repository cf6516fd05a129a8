// A user's training data on disk, memory-mapped (never read whole), without LibTorch:
//   a flat token file (nanoGPT's train.bin: uint16 or uint32 token ids, little-endian, no header);
//   Megatron-LM's MMap indexed dataset, PREFIX.bin with PREFIX.idx beside it (as its
//     indexed_dataset.py writes them: the documents' tokens one after another in .bin; .idx a
//     header "MMIDIDX\0\0", version 1, the dtype's code, the sequence and document counts, then
//     the sequences' lengths and byte offsets and the document index);
//   a NumPy .npy array (format 1.0-3.0, C order): uint8 images [N, H, W, C] and int64 labels [N].
// Errors name the file and what is wrong: a truncated file, a header that is not one, a dtype that
// does not fit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpipe {

/// A read-only mapping of a whole file.
class MappedFile {
 public:
  static Expected<std::shared_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const unsigned char* data_ = nullptr;
  int64_t size_ = 0;
};

/// Token ids in a mapped file: `count` of them from `offset`, each `item_size` bytes, unsigned
/// unless is_signed.
struct TokenFile {
  std::shared_ptr<MappedFile> file;
  int64_t offset = 0;
  int64_t count = 0;
  int item_size = 2;
  bool is_signed = false;
  /// What the file was read as, for errors: "uint16", "int32", ...
  std::string dtype;

  /// Token `i` (0 <= i < count).
  int64_t At(int64_t i) const;
};

/// A flat token file of `dtype` ("uint16" or "uint32"). Errors: a size that is not a whole number
/// of tokens (truncated, or another dtype), an empty file.
Expected<TokenFile> OpenTokenFile(const std::string& path, const std::string& dtype);

/// Megatron-LM's indexed dataset at `prefix` (PREFIX.bin and PREFIX.idx). The documents' tokens
/// are one stream, as Megatron's GPT dataset samples them.
Expected<TokenFile> OpenMegatronDataset(const std::string& prefix);

/// A .npy array, mapped.
struct NpyArray {
  std::shared_ptr<MappedFile> file;
  /// NumPy's type string: "|u1" (uint8), "<i8" (little-endian int64), ...
  std::string descr;
  std::vector<int64_t> shape;
  /// Where the data starts in the file.
  int64_t data_offset = 0;

  int64_t elements() const;
};

/// Reads and checks a .npy file's header: C order, and data that fills the shape.
Expected<NpyArray> OpenNpy(const std::string& path);

/// Writes a .npy file (for tests and small tools): C order, `descr` of `item_size` bytes.
Status WriteNpy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                const void* data, int64_t bytes);

}  // namespace gpipe
