// Tensor parallelism in one process (InProcessTpRunner over Gloo on loopback): TP=2
// reproduces the stories260K golden text byte for byte; the bench model's greedy
// tokens at TP=2 equal TP=1's and its logits agree within a stated tolerance; a model
// with uneven hidden and vocabulary splits (TP=3) agrees too; each rank holds about
// 1/tp of the layer weights; the collectives per step are what the layer count implies;
// a model whose KV heads do not divide by the TP degree is refused.
#include "services/worker/dist/in_process_tp_runner.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "common/tokenizer/tokenizer.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

CpuModelRunnerOptions RunnerOptions() {
  CpuModelRunnerOptions o;
  o.kv_cache_bytes = 16 << 20;
  o.num_threads = 1;
  return o;
}

std::unique_ptr<InProcessTpRunner> TpOrDie(const ModelWeights& w, int32_t tp) {
  InProcessTpOptions o;
  o.tp_size = tp;
  o.runner = RunnerOptions();
  o.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<InProcessTpRunner>> r = InProcessTpRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

std::unique_ptr<CpuModelRunner> SingleOrDie(const ModelWeights& w) {
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, RunnerOptions());
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

struct Generation {
  std::vector<int32_t> tokens;              // generated, greedy
  std::vector<std::vector<float>> logits;   // the logits each token was picked from
};

// Prefills `prompt` in one step, then decodes greedily until `num_tokens` are generated.
Generation Greedy(ModelRunner& runner, const std::vector<int32_t>& prompt, int num_tokens) {
  Generation g;
  SequenceStep seq;
  seq.seq_id = 7;
  seq.sampling.temperature = 0.0f;
  seq.return_logits = true;
  const int32_t total = static_cast<int32_t>(prompt.size()) + num_tokens;
  seq.block_table = testing::ScatteredBlocks(
      (total + runner.block_size() - 1) / runner.block_size(), /*seed=*/5);
  seq.token_ids = prompt;
  seq.start_pos = 0;
  for (int i = 0; i < num_tokens; ++i) {
    StepInput step;
    step.seqs = {seq};
    absl::StatusOr<StepOutput> out = runner.Execute(step);
    CHECK(out.ok()) << out.status();
    CHECK_EQ(out->seqs.size(), 1u);
    CHECK_EQ(out->seqs[0].samples.size(), 1u);
    g.tokens.push_back(out->seqs[0].samples[0].token_id);
    g.logits.push_back(out->seqs[0].logits);
    seq.start_pos += static_cast<int32_t>(seq.token_ids.size());
    seq.token_ids = {g.tokens.back()};
  }
  return g;
}

// Logit tolerance: |tp - single| <= kAbsTol + kRelTol * max|single| per row. TP sums the
// same products in a different order (partial sums per rank, then the all-reduce), so
// the logits differ by float rounding only.
constexpr float kAbsTol = 1e-4f;
constexpr float kRelTol = 1e-4f;

void ExpectLogitsClose(const Generation& single, const Generation& tp) {
  ASSERT_EQ(single.logits.size(), tp.logits.size());
  for (size_t i = 0; i < single.logits.size(); ++i) {
    const std::vector<float>& a = single.logits[i];
    const std::vector<float>& b = tp.logits[i];
    ASSERT_EQ(a.size(), b.size());
    float scale = 0.0f, worst = 0.0f;
    for (size_t v = 0; v < a.size(); ++v) {
      scale = std::max(scale, std::abs(a[v]));
      worst = std::max(worst, std::abs(a[v] - b[v]));
    }
    EXPECT_LE(worst, kAbsTol + kRelTol * scale) << "step " << i << ", max |logit| " << scale;
  }
}

class TpGoldenTest : public ::testing::TestWithParam<int> {};

TEST_P(TpGoldenTest, Stories260KGoldenTextByteForByte) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  const std::string expected = ReadFileOrEmpty(*dir + "/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_FALSE(expected.empty());
  std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*dir + "/stories260K/stories260K.gguf");
  // 8 query heads and 4 KV heads: TP 2 (and 4) split them whole.
  ASSERT_EQ(weights->config.num_kv_heads % GetParam(), 0);
  std::unique_ptr<InProcessTpRunner> runner = TpOrDie(*weights, GetParam());
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(weights->vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Generation g = Greedy(*runner, {tokenizer->bos_id()}, 200);
  std::vector<int32_t> ids = {tokenizer->bos_id()};
  ids.insert(ids.end(), g.tokens.begin(), g.tokens.end());
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text + "\n", expected);
}

INSTANTIATE_TEST_SUITE_P(Degrees, TpGoldenTest, ::testing::Values(2),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

TEST(TpRunnerTest, BenchModelGreedyTokensEqualTp1) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*dir + "/bench-28m-f16.gguf");
  const std::vector<int32_t> prompt = {1, 300, 1200, 77, 4000, 9, 2500, 613};
  Generation single, tp;
  {
    std::unique_ptr<CpuModelRunner> r = SingleOrDie(*weights);
    single = Greedy(*r, prompt, 24);
  }
  {
    std::unique_ptr<InProcessTpRunner> r = TpOrDie(*weights, 2);
    tp = Greedy(*r, prompt, 24);
  }
  EXPECT_EQ(tp.tokens, single.tokens);
  ExpectLogitsClose(single, tp);
}

// A small F16 random model: `o` over these defaults.
RandomModelOptions SmallF16(RandomModelOptions o) {
  o.num_layers = 2;
  o.context_length = 128;
  o.dtype = DType::kF16;
  o.weight_std = 0.2f;
  return o;
}

// Writes `o`, loads it, and checks that `tp` ranks give TP=1's greedy tokens and logits
// for 12 tokens after `prompt`; returns the TP runner for more checks.
std::unique_ptr<InProcessTpRunner> ExpectTpAgreesWithTp1(const RandomModelOptions& o, int tp,
                                                         const std::vector<int32_t>& prompt,
                                                         std::unique_ptr<ModelWeights>* weights) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("folio_tp_" + o.architecture + "_" + std::to_string(::getpid()) +
                             ".gguf")).string();
  CHECK(WriteRandomModel(o, path).ok());
  *weights = testing::LoadOrDie(path);
  std::filesystem::remove(path);
  std::unique_ptr<CpuModelRunner> one = SingleOrDie(**weights);
  std::unique_ptr<InProcessTpRunner> ranks = TpOrDie(**weights, tp);
  const Generation single = Greedy(*one, prompt, 12);
  const Generation split = Greedy(*ranks, prompt, 12);
  EXPECT_EQ(split.tokens, single.tokens);
  ExpectLogitsClose(single, split);
  return ranks;
}

// A model with 3 KV heads, hidden_dim 100 and vocabulary 301 over 3 ranks: the hidden
// units and the vocabulary split unevenly (33/33/34, 100/100/101), the heads evenly.
TEST(TpRunnerTest, UnevenSplitsAgreeWithTp1) {
  RandomModelOptions o;
  o.dim = 48;
  o.hidden_dim = 100;
  o.num_heads = 6;
  o.num_kv_heads = 3;
  o.vocab_size = 301;
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<InProcessTpRunner> three =
      ExpectTpAgreesWithTp1(SmallF16(o), 3, {1, 50, 290, 7, 300}, &weights);
  EXPECT_EQ(three->rank(0).weights().hidden_dim + three->rank(1).weights().hidden_dim +
                three->rank(2).weights().hidden_dim,
            100);
}

RandomModelOptions Dim64(const std::string& arch) {
  RandomModelOptions o;
  o.architecture = arch;
  o.dim = 64;
  o.hidden_dim = 128;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 300;
  return SmallF16(o);
}

// A mixture of experts over 2 ranks: every rank routes alike (the router is whole on
// each) and runs every chosen expert on its half of the expert's units.
TEST(TpRunnerTest, MixtureOfExpertsAgreesWithTp1) {
  RandomModelOptions o = Dim64("qwen3moe");
  o.num_experts = 8;
  o.num_experts_used = 2;
  o.expert_hidden_dim = 96;
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<InProcessTpRunner> two =
      ExpectTpAgreesWithTp1(o, 2, {1, 50, 290, 7, 299, 12, 88}, &weights);
  EXPECT_EQ(two->rank(0).weights().expert_hidden_dim, 48);
  EXPECT_EQ(two->rank(1).weights().expert_hidden_dim, 48);
}

// Gemma 2 over 2 ranks: each sublayer's partial outputs are summed before its post-norm.
TEST(TpRunnerTest, Gemma2PostNormsAgreeWithTp1) {
  RandomModelOptions o = Dim64("gemma2");
  o.sliding_window = 4;
  std::unique_ptr<ModelWeights> weights;
  ExpectTpAgreesWithTp1(o, 2, {1, 50, 290, 7, 299, 12, 88}, &weights);
}

TEST(TpRunnerTest, EachRankHoldsItsShareOfTheWeights) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  std::unique_ptr<ModelWeights> weights = testing::LoadOrDie(*dir + "/stories260K/stories260K.gguf");
  // The shards themselves, in f32: exactly half of every split matrix each.
  absl::StatusOr<CpuWeights> full = CpuWeights::Create(*weights);
  ASSERT_TRUE(full.ok()) << full.status();
  int64_t sum_layers = 0;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<CpuWeights> w = CpuWeights::Create(*weights, {.rank = r, .size = 2});
    ASSERT_TRUE(w.ok()) << w.status();
    // Only the norms are replicated: about half of the layer bytes each.
    EXPECT_NEAR(static_cast<double>(w->layer_bytes()) / full->layer_bytes(), 0.5, 0.02) << "rank " << r;
    EXPECT_NEAR(static_cast<double>(w->size_bytes()) / full->size_bytes(), 0.5, 0.02) << "rank " << r;
    EXPECT_EQ(w->num_kv_heads, 2);
    sum_layers += w->layer_bytes();
  }
  // The replicated norms are the only overlap.
  const ModelConfig& c = weights->config;
  EXPECT_EQ(sum_layers, full->layer_bytes() + int64_t{c.num_layers} * 2 * c.dim * 4);

  // What the runners hold (packed panels and the f32 norms and embeddings): half each.
  const int64_t full_layers = SingleOrDie(*weights)->layer_weight_bytes();
  const int64_t full_total = SingleOrDie(*weights)->weight_bytes();
  std::unique_ptr<InProcessTpRunner> tp = TpOrDie(*weights, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(static_cast<double>(tp->rank(r).layer_weight_bytes()) / full_layers, 0.5, 0.02)
        << "rank " << r;
    EXPECT_NEAR(static_cast<double>(tp->rank(r).weight_bytes()) / full_total, 0.5, 0.02)
        << "rank " << r;
    EXPECT_EQ(tp->rank(r).kv_cache().shape().num_kv_heads, 2);
  }
}

TEST(TpRunnerTest, CollectivesPerStepFollowTheLayerCount) {
  std::unique_ptr<ModelWeights> weights = testing::RandomModelOrDie(/*seed=*/11);
  const int32_t layers = weights->config.num_layers;
  std::unique_ptr<InProcessTpRunner> tp = TpOrDie(*weights, 2);
  auto counts = [&](int r) { return tp->communicator(r).counts(); };
  // A prefill chunk that samples nothing: no logits, so no gather.
  SequenceStep seq;
  seq.seq_id = 1;
  seq.token_ids = {1, 2, 3, 4};
  seq.block_table = {0};
  seq.num_samples = 0;
  StepInput step;
  step.seqs = {seq};
  ASSERT_TRUE(tp->Execute(step).ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(counts(r).all_reduces, 1 + 2 * layers) << "rank " << r;
    EXPECT_EQ(counts(r).gathers, 0) << "rank " << r;
  }
  // Two sequences that both sample: still one all-reduce per sublayer, one gather.
  seq.token_ids = {5};
  seq.start_pos = 4;
  seq.num_samples = 1;
  SequenceStep other = seq;
  other.seq_id = 2;
  other.token_ids = {9, 8};
  other.start_pos = 0;
  other.block_table = {1};
  step.seqs = {seq, other};
  absl::StatusOr<StepOutput> out = tp->Execute(step);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->seqs.size(), 2u);
  EXPECT_EQ(out->seqs[1].seq_id, 2u);
  EXPECT_EQ(out->seqs[1].samples.size(), 1u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(counts(r).all_reduces, 2 * (1 + 2 * layers)) << "rank " << r;
    EXPECT_EQ(counts(r).gathers, 1) << "rank " << r;
  }
}

TEST(TpRunnerTest, BadStepIsRefusedByEveryRankBeforeAnyCollective) {
  std::unique_ptr<ModelWeights> weights = testing::RandomModelOrDie(/*seed=*/12);
  std::unique_ptr<InProcessTpRunner> tp = TpOrDie(*weights, 2);
  SequenceStep seq;
  seq.seq_id = 1;
  seq.token_ids = {1};
  seq.block_table = {100000};
  StepInput step;
  step.seqs = {seq};
  absl::StatusOr<StepOutput> out = tp->Execute(step);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tp->communicator(0).counts().all_reduces, 0);
  EXPECT_EQ(tp->communicator(1).counts().all_reduces, 0);
  // The group still works afterwards.
  seq.block_table = {0};
  step.seqs = {seq};
  EXPECT_TRUE(tp->Execute(step).ok());
}

TEST(TpRunnerTest, RefusesKvHeadsThatDoNotDivide) {
  std::unique_ptr<ModelWeights> weights = testing::RandomModelOrDie(/*seed=*/13);  // 2 KV heads
  InProcessTpOptions o;
  o.tp_size = 3;
  o.runner = RunnerOptions();
  absl::StatusOr<std::unique_ptr<InProcessTpRunner>> r = InProcessTpRunner::Create(*weights, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("2 KV heads, which do not divide over 3"));
}

// A q4_K model of the qwen2 form (biases split with their heads): 256-value blocks.
std::unique_ptr<ModelWeights> QuantizedModel(int32_t head_dim, const std::string& name) {
  RandomModelOptions o;
  o.architecture = "qwen2";
  o.dtype = DType::kQ4_K;
  o.dim = 256;
  o.hidden_dim = 1024;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = head_dim;
  o.vocab_size = 300;
  o.weight_std = 0.05f;
  o.embedding_std = 0.5f;
  const std::string path = ::testing::TempDir() + "/" + name;
  CHECK(WriteRandomModel(o, path).ok());
  std::unique_ptr<ModelWeights> w = testing::LoadOrDie(path);
  std::filesystem::remove(path);
  return w;
}

TEST(TpRunnerTest, QuantizedTp2MatchesTp1OnBlockBoundaries) {
  // head_dim 128: each rank's 2 query heads are 256 columns of attn_output, one block;
  // 1024 hidden units are 4 blocks of ffn_down, 2 per rank.
  std::unique_ptr<ModelWeights> weights = QuantizedModel(128, "tp_q4k.gguf");
  const std::vector<int32_t> prompt = {1, 50, 290, 7, 300 - 1};
  const Generation single = Greedy(*SingleOrDie(*weights), prompt, 8);
  std::unique_ptr<InProcessTpRunner> two = TpOrDie(*weights, 2);
  const Generation tp = Greedy(*two, prompt, 8);
  EXPECT_EQ(tp.tokens, single.tokens);
  ExpectLogitsClose(single, tp);
  EXPECT_EQ(two->rank(0).weights().hidden_dim, 512);
}

TEST(TpRunnerTest, RefusesASplitThatCutsQuantizedBlocks) {
  // head_dim 64: a rank's 2 heads are 128 columns, half a q4_K block of attn_output.
  std::unique_ptr<ModelWeights> weights = QuantizedModel(0, "tp_q4k_cut.gguf");
  InProcessTpOptions o;
  o.tp_size = 2;
  o.runner = RunnerOptions();
  absl::StatusOr<std::unique_ptr<InProcessTpRunner>> r = InProcessTpRunner::Create(*weights, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("blk.0.attn_output is q4_K"));
  EXPECT_THAT(r.status().message(), HasSubstr("would cut its 256-value blocks"));
}

}  // namespace
}  // namespace folio::worker
