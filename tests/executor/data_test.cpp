// The user's data as the executor draws it (executor/data.h): windows of a token file are the
// file's tokens, validation draws only from the held-out end, images and labels come through as
// written, a token outside the vocabulary stops with the file and the offset, and evaluation runs
// between steps without changing the training.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "core/data_files.h"
#include "executor/data.h"
#include "executor/worker.h"
#include "tests/executor/test_plans.h"

namespace gpipe::executor {
namespace {

namespace fs = std::filesystem;

std::string Temp(const std::string& name) { return (fs::temp_directory_path() / ("gpipe-exec-data-" + name)).string(); }

// A token file whose token i is i (uint16), and a model of `vocab` tokens reading it.
ModelSpec CountingTokens(int count, int vocab, double validation_fraction = 0) {
  std::vector<uint16_t> ids(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) ids[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  const std::string path = Temp("counting.bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), count * 2);
  ModelSpec model = testing::TinyGpt(1);
  model.input.vocab = model.layers.front().vocab = model.layers.back().vocab = vocab;
  model.data.kind = DataKind::kTokenFile;
  model.data.path = path;
  model.data.validation_fraction = validation_fraction;
  return model;
}

TEST(DataSourceTest, TokenFileWindowsAreTheFilesTokens) {
  const ModelSpec model = CountingTokens(1000, 1000, /*validation_fraction=*/0.2);
  const DataSource data = DataSource::Open(model).value();
  ASSERT_TRUE(data.has_validation());
  const int64_t seq = model.input.seq_len;
  for (int64_t step = 0; step < 20; ++step) {
    const Batch batch = data.GlobalBatch(step, 16);
    for (int64_t b = 0; b < 16; ++b) {
      const int64_t start = batch.input[b][0].item<int64_t>();
      EXPECT_LE(start + seq, 800) << "a training window reaches into the held-out 20%";
      for (int64_t j = 0; j < seq; ++j) {
        EXPECT_EQ(batch.input[b][j].item<int64_t>(), start + j);
        EXPECT_EQ(batch.target[b][j].item<int64_t>(), start + j + 1);
      }
    }
    const Batch eval = data.EvalBatch(step, 16);
    EXPECT_GE(eval.input.min().item<int64_t>(), 800) << "an evaluation window starts in the training data";
  }
  EXPECT_TRUE(torch::equal(data.EvalBatch(3, 16).input, data.EvalBatch(3, 16).input));  // the same at every evaluation
  EXPECT_FALSE(torch::equal(data.GlobalBatch(3, 16).input, data.EvalBatch(3, 16).input));
}

TEST(DataSourceTest, ATokenOutsideTheVocabularyNamesTheFileAndOffset) {
  const ModelSpec model = CountingTokens(100, 50);  // tokens 50..99 are outside a vocabulary of 50
  const DataSource data = DataSource::Open(model).value();
  std::string error;
  for (int64_t step = 0; step < 50 && error.empty(); ++step) {
    try {
      data.GlobalBatch(step, 8);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  ASSERT_FALSE(error.empty());
  // Token i of the file is i: the id, its index and its byte offset (2 bytes a token) agree.
  std::smatch match;
  ASSERT_TRUE(std::regex_search(error, match, std::regex(R"(: token id (\d+) at byte offset (\d+) \(token (\d+)\))")))
      << error;
  EXPECT_EQ(error.rfind(model.data.path + ": token id ", 0), 0u) << error;
  EXPECT_GE(std::stoi(match[1]), 50) << error;
  EXPECT_EQ(std::stoi(match[2]), 2 * std::stoi(match[1])) << error;
  EXPECT_EQ(match[3], match[1]) << error;
  EXPECT_NE(error.find("outside the model's vocabulary of 50; is the file's dtype uint16"), std::string::npos) << error;
}

TEST(DataSourceTest, AFileShorterThanOneSequenceIsRefused) {
  const ModelSpec model = CountingTokens(9, 100);  // seq_len 8 needs 10 tokens
  EXPECT_EQ(DataSource::Open(model).status().message(),
            model.data.path + ": its training data holds 9 tokens; the model needs at least seq_len + 2 = 10");
}

TEST(DataSourceTest, NpyImagesAndLabelsComeThroughAsWritten) {
  const int64_t n = 12, h = 4, w = 4, c = 3, classes = 5;
  std::vector<uint8_t> pixels(static_cast<size_t>(n * h * w * c));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < h * w * c; ++k) pixels[static_cast<size_t>(i * h * w * c + k)] = static_cast<uint8_t>(10 * i + k % c);
    labels[static_cast<size_t>(i)] = i % classes;
  }
  ModelSpec model = testing::ImageModel(h, classes, 0.1);
  model.data.kind = DataKind::kNpyImages;
  model.data.path = Temp("images.npy");
  model.data.labels_path = Temp("labels.npy");
  ASSERT_TRUE(WriteNpy(model.data.path, "|u1", {n, h, w, c}, pixels.data(), n * h * w * c).ok());
  ASSERT_TRUE(WriteNpy(model.data.labels_path, "<i8", {n}, labels.data(), n * 8).ok());
  const DataSource data = DataSource::Open(model).value();
  const Batch batch = data.GlobalBatch(0, 6);
  ASSERT_EQ(batch.input.sizes().vec(), (std::vector<int64_t>{6, c, h, w}));
  for (int64_t b = 0; b < 6; ++b) {
    const int64_t i = static_cast<int64_t>(std::lround(batch.input[b][0][0][0].item<double>() * 255.0)) / 10;
    EXPECT_EQ(batch.target[b].item<int64_t>(), i % classes);
    for (int64_t ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(batch.input[b][ch][h - 1][w - 1].item<double>(), (10.0 * i + ch) / 255.0, 1e-6);
    }
  }
  // Images of another shape than the input's: one line naming the file and what the input needs.
  model.input.height = 8;
  EXPECT_NE(DataSource::Open(model).status().message().find("images.npy: images are |u1 [12, 4, 4, 3]; the model's input "
                                                            "needs uint8 (|u1) [N, 8, 4, 3]"),
            std::string::npos)
      << DataSource::Open(model).status().message();
}

// Evaluation every two steps: the loss is recorded after steps 2 and 4 (and the last), is the
// same for K=1 and K=2 (it depends on the weights alone), and training is the same as without it.
TEST(EvaluationTest, EvalLossIsTheSameForEveryCutAndLeavesTrainingAlone) {
  const ModelSpec model = CountingTokens(4000, 4000, 0.25);
  RunSettings settings;
  settings.steps = 5;
  settings.eval_every = 2;
  settings.eval_batches = 2;
  std::vector<std::vector<StepRecord>> runs;
  for (int ranks : {1, 2}) {
    const Plan plan = testing::EvenPlan(model.num_layers(), ScheduleKind::k1F1B, ranks, 1, 2, 1, 8, false, Optimizer::kAdam);
    Expected<RunRecord> record = TrainInProcess(plan, model, settings);
    ASSERT_TRUE(record.ok()) << record.status().message();
    runs.push_back(record->steps);
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    const bool evaluated = i == 1 || i == 3 || i == 4;
    ASSERT_EQ(runs[0][i].eval_loss.has_value(), evaluated) << i;
    ASSERT_EQ(runs[1][i].eval_loss.has_value(), evaluated) << i;
    if (evaluated) {
      EXPECT_NEAR(*runs[0][i].eval_loss, *runs[1][i].eval_loss, 1e-5) << i;
    }
  }
  EXPECT_LT(*runs[0][4].eval_loss, *runs[0][1].eval_loss) << "five steps of Adam on counting sequences learn something";
  settings.eval_every = 0;
  const Plan plan = testing::EvenPlan(model.num_layers(), ScheduleKind::k1F1B, 2, 1, 2, 1, 8, false, Optimizer::kAdam);
  Expected<RunRecord> plain = TrainInProcess(plan, model, settings);
  ASSERT_TRUE(plain.ok());
  for (size_t i = 0; i < plain->steps.size(); ++i) EXPECT_DOUBLE_EQ(plain->steps[i].loss, runs[1][i].loss) << i;
}

}  // namespace
}  // namespace gpipe::executor
