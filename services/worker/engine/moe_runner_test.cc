// The CPU runner's mixture-of-experts MLP (qwen3moe and Mixtral-style llama): the
// grouped path (a step's tokens gathered per expert, each expert's weights read once a
// step) gives every sequence of a batch the logits it gets alone, bit for bit, and
// experts run side by side (decode) give the bits of experts run in turn, in each
// weight family the kernels treat differently (f32 and f16 panels; q8_0, q4_0 and q4_K
// read in place);
// a model whose expert metadata or tensors are wrong is refused naming what is wrong.
// (Agreement with llama.cpp is llama_logits_test's ExpertsAndTypes cases.)
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

RandomModelOptions MoeOptions(DType dtype) {
  RandomModelOptions o;
  o.architecture = "qwen3moe";
  // K-quants store whole 256-value super-blocks: their model is 256 wide.
  const bool k_quant = dtype == DType::kQ4_K || dtype == DType::kQ6_K;
  o.dim = k_quant ? 256 : 64;
  o.hidden_dim = 256;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 300;
  o.context_length = 256;
  o.weight_std = 0.2f;
  o.num_experts = 8;
  o.num_experts_used = 2;
  o.expert_hidden_dim = 256;  // whole q4_K super-blocks for the down projection
  o.dtype = dtype;
  o.seed = 99;
  return o;
}

std::string TempPath(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("folio_moe_test_" + std::to_string(::getpid()) + "_" + tag + ".gguf"))
      .string();
}

std::unique_ptr<ModelWeights> Load(const RandomModelOptions& o, const std::string& tag) {
  const std::string path = TempPath(tag);
  absl::Status s = WriteRandomModel(o, path);
  CHECK(s.ok()) << s;
  std::unique_ptr<ModelWeights> w = testing::LoadOrDie(path);
  std::filesystem::remove(path);
  return w;
}

std::unique_ptr<CpuModelRunner> Runner(const ModelWeights& w, int32_t threads = 2) {
  CpuModelRunnerOptions o;
  o.kv_cache_bytes = 8 << 20;
  o.num_threads = threads;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

class MoeRunnerTest : public ::testing::TestWithParam<DType> {};

TEST_P(MoeRunnerTest, EachSequenceOfABatchGetsTheLogitsItGetsAlone) {
  std::unique_ptr<ModelWeights> w = Load(MoeOptions(GetParam()), DTypeName(GetParam()));
  ASSERT_TRUE(w->config.moe());
  ASSERT_EQ(w->config.num_experts, 8);
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 20, 31, 7, 250, 99, 13, 42, 5, 77, 160, 3, 11},
      {1, 200, 4},
      {1, 8, 16, 32, 64, 128, 256, 12, 24, 48, 96, 192, 17, 34, 68, 136, 272, 29, 58},
  };
  std::unique_ptr<CpuModelRunner> batched = Runner(*w);
  const std::vector<std::vector<float>> together = testing::PrefillLastLogits(*batched, prompts);
  ASSERT_EQ(together.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::unique_ptr<CpuModelRunner> one = Runner(*w);
    const std::vector<std::vector<float>> alone = testing::PrefillLastLogits(*one, {prompts[i]});
    ASSERT_EQ(alone[0].size(), together[i].size());
    EXPECT_EQ(alone[0], together[i]) << "prompt " << i;
    EXPECT_GT(testing::MaxAbs(alone[0]), 0.0f);
  }
}

// Decode-sized steps (a few rows per expert) run the chosen experts side by side on the
// pool's threads; one thread runs them one after another. Same bits.
TEST_P(MoeRunnerTest, ExpertsSideBySideGiveTheLogitsOfExpertsOneAfterAnother) {
  std::unique_ptr<ModelWeights> w = Load(MoeOptions(GetParam()), std::string("sbs_") +
                                                                     DTypeName(GetParam()));
  const std::vector<std::vector<int32_t>> prompts = {{1}, {1, 200}, {77}};
  std::unique_ptr<CpuModelRunner> two = Runner(*w, 2);
  std::unique_ptr<CpuModelRunner> one = Runner(*w, 1);
  EXPECT_EQ(testing::PrefillLastLogits(*two, prompts), testing::PrefillLastLogits(*one, prompts));
}

TEST_P(MoeRunnerTest, ExpertsAreCountedInTheWeightBytes) {
  RandomModelOptions o = MoeOptions(GetParam());
  std::unique_ptr<ModelWeights> w = Load(o, std::string("bytes_") + DTypeName(GetParam()));
  std::unique_ptr<CpuModelRunner> r = Runner(*w);
  // Each layer's experts hold 3 * experts * expert_hidden * dim weights, far more than
  // its attention (4 projections of at most dim * dim).
  const int64_t expert_values = int64_t{3} * o.num_experts * o.expert_hidden_dim * o.dim;
  EXPECT_GE(r->layer_weight_bytes(), o.num_layers * expert_values / 2)  // >= 4 bits each
      << "experts missing from layer_weight_bytes";
}

INSTANTIATE_TEST_SUITE_P(Types, MoeRunnerTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_K),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(MoeModelTest, ExpertMetadataAndTensorsAreChecked) {
  RandomModelOptions o = MoeOptions(DType::kF32);
  std::string bytes = *MakeRandomModelGguf(o);
  auto patched_load = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const size_t at = b.find(from);
    CHECK_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);
    const std::string path = TempPath("patched");
    {
      std::ofstream f(path, std::ios::binary);
      f << b;
    }
    absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
    std::filesystem::remove(path);
    return w.status();
  };
  // Renaming a key (same length) removes it from the file.
  absl::Status s = patched_load("qwen3moe.expert_count", "qwen3moe.expert_cOunt");
  EXPECT_THAT(s.message(), HasSubstr("qwen3moe.expert_count"));
  s = patched_load("blk.1.ffn_up_exps.weight", "blk.1.ffn_up_expX.weight");
  EXPECT_THAT(s.message(), HasSubstr("blk.1.ffn_up_exps.weight"));
  s = patched_load("blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_inX.weight");
  EXPECT_THAT(s.message(), HasSubstr("blk.0.ffn_gate_inp.weight"));
}

TEST(MoeModelTest, OptionsOutsideTheExpertsAreRefusedByTheGenerator) {
  RandomModelOptions o = MoeOptions(DType::kF32);
  o.num_experts_used = 9;
  EXPECT_FALSE(ValidateRandomModelOptions(o).ok());
  o = MoeOptions(DType::kF32);
  o.architecture = "qwen2";
  EXPECT_FALSE(ValidateRandomModelOptions(o).ok());
}

}  // namespace
}  // namespace folio::worker
