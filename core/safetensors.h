// The safetensors file format (Hugging Face's): an 8-byte little-endian header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the tensors' bytes, offsets counted from the end of the
// header. What `run --save-weights` writes and `run --init-weights` reads; no LibTorch here, so
// the format is checked in the core build.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpipe {

struct SafetensorsTensor {
  std::string name;
  /// "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8" or "BOOL".
  std::string dtype;
  std::vector<int64_t> shape;
  /// Byte offsets of the data from the start of the data section (after the header).
  int64_t begin = 0, end = 0;
};

/// Bytes per element of a safetensors dtype; 0 when the dtype is not one of those above.
int64_t SafetensorsItemSize(const std::string& dtype);

/// A safetensors file's header, checked against the file: every tensor's bytes lie inside the
/// data section and match its dtype and shape.
struct SafetensorsFile {
  std::string path;
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
  /// The file offset where the data section begins (8 + header length).
  int64_t data_start = 0;
  int64_t file_size = 0;

  const SafetensorsTensor* Find(const std::string& name) const;
  /// The tensor's bytes, read from the file (only that tensor: the file is never loaded whole).
  Expected<std::vector<char>> Read(const SafetensorsTensor& tensor) const;
};

/// Reads and checks the header of `path`. Errors name the file and what is wrong (a truncated
/// file, a header that is not JSON, a tensor whose bytes run past the end).
Expected<SafetensorsFile> OpenSafetensors(const std::string& path);

/// One tensor to write: its name, dtype, shape and bytes (size = elements x item size).
struct SafetensorsBlob {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const char* data = nullptr;
  int64_t bytes = 0;
};

/// Writes `tensors` (in name order, as the format's writers do) with `metadata` to `path`: to a
/// temporary name first, renamed once complete, so a failed write leaves no half file.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsBlob>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace gpipe
