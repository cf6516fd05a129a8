// The safetensors format (core/safetensors.h): what we write reads back byte for byte, the header
// is 8-byte aligned and sorted as the format's writers sort it, and a damaged file is one error
// naming the file and the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"

namespace gpipe {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("gpipe-safetensors-" + name)).string();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(SafetensorsTest, WrittenTensorsReadBack) {
  const std::vector<float> weight = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -8.5f};
  const std::vector<int64_t> count = {42};
  const std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"b.weight", "F32", {2, 3}, reinterpret_cast<const char*>(weight.data()), 24},
                                {"a.count", "I64", {}, reinterpret_cast<const char*>(count.data()), 8}},
                               {{"format", "pt"}})
                  .ok());
  const std::string bytes = Slurp(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header + 32);
  EXPECT_LT(bytes.find("a.count"), bytes.find("b.weight"));  // sorted by name
  Expected<SafetensorsFile> file = OpenSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->metadata.at("format"), "pt");
  const SafetensorsTensor* w = file->Find("b.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  Expected<std::vector<char>> data = file->Read(*w);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(std::memcmp(data->data(), weight.data(), 24), 0);
  EXPECT_EQ(file->Find("a.count")->shape.size(), 0u);
  EXPECT_EQ(file->Find("missing"), nullptr);
  std::filesystem::remove(path);
}

TEST(SafetensorsTest, DamagedFilesAreOneLineNamingWhatIsWrong) {
  const std::vector<float> weight(4, 1.0f);
  const std::string good = TempPath("good.safetensors");
  ASSERT_TRUE(WriteSafetensors(good, {{"w", "F32", {4}, reinterpret_cast<const char*>(weight.data()), 16}}, {}).ok());
  const std::string bytes = Slurp(good);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const std::string head = bytes.substr(8, header);
  const auto with_header = [](std::string json, const std::string& data) {
    json.append((8 - json.size() % 8) % 8, ' ');
    std::string length(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(length.data(), &n, 8);
    return length + json + data;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {bytes.substr(0, bytes.size() - 4), "tensor \"w\": its bytes end at offset"},
      {bytes.substr(0, 5), "too short for a safetensors file"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + head, "it is truncated or not a safetensors file"},
      {with_header(R"({"w":{"dtype":"F33","shape":[4],"data_offsets":[0,16]}})", std::string(16, 'x')),
       "tensor \"w\": unknown dtype \"F33\""},
      {with_header(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", std::string(16, 'x')),
       "tensor \"w\": data_offsets [0, 16] hold 16 bytes where F32 of shape [5] needs 20"},
      {with_header(R"({"w":{"dtype":"F32","shape":[4]}})", std::string(16, 'x')), "data_offsets"},
      {with_header(R"([1,2])", ""), "the header is [1,2], not a JSON object"},
      {with_header(R"({"w":)", ""), "header"},
  };
  const std::string bad = TempPath("bad.safetensors");
  for (const auto& [contents, expected] : cases) {
    Spit(bad, contents);
    Expected<SafetensorsFile> file = OpenSafetensors(bad);
    ASSERT_FALSE(file.ok()) << expected;
    EXPECT_NE(file.status().message().find(bad), std::string::npos) << file.status().message();
    EXPECT_NE(file.status().message().find(expected), std::string::npos) << file.status().message();
    EXPECT_EQ(file.status().message().find('\n'), std::string::npos) << file.status().message();
  }
  EXPECT_NE(OpenSafetensors(TempPath("absent.safetensors")).status().message().find("give a .safetensors file"),
            std::string::npos);
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace gpipe
