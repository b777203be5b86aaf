// Golden test: stories260K, greedy from BOS with an empty prompt for 200 steps, must
// print exactly what llama2.c's run.c prints (expected_run_c_t0_n200.txt): the decoded
// pieces of the 200 sampled tokens (the first loses its dummy-prefix space after BOS)
// followed by the "\n" run.c prints at the end. Both file formats of the model.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, GreedyFromBosMatchesLlama2c) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  const std::string expected = ReadFile(*dir + "/stories260K/expected_run_c_t0_n200.txt");
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

  const int kSteps = 200;
  SequenceStep seq;
  seq.seq_id = 1;
  seq.sampling.temperature = 0.0f;
  seq.block_table = testing::ScatteredBlocks(
      (kSteps + (*runner)->block_size() - 1) / (*runner)->block_size(), /*seed=*/3);
  std::vector<int32_t> ids = {tokenizer->bos_id()};
  for (int pos = 0; pos < kSteps; ++pos) {
    seq.token_ids = {ids.back()};
    seq.start_pos = pos;
    StepInput step;
    step.seqs = {seq};
    absl::StatusOr<StepOutput> out = (*runner)->Execute(step);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->seqs.size(), 1u);
    ASSERT_EQ(out->seqs[0].samples.size(), 1u);
    const int32_t next = out->seqs[0].samples[0].token_id;
    ASSERT_NE(next, tokenizer->bos_id()) << "the golden run never emits BOS";
    ids.push_back(next);
  }
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
