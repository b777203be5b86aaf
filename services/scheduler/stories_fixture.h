// The scheduler test fixture on the real model: the scheduler, the real cache manager and
// the real CPU runner of stories260K (optionally tensor parallel on threads), in process,
// with a worker that records every sampling step. Shared by the scheduler's model-level
// tests (penalties_test, structured_output_test, async_steps_test, speculative_test).
// Test-only; thread-compatible.
#ifndef FOLIO_SERVICES_SCHEDULER_STORIES_FIXTURE_H_
#define FOLIO_SERVICES_SCHEDULER_STORIES_FIXTURE_H_

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "common/kv_block_file.h"
#include "services/cachemgr/disk_tier.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/local_clients.h"
#include "services/scheduler/scheduler.h"
#include "services/worker/dist/in_process_tp_runner.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/drafting_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::scheduler::stories {

struct Choices {
  std::map<int32_t, std::vector<int32_t>> tokens;
  std::map<int32_t, FinishReason> finish;
  bool done = false;
  int32_t cached_prompt_tokens = 0;
  EventSink Sink() {
    return [this](const RequestEvent& e) {
      for (const GeneratedToken& t : e.tokens) tokens[e.index].push_back(t.token_id);
      if (e.finish != FinishReason::kNone) finish[e.index] = e.finish;
      if (!e.tokens.empty()) cached_prompt_tokens = e.num_cached_prompt_tokens;
      done |= e.request_done;
    };
  }
};

// Passes steps to a runner and keeps every sequence step that sampled.
class RecordingWorker final : public WorkerClient {
 public:
  explicit RecordingWorker(worker::ModelRunner* runner) : runner_(runner) {}
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>&) override {
    for (const worker::SequenceStep& s : step.seqs) {
      if (s.num_samples > 0) sampled.push_back(s);
    }
    return runner_->Execute(step);
  }
  absl::Status Restore() override { return absl::OkStatus(); }  // an in-process runner stays
  std::vector<worker::SequenceStep> sampled;

 private:
  worker::ModelRunner* runner_;
};

class StoriesSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = worker::testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << worker::testing::kModelsDirHelp;
    weights_ = worker::testing::LoadOrDie(*dir_ + "/stories260K/stories260K.gguf");
  }

  void TearDown() override {
    RestartEverything();
    if (!disk_root_.empty()) std::filesystem::remove_all(disk_root_);
  }

  // Every process of the replica stops and starts again (a full cluster restart): the
  // host tier's segment and index are gone; the disk tier's files stay, and its index is
  // built again from them by the next Make (unless the test set disk_tier_ itself).
  void RestartEverything() {
    scheduler_.reset();
    runner_.reset();
    if (host_ != nullptr) {
      const std::string name = host_->name();
      host_.reset();
      ASSERT_TRUE(worker::HostKvSegment::Unlink(name).ok());
    }
    host_tier_.reset();
    disk_.reset();
    disk_tier_.reset();
  }

  // A fresh scheduler, cache manager and runner (tp_size > 1: ranks on threads). With
  // host_blocks > 0 a host KV tier of that many blocks: its segment (this test's own) is
  // opened again as a restarted worker would, and its index is kept in host_tier_, so
  // the tier outlives the rest as in a cluster. With disk_blocks > 0 (and host_blocks) a
  // disk tier below it too, in a directory of this test's own: the worker's store is
  // opened again by every Make, the cache manager's index (disk_tier_) kept.
  void Make(int32_t num_blocks, int32_t tp_size = 1, SchedulerOptions options = {},
            int32_t host_blocks = 0, int32_t disk_blocks = 0) {
    scheduler_.reset();
    worker::CpuModelRunnerOptions ro;
    ro.block_size = 16;
    ro.kv_cache_bytes = int64_t{64} << 20;
    ro.max_num_blocks = num_blocks;
    ro.num_threads = tp_size > 1 ? 1 : 2;
    if (tp_size > 1) {
      runner_ = *worker::InProcessTpRunner::Create(
          *weights_, worker::InProcessTpOptions{.tp_size = tp_size, .runner = ro});
    } else {
      runner_ = *worker::CpuModelRunner::Create(*weights_, ro);
    }
    if (draft_weights_ != nullptr) {  // the worker's --draft_model, in a pool of its own
      ASSERT_EQ(tp_size, 1) << "a draft model runs on one rank";
      absl::StatusOr<std::unique_ptr<worker::DraftingRunner>> drafting =
          worker::DraftingRunner::Create(std::move(runner_),
                                         *worker::CpuModelRunner::Create(*draft_weights_, ro));
      ASSERT_TRUE(drafting.ok()) << drafting.status();
      runner_ = *std::move(drafting);
    }
    ASSERT_EQ(runner_->num_blocks(), num_blocks);
    if (host_blocks > 0) {
      ASSERT_EQ(tp_size, 1) << "the host tier fixture runs one rank";
      // A slot: the model's KV of a block, and a draft model's after it.
      const int64_t per_block = runner_->host_bytes_per_block();
      host_.reset();
      host_ = *worker::HostKvSegment::Open(
          "folio-test-" + std::to_string(getpid()), worker::HostKvSegment::kHeaderBytes +
          host_blocks * per_block, per_block,
          draft_weights_ == nullptr ? "stories260K" : "stories260K+draft");
      if (host_tier_ == nullptr || host_tier_->id() != host_->id()) {
        host_tier_ = std::make_shared<cachemgr::HostTier>(host_blocks, 16, host_->id());
      } else {
        host_tier_->DropUnconfirmed();  // what the cache manager's Reset does
      }
    }
    if (disk_blocks > 0) {
      ASSERT_GT(host_blocks, 0) << "the disk tier lies below the host tier";
      ASSERT_EQ(draft_weights_, nullptr) << "the disk tier fixture runs no draft model";
      if (disk_root_.empty()) {
        char pattern[] = "/tmp/folio-disk-tier-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        disk_root_ = pattern;
      }
      const int64_t per_block = host_->bytes_per_block();
      disk_.reset();
      absl::StatusOr<std::unique_ptr<worker::KvDiskStore>> disk =
          worker::KvDiskStore::Open(worker::KvDiskStoreOptions{
              .root = disk_root_,
              .budget_bytes = disk_blocks * KvBlockFileBytes(16, per_block),
              .identity = "stories260K",
              .block_size = 16,
              .bytes_per_block = per_block});
      ASSERT_TRUE(disk.ok()) << disk.status();
      disk_ = *std::move(disk);
      ASSERT_EQ(disk_->num_blocks(), disk_blocks);
      if (disk_tier_ == nullptr) {
        absl::StatusOr<std::unique_ptr<cachemgr::DiskTier>> tier =
            cachemgr::DiskTier::Open(disk_->dir(), 1, 16, disk_blocks);
        ASSERT_TRUE(tier.ok()) << tier.status();
        disk_tier_ = *std::move(tier);
      }
      host_tier_->set_disk(disk_tier_);
      ASSERT_TRUE(runner_->SetDiskStore(disk_.get()).ok());
    }
    manager_ = *cachemgr::KvCacheManager::Create(
        cachemgr::CacheConfig{.num_blocks = num_blocks, .block_size = 16},
        host_blocks > 0 ? host_tier_ : nullptr);
    cache_client_ = std::make_unique<LocalCacheClient>(manager_.get());
    if (host_ != nullptr) {
      ASSERT_TRUE(runner_->SetHostSegment(host_.get()).ok());
    }
    worker_ = std::make_unique<RecordingWorker>(runner_.get());
    options.block_size = 16;
    options.max_model_len = weights_->config.max_seq_len;
    options.vocab_size = weights_->config.vocab_size;
    options.eos_id = weights_->vocab.eos_id;
    scheduler_ = std::make_unique<Scheduler>(options, cache_client_.get(), worker_.get(), nullptr);
  }

  std::vector<int32_t> Prompt(int32_t n) {
    std::vector<int32_t> p = {weights_->vocab.bos_id};
    for (int32_t i = 1; i < n; ++i) p.push_back(3 + (i * 37) % 400);
    return p;
  }

  RequestSpec Spec(std::vector<int32_t> prompt, int32_t max_tokens, float temperature = 0.8f) {
    RequestSpec spec;
    spec.request_id = "p" + std::to_string(++next_id_);
    spec.prompt = std::move(prompt);
    spec.sampling.temperature = temperature;
    spec.sampling.seed = 42;
    spec.max_tokens = max_tokens;
    return spec;
  }

  Choices Run(const RequestSpec& spec) {
    Choices c;
    EXPECT_TRUE(scheduler_->Submit(spec, c.Sink()).ok());
    RunUntilIdle();
    EXPECT_TRUE(c.done);
    return c;
  }

  // Submits every request (one_by_one: each run to the end before the next) and runs the
  // loop until idle; every request must end.
  std::vector<Choices> RunAll(const std::vector<RequestSpec>& specs, bool one_by_one = false) {
    std::vector<Choices> out(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_TRUE(scheduler_->Submit(specs[i], out[i].Sink()).ok());
      if (one_by_one) RunUntilIdle();
    }
    RunUntilIdle();
    for (const Choices& c : out) EXPECT_TRUE(c.done);
    return out;
  }

  // The same tokens and finish reasons, request by request and choice by choice.
  static void ExpectSame(const std::vector<Choices>& a, const std::vector<Choices>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
      EXPECT_EQ(a[i].finish, b[i].finish) << "request " << i;
    }
  }

  // No sequence left and every block free again (the prefix cache keeps some, evictable).
  void ExpectPoolFull(int32_t num_blocks) {
    const cachemgr::CacheStats stats = manager_->Stats();
    EXPECT_EQ(stats.num_sequences, 0);
    EXPECT_EQ(stats.pool.num_blocks_free, num_blocks);
    EXPECT_TRUE(manager_->CheckInvariants().ok()) << manager_->CheckInvariants();
  }

  void RunUntilIdle() {
    for (int i = 0; i < 100000 && scheduler_->RunOnce(); ++i) {
      ASSERT_TRUE(manager_->CheckInvariants().ok()) << manager_->CheckInvariants();
    }
  }

  // Structured output: the model's tokenizer and a grammar cache over its vocabulary, for
  // SchedulerOptions::grammars.
  void LoadGrammars() {
    absl::StatusOr<Tokenizer> t = Tokenizer::Create(weights_->vocab);
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::make_unique<Tokenizer>(*std::move(t));
    grammars_ = std::make_shared<structured::GrammarCache>(
        structured::TokenVocabulary::FromTokenizer(*tokenizer_), 8);
  }

  std::optional<std::string> dir_;
  std::unique_ptr<Tokenizer> tokenizer_;                   // LoadGrammars
  std::shared_ptr<structured::GrammarCache> grammars_;     // LoadGrammars
  std::unique_ptr<worker::ModelWeights> weights_;
  // Non-null: Make gives the runner this draft model (worker::DraftingRunner).
  const worker::ModelWeights* draft_weights_ = nullptr;
  std::unique_ptr<worker::ModelRunner> runner_;
  std::unique_ptr<cachemgr::KvCacheManager> manager_;
  std::unique_ptr<LocalCacheClient> cache_client_;
  std::unique_ptr<RecordingWorker> worker_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<worker::HostKvSegment> host_;   // Make(..., host_blocks)
  std::shared_ptr<cachemgr::HostTier> host_tier_;
  std::string disk_root_;                          // Make(..., disk_blocks)
  std::unique_ptr<worker::KvDiskStore> disk_;      // the worker's side
  std::shared_ptr<cachemgr::DiskTier> disk_tier_;  // the cache manager's index
  int next_id_ = 0;
};

}  // namespace folio::scheduler::stories

#endif  // FOLIO_SERVICES_SCHEDULER_STORIES_FIXTURE_H_
