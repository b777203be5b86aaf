// Golden test: stories260K, greedy from BOS with an empty prompt for 200 steps, must
// print exactly what llama2.c's run.c prints (expected_run_c_t0_n200.txt): the decoded
// pieces of the 200 sampled tokens (the first loses its dummy-prefix space after BOS)
// followed by the "\n" run.c prints at the end. Both file formats of the model.
#include <algorithm>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker {
namespace {

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, GreedyFromBosMatchesLlama2c) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  const std::string expected =
      testing::ReadFileOrEmpty(*dir + "/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_FALSE(expected.empty());
  std::unique_ptr<ModelWeights> weights =
      testing::LoadOrDie(*dir + "/stories260K/" + GetParam());
  CpuModelRunnerOptions options;
  options.kv_cache_bytes = 8 << 20;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> runner = CpuModelRunner::Create(*weights, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(weights->vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  const std::vector<int32_t> ids =
      testing::GreedyFromBos(**runner, tokenizer->bos_id(), /*steps=*/200, /*table_seed=*/3);
  EXPECT_EQ(std::count(ids.begin() + 1, ids.end(), tokenizer->bos_id()), 0)
      << "the golden run never emits BOS";
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text + "\n", expected);
}

INSTANTIATE_TEST_SUITE_P(Formats, GoldenTest,
                         ::testing::Values("stories260K.bin", "stories260K.gguf"),
                         [](const auto& info) {
                           return info.param.substr(info.param.find('.') + 1);
                         });

}  // namespace
}  // namespace folio::worker
