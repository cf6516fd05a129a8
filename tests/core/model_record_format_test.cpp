// The model format (gpipe-model/1) and the run record (gpipe-run/1): the shipped models load,
// files round-trip through their writers, and bad input gets one line naming the field and value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/json_reader.h"
#include "core/model.h"
#include "core/run_record.h"

namespace gpipe {
namespace {

const std::string kSource = GPIPE_SOURCE_DIR;

TEST(ModelFormatTest, ShippedModelsLoadAndRoundTrip) {
  for (const char* name : {"tiny-gpt.json", "small-cnn.json"}) {
    Expected<ModelSpec> model = LoadModel(kSource + "/models/" + name);
    ASSERT_TRUE(model.ok()) << model.status().message();
    Expected<ModelSpec> again = ModelFromJson(ModelToJson(*model), "again", "");
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(ModelToJson(*again), ModelToJson(*model));
  }
  Expected<ModelSpec> gpt = LoadModel(kSource + "/models/tiny-gpt.json");
  EXPECT_EQ(gpt->num_layers(), 6);
  EXPECT_EQ(gpt->layers[1].type, LayerType::kTransformerBlock);
  EXPECT_EQ(gpt->layers[1].heads, 2);
}

nlohmann::json TinyModel() {
  return nlohmann::json::parse(R"({"format":"gpipe-model/1","name":"m","input":{"kind":"tokens","vocab":8,"seq_len":4},
    "data":{"kind":"random-tokens"},
    "layers":[{"type":"embedding","vocab":8,"dim":4,"max_seq":4},{"type":"lm-head","dim":4,"vocab":8}]})");
}

std::string ModelError(const nlohmann::json& json) {
  Expected<ModelSpec> model = ModelFromJson(json, "m.json", "");
  return model.ok() ? "ok" : model.status().message();
}

TEST(ModelFormatTest, BadModelsGetOneLineNamingTheField) {
  struct Case {
    const char* patch;  // JSON merge patch applied to TinyModel()
    const char* error;
  };
  const Case cases[] = {
      {R"({"format":"gpipe-model/2"})", "m.json.format: unsupported format \"gpipe-model/2\""},
      {R"({"layers":[]})", "m.json.layers: the model has no layers"},
      {R"({"layers":[{"type":"transfomer-block","dim":4,"heads":2}]})",
       "m.json.layers[0].type: unknown layer type \"transfomer-block\"; known: embedding, linear"},
      {R"({"layers":[{"type":"transformer-block","dim":6,"heads":4}]})",
       "m.json.layers[0].heads: 4 does not divide dim (6)"},
      {R"({"layers":[{"type":"linear","in":4,"out":0}]})", "m.json.layers[0].out"},
      {R"({"layers":[{"type":"linear","in":4,"out":2,"kernel":3}]})",
       "m.json.layers[0].kernel: a linear layer has no field \"kernel\""},
      {R"({"layers":[{"type":"activation","function":"rleu"}]})", "did you mean \"relu\"?"},
      {R"({"layers":[{"type":"dropout","p":1.5}]})", "m.json.layers[0].p: is 1.500000; a dropout probability is in [0, 1)"},
      {R"({"layers":[{"type":"embedding","vocab":9,"dim":4,"max_seq":4}]})",
       "m.json.layers[0].vocab: is 9 but input.vocab is 8"},
      {R"({"layers":[{"type":"embedding","vocab":8,"dim":4,"max_seq":2}]})", "shorter than input.seq_len (4)"},
      {R"({"layers":[{"type":"linear","name":"a","in":1,"out":1},{"type":"linear","name":"a","in":1,"out":1}]})",
       "m.json.layers[1].name: \"a\" names an earlier layer too"},
      {R"({"input":{"kind":"pictures"}})", "m.json.input.kind: unknown input kind \"pictures\""},
      {R"({"data":{"kind":"synthetic-images"}})", "\"synthetic-images\" data does not feed \"tokens\" input"},
      {R"({"data":{"kind":"text","path":"/no/such/file.txt"}})", "m.json.data.path: \"/no/such/file.txt\" is not a readable file"},
      {R"({"loss":"mse"})", "m.json.loss: unknown loss \"mse\""},
      {R"({"learning_rate":0})", "m.json.learning_rate"},
      {R"({"torchscript":"net.pt"})", "give exactly one of \"layers\""},
      {R"({"python":"model.py:build"})", "give exactly one of \"layers\""},
  };
  for (const Case& c : cases) {
    nlohmann::json model = TinyModel();
    model.merge_patch(nlohmann::json::parse(c.patch));
    const std::string error = ModelError(model);
    EXPECT_NE(error.find(c.error), std::string::npos) << "patch " << c.patch << "\n  got: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// "python": "file.py:function" names a function returning an nn.Sequential (the executor exports
// it); the file must exist, the function defaults to build, and the pair is written back as read.
TEST(ModelFormatTest, PythonModelNamesAFileAndAFunction) {
  std::string dir = testing::TempDir() + "python_model_test";
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/net.py") << "def build():\n    pass\n"; }
  nlohmann::json model = TinyModel();
  model.erase("layers");
  model["python"] = "net.py:make";
  Expected<ModelSpec> spec = ModelFromJson(model, "m.json", dir);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->python_path, dir + "/net.py");
  EXPECT_EQ(spec->python_function, "make");
  EXPECT_EQ(ModelToJson(*spec)["python"], dir + "/net.py:make");
  model["python"] = "net.py";
  ASSERT_TRUE(ModelFromJson(model, "m.json", dir).ok());
  EXPECT_EQ(ModelFromJson(model, "m.json", dir)->python_function, "build");
  model["python"] = "missing.py:build";
  Expected<ModelSpec> missing = ModelFromJson(model, "m.json", dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("m.json.python: \"" + dir + "/missing.py\" is not a readable file"),
            std::string::npos) << missing.status().message();
  model["python"] = "net.py:";
  ASSERT_FALSE(ModelFromJson(model, "m.json", dir).ok());
  EXPECT_NE(ModelFromJson(model, "m.json", dir).status().message().find("is not \"file.py:function\""), std::string::npos);
}

TEST(ModelFormatTest, CharTokensCoverTheVocabulary) {
  EXPECT_EQ(CharToken('\n'), 0);
  EXPECT_EQ(CharToken(' '), 1);
  EXPECT_EQ(CharToken('~'), 95);
  EXPECT_EQ(CharToken(200), 1);
}

RunRecord TinyRecord() {
  RunRecord r;
  r.model = "m";
  r.global_batch = 8;
  r.microbatches = 2;
  r.steps = {{0, 4.5, 100}, {1, 4.0, 50}, {2, 3.5, 30}, {3, 3.4, 100}};
  r.throughput_samples_per_s = ThroughputOf(r.steps, r.global_batch);
  RankRecord rank;
  rank.stages = {0};
  rank.peak_memory_bytes = 1000;
  rank.parameter_bytes = 10;
  rank.step_peak_memory_bytes = {900, 1000};
  rank.step_start_memory_bytes = {10, 20};
  rank.actions = {{1, {Op::kForward, 0, 1}, 1.0, 2.5, 0}, {1, {Op::kBackward, 0, 1}, 3.0, 6.0, 1.0}};
  r.ranks = {rank};
  return r;
}

TEST(RunRecordFormatTest, RoundTripsAndThroughputSkipsTheFirstStep) {
  const RunRecord record = TinyRecord();
  EXPECT_DOUBLE_EQ(MeasuredStepMs(record.steps), 50);             // median of 50, 30, 100 ms (the mean is 60)
  EXPECT_DOUBLE_EQ(record.throughput_samples_per_s, 8 / 0.050);
  Expected<RunRecord> again = RunRecordFromJson(RunRecordToJson(record), "r.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(RunRecordToJson(*again), RunRecordToJson(record));
  EXPECT_EQ(again->ranks[0].actions[1].action, (Action{Op::kBackward, 0, 1}));
}

TEST(RunRecordFormatTest, ParameterBytesReadFromOlderRecordsToo) {
  nlohmann::json json = RunRecordToJson(TinyRecord());
  EXPECT_EQ(json["ranks"][0]["parameter_bytes"], 10);
  json["ranks"][0].erase("parameter_bytes");
  json["ranks"][0]["static_memory_bytes"] = 12;  // what records named it before
  Expected<RunRecord> again = RunRecordFromJson(json, "r.json");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->ranks[0].parameter_bytes, 12);
  EXPECT_NE(FormatRunSummary(*again).find("of which parameters 12 B"), std::string::npos) << FormatRunSummary(*again);
}

TEST(RunRecordFormatTest, BadRecordsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"/steps/0/time_ms", "r.json.steps[0].time_ms"},
      {"/ranks/0/actions/0/action", "r.json.ranks[0].actions[0].action"},
      {"/ranks/0/peak_memory_bytes", "r.json.ranks[0].peak_memory_bytes"},
      {"/global_batch", "r.json.global_batch"},
  };
  for (const auto& [pointer, error] : cases) {
    nlohmann::json json = RunRecordToJson(TinyRecord());
    json[nlohmann::json::json_pointer(pointer)] = "oops";
    Expected<RunRecord> record = RunRecordFromJson(json, "r.json");
    ASSERT_FALSE(record.ok()) << pointer;
    EXPECT_NE(record.status().message().find(error), std::string::npos) << record.status().message();
  }
  nlohmann::json json = RunRecordToJson(TinyRecord());
  json["ranks"][0]["actions"][0]["end_ms"] = 0.5;
  EXPECT_NE(RunRecordFromJson(json, "r.json").status().message().find("is before start_ms"), std::string::npos);
}

}  // namespace
}  // namespace gpipe
