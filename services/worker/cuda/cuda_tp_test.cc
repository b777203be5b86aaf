// Tensor parallelism on the CUDA runner: two ranks of stories260K and of the bench model
// on one device, each a CudaModelRunner holding its shard, joined by Gloo behind
// HostStagedCommunicator (NCCL refuses two ranks on one GPU; on separate GPUs the same
// runner takes an NcclCommunicator). TP=2 must give TP=1's logits within rounding and the
// golden stories260K text. Skips without a CUDA device.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/worker/cuda/cuda_model_runner.h"
#include "services/worker/cuda/gpu_test_util.h"
#include "services/worker/cuda/host_staged_communicator.h"
#include "services/worker/dist/gloo_communicator.h"
#include "services/worker/dist/kv_store.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker::cuda {
namespace {

namespace wt = ::folio::worker::testing;

using testing::SmallRunnerOptions;

// The ranks of one replica on one device, driven as one ModelRunner: Execute runs the step
// on every rank at once (collectives pair up across them) and answers with rank 0's output.
class CudaTpGroup final : public ModelRunner {
 public:
  static absl::StatusOr<std::unique_ptr<CudaTpGroup>> Create(const ModelWeights& weights,
                                                             int32_t tp, DType compute) {
    std::unique_ptr<CudaTpGroup> g(new CudaTpGroup());
    g->gloo_.resize(tp);
    g->runners_.resize(tp);
    std::vector<absl::Status> status(tp);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < tp; ++r) {
      threads.emplace_back([&, r] {
        LocalGlooStore store(&g->store_, absl::Seconds(60));
        GlooCommunicatorOptions co;
        co.rank = r;
        co.world_size = tp;
        absl::StatusOr<std::unique_ptr<GlooCommunicator>> gloo = GlooCommunicator::Create(co, store);
        if (!gloo.ok()) {
          status[r] = gloo.status();
          return;
        }
        g->gloo_[r] = *std::move(gloo);
        CudaModelRunnerOptions o = SmallRunnerOptions(compute);
        o.shard = {.rank = r, .size = tp};
        Communicator* host = g->gloo_[r].get();
        o.make_communicator = [host](cudaStream_t stream)
            -> absl::StatusOr<std::unique_ptr<Communicator>> {
          return std::make_unique<HostStagedCommunicator>(host, stream);
        };
        absl::StatusOr<std::unique_ptr<CudaModelRunner>> runner = CudaModelRunner::Create(weights, o);
        if (!runner.ok()) {
          status[r] = runner.status();
          return;
        }
        g->runners_[r] = *std::move(runner);
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : status) {
      if (!s.ok()) return s;
    }
    return g;
  }

  absl::StatusOr<StepOutput> Execute(const StepInput& step) override {
    const int32_t n = static_cast<int32_t>(runners_.size());
    std::vector<absl::StatusOr<StepOutput>> outs(n, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int32_t r = 1; r < n; ++r) {
      threads.emplace_back([&, r] { outs[r] = runners_[r]->Execute(step); });
    }
    outs[0] = runners_[0]->Execute(step);
    for (std::thread& t : threads) t.join();
    for (int32_t r = 1; r < n; ++r) {
      if (!outs[r].ok()) return outs[r].status();
      for (const SequenceOutput& o : outs[r]->seqs) {
        if (!o.samples.empty() || !o.logits.empty()) {
          return absl::InternalError("a rank other than 0 sampled");
        }
      }
    }
    return outs[0];
  }

  const ModelConfig& config() const override { return runners_[0]->config(); }
  int32_t block_size() const override { return runners_[0]->block_size(); }
  int64_t num_blocks() const override { return runners_[0]->num_blocks(); }
  const CudaModelRunner& rank(int32_t r) const { return *runners_[r]; }
  const Communicator& communicator(int32_t r) const { return *gloo_[r]; }

 private:
  CudaTpGroup() = default;
  KvStore store_;
  std::vector<std::unique_ptr<GlooCommunicator>> gloo_;
  std::vector<std::unique_ptr<CudaModelRunner>> runners_;
};

// Two sequences prefill together, then decode 8 steps greedily; every logits row, in order.
std::vector<std::vector<float>> PrefillThenDecode(ModelRunner& runner) {
  const int vocab = runner.config().vocab_size;
  std::vector<SequenceStep> seqs(2);
  for (int s = 0; s < 2; ++s) {
    seqs[s].seq_id = static_cast<uint64_t>(s + 1);
    seqs[s].token_ids = {1};
    for (int i = 1; i < 29 + 11 * s; ++i) seqs[s].token_ids.push_back(3 + (i * 37 + s * 5) % (vocab - 3));
    seqs[s].block_table = s == 0 ? std::vector<int32_t>{7, 2, 5, 0} : std::vector<int32_t>{3, 6, 1, 4};
    seqs[s].num_samples = 1;
    seqs[s].return_logits = true;
    seqs[s].sampling.temperature = 0.0f;
  }
  std::vector<std::vector<float>> all;
  for (int step = 0; step < 9; ++step) {
    StepInput in;
    in.seqs = seqs;
    absl::StatusOr<StepOutput> out = runner.Execute(in);
    CHECK(out.ok()) << out.status();
    for (int s = 0; s < 2; ++s) {
      const SequenceOutput& o = out->seqs[s];
      CHECK_EQ(o.samples.size(), 1u);
      all.push_back(o.logits);
      seqs[s].start_pos += static_cast<int32_t>(seqs[s].token_ids.size());
      seqs[s].token_ids = {o.samples[0].token_id};
    }
  }
  return all;
}

struct TpCase {
  std::string model;  // "stories260K" or "bench"
  DType compute;
  float tolerance;    // largest |tp2 - tp1| relative to the largest |tp1| logit
};

class CudaTpTest : public ::testing::TestWithParam<TpCase> {};

TEST_P(CudaTpTest, TwoRanksGiveTheLogitsOfOne) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const TpCase& c = GetParam();
  const std::optional<std::string> dir = wt::ModelsDir();
  if (!dir) GTEST_SKIP() << wt::kModelsDirHelp;
  std::unique_ptr<ModelWeights> weights = wt::LoadOrDie(
      *dir + (c.model == "bench" ? "/bench-28m-f16.gguf" : "/stories260K/stories260K.bin"));
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> one = CudaModelRunner::Create(*weights, SmallRunnerOptions(c.compute));
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<std::unique_ptr<CudaTpGroup>> two = CudaTpGroup::Create(*weights, 2, c.compute);
  ASSERT_TRUE(two.ok()) << two.status();

  // Each rank holds half the layers' weights and half the KV heads.
  const CudaMemoryReport& whole = (*one)->memory();
  for (int r = 0; r < 2; ++r) {
    const CudaMemoryReport& part = (*two)->rank(r).memory();
    EXPECT_NEAR(static_cast<double>(part.layer_weight_bytes) / whole.layer_weight_bytes, 0.5, 0.02);
    EXPECT_EQ(part.kv_cache_bytes, whole.kv_cache_bytes);
    EXPECT_EQ(part.num_blocks, 2 * whole.num_blocks) << "half the heads: twice the blocks";
  }

  const auto expected = PrefillThenDecode(**one);
  const auto got = PrefillThenDecode(**two);
  ASSERT_EQ(got.size(), expected.size());
  float worst = 0, scale = 1e-6f;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), expected[i].size());
    for (size_t j = 0; j < got[i].size(); ++j) {
      worst = std::max(worst, std::abs(got[i][j] - expected[i][j]));
      scale = std::max(scale, std::abs(expected[i][j]));
    }
  }
  EXPECT_LE(worst / scale, c.tolerance);
  // Per step: one all-reduce after the embedding and two per layer; one logits gather.
  const CollectiveCounts counts = (*two)->communicator(1).counts();
  const int64_t steps = 9 + 1;  // the script's steps and the profiling step at Create
  EXPECT_EQ(counts.all_reduces, steps * (1 + 2 * weights->config.num_layers));
  EXPECT_EQ(counts.gathers, steps);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTpTest,
                         ::testing::Values(TpCase{"stories260K", DType::kF32, 1e-4f},
                                           TpCase{"bench", DType::kF16, 2e-2f}),
                         [](const auto& info) {
                           return info.param.model + "_" + DTypeName(info.param.compute);
                         });

TEST(CudaTpGoldenTest, TwoRanksPrintTheGoldenText) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const std::optional<std::string> dir = wt::ModelsDir();
  if (!dir) GTEST_SKIP() << wt::kModelsDirHelp;
  const std::string expected = wt::ReadFileOrEmpty(*dir + "/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_FALSE(expected.empty());
  std::unique_ptr<ModelWeights> weights = wt::LoadOrDie(*dir + "/stories260K/stories260K.bin");
  absl::StatusOr<std::unique_ptr<CudaTpGroup>> group = CudaTpGroup::Create(*weights, 2, DType::kF32);
  ASSERT_TRUE(group.ok()) << group.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(weights->vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> ids =
      wt::GreedyFromBos(**group, tokenizer->bos_id(), /*steps=*/200, /*table_seed=*/5);
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text + "\n", expected);
}

// Checked before the device is touched: runs everywhere.
TEST(CudaTpTest, ARankWithoutACommunicatorIsRefused) {
  std::unique_ptr<ModelWeights> weights = wt::RandomModelOrDie(/*seed=*/3);
  CudaModelRunnerOptions o = SmallRunnerOptions(DType::kF32);
  o.shard = {.rank = 0, .size = 2};
  const absl::Status s = CudaModelRunner::Create(*weights, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace folio::worker::cuda
