// The CUDA runner against the CPU runner: logits of a prefill chunk and decode steps on a
// random model and stories260K (f32, f16 and bf16 compute), with copy-on-write in
// between; the golden stories260K text on the GPU; the memory sizing; refusals.
// Device tests skip where the machine has no CUDA device; the no-device path is tested
// there instead.
#include "services/worker/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/worker/cuda/gpu_test_util.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker::cuda {
namespace {

namespace wt = ::folio::worker::testing;

using testing::SmallRunnerOptions;

std::unique_ptr<CpuModelRunner> CpuRunner(const ModelWeights& w) {
  CpuModelRunnerOptions o;
  o.block_size = 16;
  o.kv_dtype = kernels::KvDType::kF16;
  o.kv_cache_bytes = 16 << 20;
  o.num_threads = 2;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

// A scripted run: two sequences prefill (one in two chunks), then decode steps in which
// sequence 2 is forked into 3 by a block copy of its partial last block. Returns every
// logits vector produced, in order.
std::vector<std::vector<float>> Script(ModelRunner& runner, int vocab) {
  std::vector<std::vector<float>> all;
  auto prompt = [vocab](int n, int salt) {
    std::vector<int32_t> ids = {1};
    for (int i = 1; i < n; ++i) ids.push_back(3 + (i * 31 + salt * 7) % (vocab - 3));
    return ids;
  };
  const std::vector<int32_t> p1 = prompt(37, 1), p2 = prompt(21, 2);
  const std::vector<int32_t> t1 = wt::ScatteredBlocks(8, 21);  // blocks 0..7 shuffled
  std::vector<int32_t> t2 = {9, 12, 10, 15};
  std::vector<int32_t> t3 = {9, 13, 11, 14};  // shares block 9 with seq 2, copies its block 12
  auto run = [&](StepInput step) {
    for (SequenceStep& s : step.seqs) s.return_logits = s.num_samples > 0;
    absl::StatusOr<StepOutput> out = runner.Execute(step);
    CHECK(out.ok()) << out.status();
    for (const SequenceOutput& o : out->seqs) {
      if (!o.logits.empty()) all.push_back(o.logits);
    }
    return *out;
  };
  auto seq = [](uint64_t id, std::vector<int32_t> tokens, int start, std::vector<int32_t> table,
                int samples) {
    SequenceStep s;
    s.seq_id = id;
    s.token_ids = std::move(tokens);
    s.start_pos = start;
    s.block_table = std::move(table);
    s.num_samples = samples;
    s.sampling.temperature = 0.0f;
    return s;
  };
  StepInput a;  // seq 1's first chunk with seq 2's whole prompt
  a.seqs = {seq(1, {p1.begin(), p1.begin() + 20}, 0, t1, 0), seq(2, p2, 0, t2, 1)};
  run(a);
  StepInput b;
  b.seqs = {seq(1, {p1.begin() + 20, p1.end()}, 20, t1, 1)};
  run(b);
  // Decode: seq 3 forks from seq 2 at position 21 (block 12 holds positions 16..20).
  StepInput c;
  c.block_copies = {{12, 13}};
  c.seqs = {seq(1, {5}, 37, t1, 1), seq(2, {6}, 21, t2, 1), seq(3, {7}, 21, t3, 1)};
  run(c);
  for (int i = 0; i < 6; ++i) {
    StepInput d;
    d.seqs = {seq(1, {8 + i}, 38 + i, t1, 1), seq(2, {9 + i}, 22 + i, t2, 1),
              seq(3, {10 + i}, 22 + i, t3, 1)};
    run(d);
  }
  return all;
}

// Largest |gpu - cpu| over all logits, relative to the largest |cpu| logit.
float RelativeError(const std::vector<std::vector<float>>& gpu,
                    const std::vector<std::vector<float>>& cpu) {
  EXPECT_EQ(gpu.size(), cpu.size());
  float worst = 0, scale = 1e-6f;
  for (size_t i = 0; i < gpu.size() && i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].size(), cpu[i].size());
    for (size_t j = 0; j < gpu[i].size() && j < cpu[i].size(); ++j) {
      worst = std::max(worst, std::abs(gpu[i][j] - cpu[i][j]));
      scale = std::max(scale, std::abs(cpu[i][j]));
    }
  }
  return worst / scale;
}

struct LogitsCase {
  std::string model;  // "random", "stories260K" or "bench"
  DType compute;
  float tolerance;    // relative to the largest logit
};

class CudaVsCpuTest : public ::testing::TestWithParam<LogitsCase> {};

TEST_P(CudaVsCpuTest, LogitsMatchCpuRunner) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const LogitsCase& c = GetParam();
  std::unique_ptr<ModelWeights> weights;
  if (c.model == "random") {
    weights = wt::RandomModelOrDie(/*seed=*/11);
  } else {
    const std::optional<std::string> dir = wt::ModelsDir();
    if (!dir) GTEST_SKIP() << wt::kModelsDirHelp;
    weights = wt::LoadOrDie(*dir + (c.model == "bench" ? "/bench-28m-f16.gguf"
                                                        : "/stories260K/stories260K.bin"));
  }
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> gpu =
      CudaModelRunner::Create(*weights, SmallRunnerOptions(c.compute));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int vocab = weights->config.vocab_size;
  const auto cpu_logits = Script(*CpuRunner(*weights), vocab);
  const auto gpu_logits = Script(**gpu, vocab);
  ASSERT_EQ(gpu_logits.size(), 23u);
  const float err = RelativeError(gpu_logits, cpu_logits);
  EXPECT_LE(err, c.tolerance);
  std::printf("[ %s %s ] max |gpu - cpu| / max |cpu| = %.3g\n", c.model.c_str(),
              DTypeName(c.compute), err);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaVsCpuTest,
    ::testing::Values(LogitsCase{"random", DType::kF32, 1e-4f},
                      LogitsCase{"random", DType::kF16, 1e-2f},
                      LogitsCase{"random", DType::kBF16, 3e-2f},
                      LogitsCase{"stories260K", DType::kF32, 1e-4f},
                      LogitsCase{"stories260K", DType::kF16, 1e-2f},
                      LogitsCase{"bench", DType::kF16, 2e-2f},
                      LogitsCase{"bench", DType::kBF16, 5e-2f}),
    [](const auto& info) {
      return info.param.model + "_" + DTypeName(info.param.compute);
    });

// stories260K greedy from BOS for 200 steps prints exactly llama2.c's output (f32 weights
// on the device, f16 KV cache, as the CPU golden test).
TEST(CudaGoldenTest, GreedyFromBosMatchesLlama2c) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const std::optional<std::string> dir = wt::ModelsDir();
  if (!dir) GTEST_SKIP() << wt::kModelsDirHelp;
  const std::string expected =
      wt::ReadFileOrEmpty(*dir + "/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_FALSE(expected.empty());
  std::unique_ptr<ModelWeights> weights = wt::LoadOrDie(*dir + "/stories260K/stories260K.bin");
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> runner =
      CudaModelRunner::Create(*weights, SmallRunnerOptions(DType::kF32));
  ASSERT_TRUE(runner.ok()) << runner.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(weights->vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> ids =
      wt::GreedyFromBos(**runner, tokenizer->bos_id(), /*steps=*/200, /*table_seed=*/3);
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text + "\n", expected);
}

// Greedy sequences with nothing else to return are answered by the device's argmax; the
// same sequence asking for its logits goes through the host sampler. Both must agree on
// the token and its log-prob, and the host path must agree with the logits it returns.
TEST(CudaModelRunnerTest, GreedyOnDeviceMatchesHostSampler) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<ModelWeights> weights = wt::RandomModelOrDie(/*seed=*/5);
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> r =
      CudaModelRunner::Create(*weights, SmallRunnerOptions(DType::kF32));
  ASSERT_TRUE(r.ok()) << r.status();
  for (int round = 0; round < 5; ++round) {
    StepInput step;
    for (int i = 0; i < 2; ++i) {
      SequenceStep s;
      s.seq_id = 100 * round + i;
      s.token_ids = {1, 7 + round, 40, 3 * round + 9};
      s.block_table = {2 * round + i};
      s.sampling.temperature = 0.0f;
      s.num_samples = 2;
      s.return_logits = i == 1;
      step.seqs.push_back(s);
    }
    absl::StatusOr<StepOutput> out = (*r)->Execute(step);
    ASSERT_TRUE(out.ok()) << out.status();
    const SequenceOutput& device = out->seqs[0];
    const SequenceOutput& host = out->seqs[1];
    ASSERT_EQ(device.samples.size(), 2u);
    ASSERT_EQ(host.samples.size(), 2u);
    EXPECT_EQ(device.samples[0].token_id, host.samples[0].token_id);
    EXPECT_EQ(device.samples[1].token_id, host.samples[0].token_id);
    EXPECT_NEAR(device.samples[0].logprob, host.samples[0].logprob, 1e-5);
    const auto best = std::max_element(host.logits.begin(), host.logits.end());
    EXPECT_EQ(host.samples[0].token_id, best - host.logits.begin());
  }
}

TEST(CudaModelRunnerTest, KvPoolTakesTheConfiguredShareOfDeviceMemory) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<ModelWeights> weights = wt::RandomModelOrDie(/*seed=*/11);
  CudaModelRunnerOptions o = SmallRunnerOptions(DType::kF16);
  o.kv_cache_bytes = 0;
  o.gpu_memory_utilization = 0.05;
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> r = CudaModelRunner::Create(*weights, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const CudaMemoryReport& m = (*r)->memory();
  const int64_t budget = static_cast<int64_t>(0.05 * m.total_bytes) - m.in_use_after_profile;
  const int64_t block_bytes = m.kv_cache_bytes / m.num_blocks;
  EXPECT_GT(m.num_blocks, 0);
  EXPECT_EQ(m.num_blocks, budget / block_bytes);
  EXPECT_EQ((*r)->num_blocks(), m.num_blocks);
  EXPECT_GT(m.weight_bytes, 0);
  EXPECT_GT(m.activation_bytes, 0);
  std::printf("[ memory ] %s: %lld bytes, in use after profile %lld, KV %lld blocks\n",
              m.device_name.c_str(), static_cast<long long>(m.total_bytes),
              static_cast<long long>(m.in_use_after_profile), static_cast<long long>(m.num_blocks));
}

TEST(CudaModelRunnerTest, RefusesBadAndOversizedSteps) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  std::unique_ptr<ModelWeights> weights = wt::RandomModelOrDie(/*seed=*/11);
  absl::StatusOr<std::unique_ptr<CudaModelRunner>> r =
      CudaModelRunner::Create(*weights, SmallRunnerOptions(DType::kF16));
  ASSERT_TRUE(r.ok()) << r.status();
  StepInput bad;
  SequenceStep s;
  s.seq_id = 1;
  s.token_ids = {1, 2};
  s.block_table = {static_cast<int32_t>((*r)->num_blocks())};  // outside the pool
  bad.seqs = {s};
  EXPECT_EQ((*r)->Execute(bad).status().code(), absl::StatusCode::kInvalidArgument);
  StepInput big;  // 3 x 100 tokens: more than max_num_batched_tokens = 256
  for (int i = 0; i < 3; ++i) {
    s.seq_id = 10 + i;
    s.token_ids.assign(100, 1);
    s.block_table = {7 * i, 7 * i + 1, 7 * i + 2, 7 * i + 3, 7 * i + 4, 7 * i + 5, 7 * i + 6};
    big.seqs.push_back(s);
  }
  const absl::Status st = (*r)->Execute(big).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sized for"), std::string::npos) << st;
  // The runner still works after refusals.
  s.token_ids = {1, 5, 9};
  s.block_table = {0};
  StepInput ok;
  ok.seqs = {s};
  EXPECT_TRUE((*r)->Execute(ok).ok());
}

TEST(CudaModelRunnerTest, UnsupportedHeadSizeIsRefusedBeforeTouchingTheDevice) {
  std::unique_ptr<ModelWeights> weights = wt::RandomModelOrDie(/*seed=*/11);
  ModelConfig config = weights->config;
  config.num_heads = 2;
  config.num_kv_heads = 2;
  config.head_dim = 32;  // no compiled kernel
  const absl::StatusOr<std::unique_ptr<CudaModelRunner>> r =
      CudaModelRunner::CreateRandom(config, 1, SmallRunnerOptions(DType::kF16));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("head size 32"), std::string::npos) << r.status();
}

// On a machine without a device, creating a runner fails clearly rather than crashing.
TEST(CudaModelRunnerTest, NoDeviceIsAClearFailedPrecondition) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "this machine has a CUDA device";
  std::unique_ptr<ModelWeights> weights = wt::RandomModelOrDie(/*seed=*/11);
  const absl::StatusOr<std::unique_ptr<CudaModelRunner>> r =
      CudaModelRunner::Create(*weights, SmallRunnerOptions(DType::kF16));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("no CUDA device"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace folio::worker::cuda
