// A user's data files (core/data_files.h) and the model's "data" section for them: token files,
// Megatron's indexed dataset and .npy arrays read back what was written, and every damaged file or
// bad field is one error naming the file (and the offset or field).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/data_files.h"
#include "core/model.h"

namespace gpipe {
namespace {

namespace fs = std::filesystem;

std::string Temp(const std::string& name) { return (fs::temp_directory_path() / ("gpipe-data-" + name)).string(); }

template <typename T>
void WriteRaw(const std::string& path, const std::vector<T>& values, size_t drop_bytes = 0) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T) - drop_bytes));
}

template <typename T>
void Append(std::string& bytes, T value) {
  bytes.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Megatron's .idx as indexed_dataset.py writes it, for `lengths` sequences (one document each).
std::string MegatronIndex(int dtype_code, int item_size, const std::vector<int32_t>& lengths) {
  std::string bytes("MMIDIDX\0\0", 9);
  Append<uint64_t>(bytes, 1);
  Append<uint8_t>(bytes, static_cast<uint8_t>(dtype_code));
  Append<uint64_t>(bytes, lengths.size());
  Append<uint64_t>(bytes, lengths.size() + 1);
  for (int32_t n : lengths) Append<int32_t>(bytes, n);
  int64_t offset = 0;
  for (int32_t n : lengths) {
    Append<int64_t>(bytes, offset);
    offset += n * item_size;
  }
  for (size_t d = 0; d <= lengths.size(); ++d) Append<int64_t>(bytes, static_cast<int64_t>(d));
  return bytes;
}

TEST(TokenFileTest, ReadsUint16AndUint32Ids) {
  const std::string path = Temp("tokens.bin");
  WriteRaw<uint16_t>(path, {1, 65535, 300});
  Expected<TokenFile> t16 = OpenTokenFile(path, "uint16");
  ASSERT_TRUE(t16.ok()) << t16.status().message();
  EXPECT_EQ(t16->count, 3);
  EXPECT_EQ(t16->At(1), 65535);
  EXPECT_EQ(t16->At(2), 300);
  WriteRaw<uint32_t>(path, {70000, 5});
  Expected<TokenFile> t32 = OpenTokenFile(path, "uint32");
  ASSERT_TRUE(t32.ok());
  EXPECT_EQ(t32->At(0), 70000);
  fs::remove(path);
}

TEST(TokenFileTest, DamagedFilesNameTheFileAndTheOffset) {
  const std::string path = Temp("odd.bin");
  WriteRaw<uint32_t>(path, {1, 2, 3}, /*drop_bytes=*/2);
  EXPECT_EQ(OpenTokenFile(path, "uint32").status().message(),
            path + ": 10 bytes is not a whole number of uint32 tokens; the file is truncated at offset 8, or its dtype "
                   "is another");
  EXPECT_NE(OpenTokenFile(path, "int16").status().message().find("give \"uint16\" or \"uint32\""), std::string::npos);
  WriteRaw<uint32_t>(path, {}, 0);
  EXPECT_NE(OpenTokenFile(path, "uint16").status().message().find("is empty"), std::string::npos);
  EXPECT_NE(OpenTokenFile(Temp("absent.bin"), "uint16").status().message().find("cannot open it"), std::string::npos);
  fs::remove(path);
}

TEST(MegatronDatasetTest, ReadsTheDocumentsAsOneStream) {
  const std::string prefix = Temp("corpus_text_document");
  WriteRaw<uint16_t>(prefix + ".bin", {10, 11, 12, 20, 21});
  std::ofstream(prefix + ".idx", std::ios::binary) << MegatronIndex(8, 2, {3, 2});
  Expected<TokenFile> tokens = OpenMegatronDataset(prefix);
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  EXPECT_EQ(tokens->count, 5);
  EXPECT_EQ(tokens->dtype, "uint16");
  EXPECT_EQ(tokens->At(3), 20);
  // int32 ids, negative ones kept signed.
  WriteRaw<int32_t>(prefix + ".bin", {7, -1});
  std::ofstream(prefix + ".idx", std::ios::binary) << MegatronIndex(4, 4, {2});
  EXPECT_EQ(OpenMegatronDataset(prefix)->At(1), -1);
  // The .bin shorter than the index says.
  WriteRaw<int32_t>(prefix + ".bin", {7});
  EXPECT_NE(OpenMegatronDataset(prefix).status().message().find("lists 2 tokens of int32 (8 bytes); the data is truncated"),
            std::string::npos);
  std::ofstream(prefix + ".idx", std::ios::binary) << MegatronIndex(7, 4, {1});
  EXPECT_NE(OpenMegatronDataset(prefix).status().message().find("dtype code 7 is not one of token ids"), std::string::npos);
  std::ofstream(prefix + ".idx", std::ios::binary) << "MMIDIDX";
  EXPECT_NE(OpenMegatronDataset(prefix).status().message().find("Megatron's index header"), std::string::npos);
  const std::string index = MegatronIndex(8, 2, {3, 2});
  std::ofstream(prefix + ".idx", std::ios::binary) << index.substr(0, index.size() - 9);
  EXPECT_NE(OpenMegatronDataset(prefix).status().message().find("the index is truncated"), std::string::npos);
  fs::remove(prefix + ".bin");
  fs::remove(prefix + ".idx");
}

TEST(NpyTest, ArraysReadBackAndDamageIsNamed) {
  const std::string path = Temp("images.npy");
  const std::vector<uint8_t> pixels(2 * 3 * 4 * 1, 7);
  ASSERT_TRUE(WriteNpy(path, "|u1", {2, 3, 4, 1}, pixels.data(), 24).ok());
  Expected<NpyArray> array = OpenNpy(path);
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->descr, "|u1");
  EXPECT_EQ(array->shape, (std::vector<int64_t>{2, 3, 4, 1}));
  EXPECT_EQ(array->data_offset % 64, 0);
  EXPECT_EQ(array->file->data()[array->data_offset + 23], 7);
  const std::vector<int64_t> labels = {3};
  ASSERT_TRUE(WriteNpy(path, "<i8", {1}, labels.data(), 8).ok());
  EXPECT_EQ(OpenNpy(path)->shape, std::vector<int64_t>{1});
  ASSERT_TRUE(WriteNpy(path, "|u1", {2, 3, 4, 1}, pixels.data(), 20).ok());  // four bytes short
  EXPECT_NE(OpenNpy(path).status().message().find("holds 20 bytes of data where its shape (2, 3, 4, 1) of |u1 needs 24; "
                                                  "the file is truncated"),
            std::string::npos)
      << OpenNpy(path).status().message();
  std::ofstream(path, std::ios::binary) << "not numpy";
  EXPECT_NE(OpenNpy(path).status().message().find("save the array with numpy.save"), std::string::npos);
  fs::remove(path);
}

std::string DataError(const nlohmann::json& data, const std::string& input = R"({"kind":"tokens","vocab":8,"seq_len":4})") {
  nlohmann::json json = nlohmann::json::parse(R"({"format":"gpipe-model/1","name":"m",
    "layers":[{"type":"embedding","vocab":8,"dim":4,"max_seq":4},{"type":"lm-head","dim":4,"vocab":8}]})");
  json["input"] = nlohmann::json::parse(input);
  json["data"] = data;
  Expected<ModelSpec> model = ModelFromJson(json, "m.json", fs::temp_directory_path().string());
  return model.ok() ? "ok" : model.status().message();
}

TEST(DataSectionTest, FileKindsReadTheirFieldsAndRoundTrip) {
  WriteRaw<uint16_t>(Temp("train.bin"), {1, 2, 3});
  WriteRaw<uint16_t>(Temp("val.bin"), {1, 2, 3});
  const nlohmann::json data = {{"kind", "tokens-file"},
                               {"path", "gpipe-data-train.bin"},
                               {"dtype", "uint16"},
                               {"validation", {{"path", "gpipe-data-val.bin"}}}};
  nlohmann::json json = nlohmann::json::parse(R"({"format":"gpipe-model/1","name":"m",
    "input":{"kind":"tokens","vocab":8,"seq_len":4},"layers":[{"type":"embedding","vocab":8,"dim":4,"max_seq":4}]})");
  json["data"] = data;
  Expected<ModelSpec> model = ModelFromJson(json, "m.json", fs::temp_directory_path().string());
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->data.kind, DataKind::kTokenFile);
  EXPECT_EQ(model->data.path, Temp("train.bin"));
  ASSERT_TRUE(model->data.validation);
  EXPECT_EQ(model->data.validation->path, Temp("val.bin"));
  Expected<ModelSpec> again = ModelFromJson(ModelToJson(*model), "again", "");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(ModelToJson(*again), ModelToJson(*model));
  EXPECT_EQ(DataError({{"kind", "tokens-file"}, {"path", "gpipe-data-train.bin"}, {"validation_fraction", 0.1}}), "ok");
}

TEST(DataSectionTest, BadDataFieldsNameTheField) {
  WriteRaw<uint16_t>(Temp("train.bin"), {1, 2, 3});
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"kind", "tokens-file"}, {"path", "nope.bin"}}, "m.json.data.path: \"" + Temp("").substr(0, 0)},
      {{{"kind", "tokens-file"}, {"path", "nope.bin"}}, "nope.bin\" is not a readable file; give a file of token ids"},
      {{{"kind", "tokens-file"}, {"path", "gpipe-data-train.bin"}, {"dtype", "int8"}},
       "m.json.data.dtype: is \"int8\"; a token file holds \"uint16\" or \"uint32\" ids"},
      {{{"kind", "megatron"}, {"path", "nope"}}, "nope.idx\" is not a readable file; give the prefix of a Megatron dataset"},
      {{{"kind", "npy-images"}, {"images", "x.npy"}, {"labels", "y.npy"}}, "m.json.data.kind: \"npy-images\" data does not feed \"tokens\" input"},
      {{{"kind", "tokens-file"}, {"path", "gpipe-data-train.bin"}, {"validation_fraction", 1}},
       "m.json.data.validation_fraction: is 1; give the share of the data held out for evaluation, in (0, 1)"},
      {{{"kind", "tokens-file"}, {"path", "gpipe-data-train.bin"}, {"validation_fraction", 0.1}, {"validation", {{"path", "gpipe-data-val.bin"}}}},
       "m.json.data.validation: and validation_fraction are both given; keep one"},
      {{{"kind", "random-tokens"}, {"validation", {{"path", "gpipe-data-val.bin"}}}},
       "m.json.data.validation.kind: \"random-tokens\" data has no files to validate on"},
      {{{"kind", "tokens-file"}, {"path", "gpipe-data-train.bin"}, {"validation", {{"path", "gone.bin"}}}},
       "m.json.data.validation.path: \""},
  };
  for (const auto& [data, expected] : cases) {
    const std::string error = DataError(data);
    EXPECT_NE(error.find(expected), std::string::npos) << data.dump() << "\n  got: " << error;
  }
  EXPECT_NE(DataError({{"kind", "npy-images"}, {"images", "x.npy"}, {"labels", "y.npy"}},
                      R"({"kind":"images","channels":1,"height":2,"width":2,"classes":2})")
                .find("m.json.data.images: \""),
            std::string::npos);
}

}  // namespace
}  // namespace gpipe
