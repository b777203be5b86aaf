// The scheduler over the real cache manager and the real CPU model, in process.
#include "services/scheduler/scheduler.h"


#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/local_clients.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::scheduler {
namespace {

using ::testing::HasSubstr;

// Collects one request's stream.
struct Stream {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  absl::Status error;
  int events_after_finish = 0;
  int32_t cached_prompt_tokens = 0;
  EventSink Sink() {
    return [this](const RequestEvent& e) {
      if (finish != FinishReason::kNone) ++events_after_finish;
      for (const GeneratedToken& t : e.tokens) tokens.push_back(t.token_id);
      if (e.finish != FinishReason::kNone) {
        finish = e.finish;
        error = e.error;
      }
      if (!e.tokens.empty()) cached_prompt_tokens = e.num_cached_prompt_tokens;
    };
  }
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = worker::testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << worker::testing::kModelsDirHelp;
    weights_ = worker::testing::LoadOrDie(*dir_ + "/stories260K/stories260K.gguf");
    tokenizer_ = std::make_unique<Tokenizer>(*Tokenizer::Create(weights_->vocab));
    const std::string expected =
        ReadFileOrEmpty(*dir_ + "/stories260K/expected_run_c_t0_n200.txt");
    golden_ = expected.substr(0, expected.size() - 1);  // the runner ends with a newline
  }

  void Make(int32_t num_blocks, int32_t block_size, SchedulerOptions options = {},
            cachemgr::PolicyKind policy = cachemgr::PolicyKind::kPaged) {
    worker::CpuModelRunnerOptions ro;
    ro.block_size = block_size;
    ro.kv_cache_bytes = int64_t{64} << 20;
    ro.max_num_blocks = num_blocks;
    ro.num_threads = 2;
    runner_ = *worker::CpuModelRunner::Create(*weights_, ro);
    ASSERT_EQ(runner_->num_blocks(), num_blocks);
    manager_ = *cachemgr::KvCacheManager::Create(
        cachemgr::CacheConfig{.policy = policy, .num_blocks = num_blocks, .block_size = block_size});
    cache_client_ = std::make_unique<LocalCacheClient>(manager_.get());
    worker_client_ = std::make_unique<LocalWorkerClient>(runner_.get());
    options.block_size = block_size;
    options.max_model_len = weights_->config.max_seq_len;
    options.vocab_size = weights_->config.vocab_size;
    options.eos_id = weights_->vocab.eos_id;
    scheduler_ = std::make_unique<Scheduler>(options, cache_client_.get(), worker_client_.get(),
                                             &registry_);
  }

  RequestSpec Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
    RequestSpec spec;
    spec.request_id = "r" + std::to_string(++next_id_);
    spec.prompt = std::move(prompt);
    spec.sampling.temperature = 0.0f;
    spec.max_tokens = max_tokens;
    return spec;
  }

  void RunUntilIdle(int max_iterations = 100000) {
    for (int i = 0; i < max_iterations && scheduler_->RunOnce(); ++i) {
      ASSERT_TRUE(manager_->CheckInvariants().ok()) << manager_->CheckInvariants();
    }
  }

  std::string Text(const std::vector<int32_t>& generated) {
    std::vector<int32_t> ids = {tokenizer_->bos_id()};
    ids.insert(ids.end(), generated.begin(), generated.end());
    return *tokenizer_->Decode(ids);
  }

  void ExpectPoolFull() {
    EXPECT_EQ(manager_->Stats().num_sequences, 0);
    EXPECT_EQ(manager_->Stats().pool.num_blocks_free, manager_->Stats().pool.num_blocks_total);
  }

  std::optional<std::string> dir_;
  std::unique_ptr<worker::ModelWeights> weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string golden_;
  MetricsRegistry registry_;
  std::unique_ptr<worker::CpuModelRunner> runner_;
  std::unique_ptr<cachemgr::KvCacheManager> manager_;
  std::unique_ptr<LocalCacheClient> cache_client_;
  std::unique_ptr<LocalWorkerClient> worker_client_;
  std::unique_ptr<Scheduler> scheduler_;
  int next_id_ = 0;
};

class BlockSizeTest : public SchedulerTest, public ::testing::WithParamInterface<int32_t> {};

TEST_P(BlockSizeTest, GreedyFromBosIsTheGoldenText) {
  Make(256, GetParam());
  Stream s;
  ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 200), s.Sink()).ok());
  RunUntilIdle();
  EXPECT_EQ(s.finish, FinishReason::kLength);
  EXPECT_EQ(s.tokens.size(), 200u);
  EXPECT_EQ(Text(s.tokens), golden_);
  EXPECT_EQ(s.events_after_finish, 0);
  ExpectPoolFull();
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, BlockSizeTest, ::testing::Values(8, 16, 32));

TEST_F(SchedulerTest, BatchedRequestsAllMatchTheGoldenText) {
  Make(256, 16, SchedulerOptions{.max_num_batched_tokens = 64});
  std::vector<Stream> streams(6);
  for (Stream& s : streams) {
    ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 200), s.Sink()).ok());
  }
  RunUntilIdle();
  for (const Stream& s : streams) EXPECT_EQ(Text(s.tokens), golden_);
  ExpectPoolFull();
}

TEST_F(SchedulerTest, PreemptionUnderMemoryPressureKeepsStreamsExact) {
  // Each request needs 13 blocks of 16 for 201 tokens; 30 blocks hold two at a time.
  Make(30, 16);
  std::vector<Stream> streams(5);
  for (Stream& s : streams) {
    ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 200), s.Sink()).ok());
  }
  RunUntilIdle();
  for (const Stream& s : streams) {
    EXPECT_EQ(s.finish, FinishReason::kLength);
    EXPECT_EQ(Text(s.tokens), golden_) << "a preempted stream repeated or lost a token";
  }
  EXPECT_GT(scheduler_->Stats().num_preemptions, 0);
  ExpectPoolFull();
}

TEST_F(SchedulerTest, ChunkedPrefillAndPrefixCacheHits) {
  Make(128, 16, SchedulerOptions{.max_num_batched_tokens = 24});
  // A long prompt: the golden text's first 120 tokens.
  Stream first;
  ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 120), first.Sink()).ok());
  RunUntilIdle();
  std::vector<int32_t> prompt = {tokenizer_->bos_id()};
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());

  Stream a, b;
  ASSERT_TRUE(scheduler_->Submit(Greedy(prompt, 80), a.Sink()).ok());
  RunUntilIdle();
  ASSERT_TRUE(scheduler_->Submit(Greedy(prompt, 80), b.Sink()).ok());
  RunUntilIdle();
  std::vector<int32_t> all = first.tokens;
  all.insert(all.end(), a.tokens.begin(), a.tokens.end());
  EXPECT_EQ(Text(all), golden_) << "chunked prefill continues the golden text";
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GE(b.cached_prompt_tokens, 112) << "the second request reuses the cached prefix";
  EXPECT_GT(scheduler_->Stats().prefix_cache_hit_tokens, 0);
  ExpectPoolFull();
}

// Contiguous reservations over 64 blocks of 16 (1,024 slots): a 10-token request reserves
// one block when it reserves what it asks for, and max_model_len (512 tokens, 32 blocks)
// when it reserves the most it could ever need, so only two run at once.
class ReservationTest : public SchedulerTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ReservationTest, ContiguousReservesRequestOrMaxModelLen) {
  const bool reserve_max = GetParam();
  Make(64, 16, SchedulerOptions{.reserve_max_model_len = reserve_max},
       cachemgr::PolicyKind::kContiguous);
  std::vector<Stream> streams(3);
  for (Stream& s : streams) {
    ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 9), s.Sink()).ok());
  }
  scheduler_->RunOnce();
  EXPECT_EQ(manager_->Stats().num_sequences, reserve_max ? 2 : 3);
  EXPECT_EQ(manager_->Stats().pool.num_blocks_used, reserve_max ? 64 : 3);
  RunUntilIdle();
  for (const Stream& s : streams) {
    EXPECT_EQ(s.finish, FinishReason::kLength);
    EXPECT_EQ(Text(s.tokens), golden_.substr(0, Text(s.tokens).size()));
    EXPECT_EQ(s.tokens.size(), 9u);
  }
  ExpectPoolFull();
}

INSTANTIATE_TEST_SUITE_P(RequestOrMax, ReservationTest, ::testing::Bool());

TEST_F(SchedulerTest, CancelFreesEverything) {
  Make(64, 16);
  Stream s, t;
  auto handle = scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 200), s.Sink());
  ASSERT_TRUE(handle.ok());
  auto waiting = scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 200), t.Sink());
  ASSERT_TRUE(waiting.ok());
  for (int i = 0; i < 10; ++i) scheduler_->RunOnce();
  EXPECT_GT(manager_->Stats().pool.num_blocks_used, 0);
  scheduler_->Cancel(*handle);
  scheduler_->Cancel(*waiting);
  RunUntilIdle();
  EXPECT_EQ(s.finish, FinishReason::kCancelled);
  EXPECT_EQ(t.finish, FinishReason::kCancelled);
  EXPECT_GE(s.tokens.size(), 5u);
  ExpectPoolFull();
}

TEST_F(SchedulerTest, StopTokenIdsAndEos) {
  Make(64, 16);
  Stream golden;
  ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 30), golden.Sink()).ok());
  RunUntilIdle();
  RequestSpec spec = Greedy({tokenizer_->bos_id()}, 30);
  spec.stop_token_ids = {golden.tokens[9]};
  Stream s;
  ASSERT_TRUE(scheduler_->Submit(spec, s.Sink()).ok());
  RunUntilIdle();
  EXPECT_EQ(s.finish, FinishReason::kStop);
  const auto first = std::find(golden.tokens.begin(), golden.tokens.end(), golden.tokens[9]);
  EXPECT_EQ(s.tokens, std::vector<int32_t>(golden.tokens.begin(), first + 1));
  ExpectPoolFull();
}

TEST_F(SchedulerTest, AnyEndOfGenerationIdStops) {
  // Every seventh id ends generation, as <|eot_id|> or <|im_end|> would.
  SchedulerOptions options;
  for (int32_t id = 3; id < weights_->config.vocab_size; id += 7) options.eog_ids.push_back(id);
  Make(64, 16, options);
  RequestSpec ignore = Greedy({tokenizer_->bos_id()}, 30);
  ignore.ignore_eos = true;
  Stream all;
  ASSERT_TRUE(scheduler_->Submit(ignore, all.Sink()).ok());
  RunUntilIdle();
  ASSERT_EQ(all.tokens.size(), 30u);  // ignore_eos runs past them
  const auto first = std::find_if(all.tokens.begin(), all.tokens.end(),
                                  [](int32_t t) { return t % 7 == 3; });
  ASSERT_NE(first, all.tokens.end()) << "no end-of-generation id in 30 tokens";
  Stream s;
  ASSERT_TRUE(scheduler_->Submit(Greedy({tokenizer_->bos_id()}, 30), s.Sink()).ok());
  RunUntilIdle();
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.tokens, std::vector<int32_t>(all.tokens.begin(), first + 1));
  ExpectPoolFull();
}

TEST_F(SchedulerTest, BadRequestsAreRejectedAtSubmit) {
  Make(64, 16, SchedulerOptions{.max_waiting_requests = 2});
  Stream s;
  auto empty = scheduler_->Submit(Greedy({}, 5), s.Sink());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto vocab = scheduler_->Submit(Greedy({1, 512}, 5), s.Sink());
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(vocab.status().message(), HasSubstr("outside the vocabulary"));
  auto long_request = scheduler_->Submit(Greedy({1}, 600), s.Sink());
  EXPECT_EQ(long_request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_request.status().message(), HasSubstr("context of 512"));
  auto zero = scheduler_->Submit(Greedy({1}, 0), s.Sink());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);

  Stream a, b, c;
  ASSERT_TRUE(scheduler_->Submit(Greedy({1}, 5), a.Sink()).ok());
  ASSERT_TRUE(scheduler_->Submit(Greedy({1}, 5), b.Sink()).ok());
  auto full = scheduler_->Submit(Greedy({1}, 5), c.Sink());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  RunUntilIdle();
  EXPECT_EQ(a.finish, FinishReason::kLength);
  ExpectPoolFull();
}

TEST_F(SchedulerTest, RunLoopServesFromAnotherThread) {
  Make(64, 16);
  std::thread loop([this] { scheduler_->Run(); });
  absl::Mutex mu;
  bool done = false;
  std::vector<int32_t> tokens;
  ASSERT_TRUE(scheduler_
                  ->Submit(Greedy({tokenizer_->bos_id()}, 50),
                           [&](const RequestEvent& e) {
                             absl::MutexLock lock(&mu);
                             for (const auto& t : e.tokens) tokens.push_back(t.token_id);
                             if (e.finish != FinishReason::kNone) done = true;
                           })
                  .ok());
  {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
    EXPECT_TRUE(done);
    EXPECT_EQ(tokens.size(), 50u);
  }
  scheduler_->Stop();
  loop.join();
}

}  // namespace
}  // namespace folio::scheduler
