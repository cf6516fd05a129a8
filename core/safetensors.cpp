#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/json_reader.h"

namespace gpipe {
namespace {

// A header longer than this is not a safetensors file (the format's own readers stop at 100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

}  // namespace

int64_t SafetensorsItemSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

Expected<std::vector<char>> SafetensorsFile::Read(const SafetensorsTensor& tensor) const {
  std::vector<char> bytes(static_cast<size_t>(tensor.end - tensor.begin));
  std::ifstream in(path, std::ios::binary);
  in.seekg(data_start + tensor.begin);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) {
    return Status::Invalid(path + ": could not read tensor \"" + tensor.name + "\" (bytes " +
                           std::to_string(data_start + tensor.begin) + " to " + std::to_string(data_start + tensor.end) +
                           "); was the file changed while it was read?");
  }
  return bytes;
}

Expected<SafetensorsFile> OpenSafetensors(const std::string& path) {
  SafetensorsFile file;
  file.path = path;
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return Status::Invalid(path + ": cannot read it: " + error.message() + "; give a .safetensors file");
  file.file_size = static_cast<int64_t>(size);
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8)) {
    return Status::Invalid(path + ": " + std::to_string(size) + " bytes, too short for a safetensors file (an 8-byte "
                           "header length, then the header)");
  }
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | length_bytes[i];
  if (header_length > kMaxHeader || header_length > size - 8) {
    return Status::Invalid(path + ": its first 8 bytes give a header of " + std::to_string(header_length) +
                           " bytes, in a file of " + std::to_string(size) + "; it is truncated or not a safetensors file");
  }
  std::string header(header_length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_length));
  Expected<nlohmann::json> json = ParseJson(header, path + ": header");
  if (!json.ok()) return json.status();
  if (!json->is_object()) return Status::Invalid(path + ": the header is " + Describe(*json) + ", not a JSON object");
  file.data_start = static_cast<int64_t>(8 + header_length);
  const int64_t data_size = file.file_size - file.data_start;
  for (const auto& [name, value] : json->items()) {
    const std::string where = path + ": tensor \"" + name + "\"";
    if (name == "__metadata__") {
      if (!value.is_object()) return Status::Invalid(path + ": __metadata__ is " + Describe(value) + ", not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) return Status::Invalid(path + ": __metadata__." + key + " is not a string");
        file.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    ObjectReader r(value, where);
    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.dtype = r.String("dtype");
    const nlohmann::json* shape = r.Array("shape");
    const nlohmann::json* offsets = r.Array("data_offsets");
    if (!r.status().ok()) return r.status();
    const int64_t item = SafetensorsItemSize(tensor.dtype);
    if (item == 0) return Status::Invalid(where + ": unknown dtype \"" + tensor.dtype + "\"");
    int64_t elements = 1;
    for (const nlohmann::json& d : *shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
        return Status::Invalid(where + ": shape " + Describe(*shape) + " is not a list of sizes");
      }
      tensor.shape.push_back(d.get<int64_t>());
      elements = tensor.shape.back() == 0 ? 0 : std::min<int64_t>(elements * tensor.shape.back(), int64_t{1} << 50);
    }
    if (offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return Status::Invalid(where + ": data_offsets " + Describe(*offsets) + " is not [begin, end]");
    }
    tensor.begin = static_cast<int64_t>(std::min<uint64_t>((*offsets)[0].get<uint64_t>(), uint64_t{1} << 62));
    tensor.end = static_cast<int64_t>(std::min<uint64_t>((*offsets)[1].get<uint64_t>(), uint64_t{1} << 62));
    if (tensor.end < tensor.begin || tensor.end - tensor.begin != elements * item) {
      return Status::Invalid(where + ": data_offsets [" + std::to_string(tensor.begin) + ", " + std::to_string(tensor.end) +
                             "] hold " + std::to_string(tensor.end - tensor.begin) + " bytes where " + tensor.dtype +
                             " of shape " + Describe(*shape) + " needs " + std::to_string(elements * item));
    }
    if (tensor.end > data_size) {
      return Status::Invalid(where + ": its bytes end at offset " + std::to_string(file.data_start + tensor.end) +
                             ", past the end of the file (" + std::to_string(file.file_size) +
                             " bytes); the file is truncated");
    }
    file.tensors[name] = std::move(tensor);
  }
  return file;
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsBlob>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsBlob*> order;
  for (const SafetensorsBlob& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const SafetensorsBlob* a, const SafetensorsBlob* b) { return a->name < b->name; });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const SafetensorsBlob* t : order) {
    if (header.contains(t->name)) return Status::Invalid(path + ": two tensors are named \"" + t->name + "\"");
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes}}};
    offset += t->bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const std::string length = LittleEndian64(text.size());
  std::vector<std::string_view> pieces = {length, text};
  for (const SafetensorsBlob* t : order) pieces.emplace_back(t->data, static_cast<size_t>(t->bytes));
  return WriteFileAtomically(path, pieces);
}

}  // namespace gpipe
