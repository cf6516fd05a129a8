#include "core/data_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "core/files.h"

namespace gpipe {
namespace {

uint64_t ReadLittle(const unsigned char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// Megatron's DType codes (indexed_dataset.py) that hold token ids.
struct MegatronDtype {
  int code;
  const char* name;
  int item_size;
  bool is_signed;
};
constexpr MegatronDtype kMegatronDtypes[] = {
    {1, "uint8", 1, false}, {2, "int8", 1, true}, {3, "int16", 2, true}, {4, "int32", 4, true},
    {5, "int64", 8, true},  {8, "uint16", 2, false}};

std::string Plural(int64_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

Expected<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Invalid(path + ": cannot open it: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status::Invalid(path + ": is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<int64_t>(info.st_size);
  if (file->size_ > 0) {
    void* data = ::mmap(nullptr, static_cast<size_t>(file->size_), PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      return Status::Invalid(path + ": cannot map it: " + std::strerror(error));
    }
    file->data_ = static_cast<const unsigned char*>(data);
  }
  ::close(fd);  // the mapping stays valid
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), static_cast<size_t>(size_));
}

int64_t TokenFile::At(int64_t i) const {
  const unsigned char* p = file->data() + offset + i * item_size;
  const uint64_t raw = ReadLittle(p, item_size);
  if (!is_signed || item_size == 8) return static_cast<int64_t>(raw);
  const uint64_t sign = uint64_t{1} << (8 * item_size - 1);
  return static_cast<int64_t>(raw ^ sign) - static_cast<int64_t>(sign);
}

Expected<TokenFile> OpenTokenFile(const std::string& path, const std::string& dtype) {
  TokenFile tokens;
  if (dtype == "uint16" || dtype == "uint32") {
    tokens.item_size = dtype == "uint16" ? 2 : 4;
  } else {
    return Status::Invalid(path + ": dtype \"" + dtype + "\" is not a token file's; give \"uint16\" or \"uint32\"");
  }
  tokens.dtype = dtype;
  Expected<std::shared_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  tokens.file = *file;
  const int64_t size = tokens.file->size();
  if (size == 0) return Status::Invalid(path + ": is empty; give a file of " + dtype + " token ids");
  if (size % tokens.item_size != 0) {
    return Status::Invalid(path + ": " + Plural(size, "byte") + " is not a whole number of " + dtype +
                           " tokens; the file is truncated at offset " + std::to_string(size - size % tokens.item_size) +
                           ", or its dtype is another");
  }
  tokens.count = size / tokens.item_size;
  return tokens;
}

Expected<TokenFile> OpenMegatronDataset(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  Expected<std::shared_ptr<MappedFile>> idx = MappedFile::Open(idx_path);
  if (!idx.ok()) return idx.status().WithContext("Megatron dataset " + prefix + " (PREFIX.idx and PREFIX.bin)");
  const unsigned char* p = (*idx)->data();
  const int64_t size = (*idx)->size();
  constexpr int64_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (size < kHeader || std::memcmp(p, "MMIDIDX\0\0", 9) != 0) {
    return Status::Invalid(idx_path + ": does not start with Megatron's index header \"MMIDIDX\\0\\0\"; is it an "
                                      "MMap indexed dataset's .idx?");
  }
  const uint64_t version = ReadLittle(p + 9, 8);
  if (version != 1) return Status::Invalid(idx_path + ": index version " + std::to_string(version) + "; only 1 is known");
  const int code = p[17];
  const MegatronDtype* dtype = nullptr;
  for (const MegatronDtype& d : kMegatronDtypes) {
    if (d.code == code) dtype = &d;
  }
  if (dtype == nullptr) {
    return Status::Invalid(idx_path + ": dtype code " + std::to_string(code) + " is not one of token ids (1-5, 8: uint8, "
                                      "int8, int16, int32, int64, uint16)");
  }
  const uint64_t sequences = ReadLittle(p + 18, 8), documents = ReadLittle(p + 26, 8);
  const uint64_t needed = static_cast<uint64_t>(kHeader) + sequences * 4 + sequences * 8 + documents * 8;
  if (sequences > (uint64_t{1} << 40) || documents > (uint64_t{1} << 40) || needed > static_cast<uint64_t>(size)) {
    return Status::Invalid(idx_path + ": " + std::to_string(size) + " bytes, where " + std::to_string(sequences) +
                           " sequences and " + std::to_string(documents) + " documents need " + std::to_string(needed) +
                           "; the index is truncated");
  }
  int64_t tokens_total = 0;
  for (uint64_t i = 0; i < sequences; ++i) tokens_total += static_cast<int64_t>(ReadLittle(p + kHeader + 4 * i, 4));
  Expected<std::shared_ptr<MappedFile>> bin = MappedFile::Open(bin_path);
  if (!bin.ok()) return bin.status().WithContext("Megatron dataset " + prefix);
  if ((*bin)->size() != tokens_total * dtype->item_size) {
    return Status::Invalid(bin_path + ": " + Plural((*bin)->size(), "byte") + ", where its index " + idx_path + " lists " +
                           Plural(tokens_total, "token") + " of " + dtype->name + " (" +
                           std::to_string(tokens_total * dtype->item_size) + " bytes); the data is truncated or not "
                           "this index's");
  }
  TokenFile tokens;
  tokens.file = *bin;
  tokens.count = tokens_total;
  tokens.item_size = dtype->item_size;
  tokens.is_signed = dtype->is_signed;
  tokens.dtype = dtype->name;
  return tokens;
}

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expected<NpyArray> OpenNpy(const std::string& path) {
  Expected<std::shared_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const unsigned char* p = (*file)->data();
  const int64_t size = (*file)->size();
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) {
    return Status::Invalid(path + ": does not start with NumPy's \"\\x93NUMPY\"; save the array with numpy.save");
  }
  const int major = p[6];
  const int length_bytes = major == 1 ? 2 : 4;
  const int64_t header_length = static_cast<int64_t>(ReadLittle(p + 8, length_bytes));
  const int64_t data_offset = 8 + length_bytes + header_length;
  if (major < 1 || major > 3 || data_offset > size) {
    return Status::Invalid(path + ": a .npy header of version " + std::to_string(major) + " and " +
                           std::to_string(header_length) + " bytes does not fit a file of " + std::to_string(size));
  }
  const std::string header(reinterpret_cast<const char*>(p + 8 + length_bytes), static_cast<size_t>(header_length));
  NpyArray array;
  array.file = *file;
  array.data_offset = data_offset;
  // The header is a Python dict literal: {'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }
  const auto value_of = [&header](const std::string& key) -> std::optional<std::string> {
    const size_t at = header.find("'" + key + "':");
    if (at == std::string::npos) return std::nullopt;
    size_t begin = header.find_first_not_of(' ', at + key.size() + 3);
    if (begin == std::string::npos) return std::nullopt;
    const char open = header[begin];
    const char close = open == '\'' ? '\'' : open == '(' ? ')' : ',';
    if (open == '\'' || open == '(') ++begin;
    const size_t end = header.find(close, begin);
    if (end == std::string::npos) return std::nullopt;
    return header.substr(begin, end - begin);
  };
  const std::optional<std::string> descr = value_of("descr"), order = value_of("fortran_order"), shape = value_of("shape");
  if (!descr || !order || !shape) {
    return Status::Invalid(path + ": its header lacks 'descr', 'fortran_order' or 'shape': " + header);
  }
  array.descr = *descr;
  if (*order != "False") {
    return Status::Invalid(path + ": is in Fortran order; save it with numpy.save(path, numpy.ascontiguousarray(a))");
  }
  const std::string dims = *shape;
  int64_t dim = -1;
  for (const char c : dims + ",") {
    if (c >= '0' && c <= '9') {
      dim = std::min<int64_t>((dim < 0 ? 0 : dim) * 10 + (c - '0'), int64_t{1} << 40);
    } else if (c == ',' && dim >= 0) {
      array.shape.push_back(dim);
      dim = -1;
    } else if (c != ' ' && c != ',') {
      return Status::Invalid(path + ": its shape (" + dims + ") is not a tuple of sizes");
    }
  }
  const bool sized = array.descr.size() >= 3 && array.descr.find_first_not_of("0123456789", 2) == std::string::npos;
  const int64_t item = sized ? std::stoll(array.descr.substr(2)) : 0;
  const int64_t bytes = array.elements() * item;
  if (item <= 0 || data_offset + bytes > size) {
    return Status::Invalid(path + ": holds " + std::to_string(size - data_offset) + " bytes of data where its shape (" +
                           dims + ") of " + array.descr + " needs " + std::to_string(bytes) +
                           "; the file is truncated");
  }
  return array;
}

Status WriteNpy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
                int64_t bytes) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string prefix = "\x93NUMPY";
  prefix += '\x01';
  prefix += '\x00';
  prefix += static_cast<char>(header.size() & 0xff);
  prefix += static_cast<char>((header.size() >> 8) & 0xff);
  return WriteFileAtomically(path, {prefix, header, std::string_view(static_cast<const char*>(data), static_cast<size_t>(bytes))});
}

}  // namespace gpipe
