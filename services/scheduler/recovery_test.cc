// Recovery in process: the scheduler over a cache manager and a CPU model runner that a
// test can "kill" (every call fails) and "restart" (a fresh pool, a fresh KV cache with
// nothing in it), as a process restarted by Kubernetes would be. Streams of greedy,
// parallel-sampling and beam requests must continue with exactly the tokens of an
// undisturbed run; requests that wait past --recovery_timeout_ms end with UNAVAILABLE.
// Also a scheduler that restarts: continuations (what a frontend resubmits, with the
// tokens its clients already have) give exactly the rest of an undisturbed run, and a
// scheduler fenced by a newer one ends its requests, resumable, and takes no more.
#include "services/scheduler/recovery.h"

#include <unistd.h>

#include <map>

#include "common/stream_resume.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/scheduler.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/test_models.h"

namespace folio::scheduler {
namespace {

using ::testing::HasSubstr;

// A cache manager "process": alive, it serves a KvCacheManager; killed, every call fails
// with UNAVAILABLE; restarted, it is a new process with a fresh, empty pool. Thread-safe:
// recovery calls Restore on its restore thread while the test looks on.
class RestartableCache final : public CacheClient {
 public:
  // `host`: the host KV tier's index (may be null), kept across resets as the cache
  // manager's service keeps it.
  explicit RestartableCache(const cachemgr::CacheConfig& config,
                            std::shared_ptr<cachemgr::HostTier> host = nullptr)
      : config_(config), host_(std::move(host)),
        manager_(*cachemgr::KvCacheManager::Create(config, host_)) {}

  void Kill() {
    absl::MutexLock lock(&mu_);
    alive_ = false;
  }
  void Restart() {
    absl::MutexLock lock(&mu_);
    if (host_ != nullptr) {  // a new process: the index is gone, the segments not
      host_ = std::make_shared<cachemgr::HostTier>(host_->num_slots(), config_.block_size,
                                                   host_->id());
    }
    manager_ = *cachemgr::KvCacheManager::Create(config_, host_);
    alive_ = true;
  }
  // Kills the process when the next Step has `steps` calls before it.
  void KillAfter(int steps) {
    absl::MutexLock lock(&mu_);
    kill_after_ = steps;
  }
  absl::Status CheckInvariants() {
    absl::MutexLock lock(&mu_);
    return manager_->CheckInvariants();
  }
  cachemgr::CacheStats Stats() {
    absl::MutexLock lock(&mu_);
    return manager_->Stats();
  }
  int restores() {
    absl::MutexLock lock(&mu_);
    return restores_;
  }
  // SetTiers fails until Restore has been called `n` times in all: the cache manager
  // restarted while recovery was under way (its pool must be configured again).
  void FailSetTiersUntilRestores(int n) {
    absl::MutexLock lock(&mu_);
    tiers_after_restores_ = n;
  }
  // A newer scheduler claimed the pool: every call is refused as fenced.
  void Fence() {
    absl::MutexLock lock(&mu_);
    fenced_ = true;
  }

  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (kill_after_ >= 0 && kill_after_-- == 0) alive_ = false;
    if (!alive_) return absl::UnavailableError("cache manager: Socket closed");
    if (fenced_) return Fenced();
    return manager_->Step(request);
  }
  absl::Status Reset() override { return Restore(); }
  absl::Status SetTiers(const OffloadTiers&) override {
    absl::MutexLock lock(&mu_);
    if (restores_ < tiers_after_restores_) {
      return absl::UnavailableError("cache manager Reset: the block pool is not configured yet");
    }
    return absl::OkStatus();
  }
  absl::Status Restore() override {
    absl::MutexLock lock(&mu_);
    if (!alive_) return absl::UnavailableError("cache manager: Connection refused");
    if (fenced_) return Fenced();
    ++restores_;
    if (host_ != nullptr) host_->DropUnconfirmed();  // as CacheManagerService::Reset
    manager_ = *cachemgr::KvCacheManager::Create(config_, host_);  // reset: empty, no prefixes
    return absl::OkStatus();
  }

 private:
  static absl::Status Fenced() {
    return absl::FailedPreconditionError(
        "fenced: Step from scheduler epoch 1 refused: cache manager belongs to a newer "
        "scheduler (epoch 2)");
  }
  const cachemgr::CacheConfig config_;
  absl::Mutex mu_;
  std::shared_ptr<cachemgr::HostTier> host_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<cachemgr::KvCacheManager> manager_ ABSL_GUARDED_BY(mu_);
  bool alive_ ABSL_GUARDED_BY(mu_) = true;
  int kill_after_ ABSL_GUARDED_BY(mu_) = -1;
  int restores_ ABSL_GUARDED_BY(mu_) = 0;
  int tiers_after_restores_ ABSL_GUARDED_BY(mu_) = 0;
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
};

// A worker "process" over the CPU runner. Restarted, its KV cache is new and empty, so
// only a real recompute gives the right tokens. Thread-safe, as RestartableCache.
class RestartableWorker final : public WorkerClient {
 public:
  // `host_segment`: the host KV tier's segment name ("" for none), opened again by every
  // restart as a restarted worker process would.
  RestartableWorker(const worker::ModelWeights& weights, const worker::CpuModelRunnerOptions& o,
                    std::string host_segment = "", int32_t host_blocks = 0)
      : weights_(weights), options_(o), host_segment_(std::move(host_segment)),
        host_blocks_(host_blocks) {
    Restart();
  }
  std::string host_id() {
    absl::MutexLock lock(&mu_);
    return host_ == nullptr ? "" : host_->id();
  }
  void Restart() {
    absl::MutexLock lock(&mu_);
    RestartLocked();
  }
  void KillAfter(int steps) {
    absl::MutexLock lock(&mu_);
    kill_after_ = steps;
  }
  // Comes back (restarted) after this many failed Restore probes.
  void RestartAfterProbes(int probes) {
    absl::MutexLock lock(&mu_);
    restart_after_probes_ = probes;
  }
  // Restore blocks until released (a slow AllocateKvCache), or until CancelRestore.
  void BlockRestores() {
    absl::MutexLock lock(&mu_);
    block_restores_ = true;
  }
  void ReleaseRestores() {
    absl::MutexLock lock(&mu_);
    block_restores_ = false;
  }
  int restore_calls() {
    absl::MutexLock lock(&mu_);
    return restore_calls_;
  }

  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>&) override {
    absl::MutexLock lock(&mu_);
    if (kill_after_ >= 0 && kill_after_-- == 0) alive_ = false;
    if (!alive_) return absl::UnavailableError("worker rank 0 of 1: Socket closed");
    return runner_->Execute(step);
  }
  absl::Status Restore() override {
    absl::MutexLock lock(&mu_);
    ++restore_calls_;
    mu_.Await(absl::Condition(
        +[](RestartableWorker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
          return !w->block_restores_ || w->cancelled_;
        },
        this));
    if (cancelled_) return absl::CancelledError("restore cancelled");
    if (!alive_ && restart_after_probes_ >= 0 && restart_after_probes_-- == 0) RestartLocked();
    if (!alive_) return absl::UnavailableError("worker rank 0: Connection refused");
    return absl::OkStatus();
  }
  void CancelRestore() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

 private:
  void RestartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    runner_ = *worker::CpuModelRunner::Create(weights_, options_);
    if (!host_segment_.empty()) {
      host_.reset();
      const int64_t per_block = runner_->kv_cache().bytes_per_block();
      host_ = *worker::HostKvSegment::Open(
          host_segment_, worker::HostKvSegment::kHeaderBytes + host_blocks_ * per_block,
          per_block, "stories260K");
      const absl::Status attached = runner_->SetHostSegment(host_.get());
      EXPECT_TRUE(attached.ok()) << attached;
    }
    alive_ = true;
  }

  const worker::ModelWeights& weights_;
  const worker::CpuModelRunnerOptions options_;
  const std::string host_segment_;
  const int32_t host_blocks_;
  absl::Mutex mu_;
  std::unique_ptr<worker::HostKvSegment> host_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<worker::CpuModelRunner> runner_ ABSL_GUARDED_BY(mu_);
  bool alive_ ABSL_GUARDED_BY(mu_) = true;
  int kill_after_ ABSL_GUARDED_BY(mu_) = -1;
  int restart_after_probes_ ABSL_GUARDED_BY(mu_) = -1;
  bool block_restores_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int restore_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// One request's choices, and how it ended.
struct Choices {
  std::map<int32_t, std::vector<int32_t>> tokens;
  bool done = false;
  FinishReason finish = FinishReason::kNone;
  absl::Status error;
  EventSink Sink() {
    return [this](const RequestEvent& e) {
      for (const GeneratedToken& t : e.tokens) tokens[e.index].push_back(t.token_id);
      if (e.request_done) {
        done = true;
        finish = e.finish;
        error = e.error;
      }
    };
  }
};

class RecoveryTest : public ::testing::Test {
 protected:
  static constexpr int32_t kBlockSize = 16;
  static constexpr int32_t kNumBlocks = 96;

  void SetUp() override {
    dir_ = worker::testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << worker::testing::kModelsDirHelp;
    weights_ = worker::testing::LoadOrDie(*dir_ + "/stories260K/stories260K.gguf");
  }

  void Make(absl::Duration recovery_timeout = absl::Seconds(60)) {
    scheduler_.reset();
    registry_ = std::make_unique<MetricsRegistry>();
    worker::CpuModelRunnerOptions ro;
    ro.block_size = kBlockSize;
    ro.kv_cache_bytes = int64_t{64} << 20;
    ro.max_num_blocks = kNumBlocks;
    ro.num_threads = 2;
    const std::string segment =
        host_blocks_ > 0 ? "folio-recovery-test-" + std::to_string(getpid()) : "";
    // A fresh segment (zeros) for each run: bytes an earlier run left in a slot must not
    // stand in for a store that was lost.
    worker_.reset();
    if (!segment.empty()) {
      EXPECT_TRUE(worker::HostKvSegment::Unlink(segment).ok());
    }
    worker_ = std::make_unique<RestartableWorker>(*weights_, ro, segment, host_blocks_);
    std::shared_ptr<cachemgr::HostTier> host;
    if (host_blocks_ > 0) {
      host = std::make_shared<cachemgr::HostTier>(host_blocks_, kBlockSize, worker_->host_id());
    }
    cache_ = std::make_unique<RestartableCache>(
        cachemgr::CacheConfig{.policy = cachemgr::PolicyKind::kPaged, .num_blocks = kNumBlocks,
                              .block_size = kBlockSize},
        host);
    SchedulerOptions options;
    options.block_size = kBlockSize;
    options.max_num_batched_tokens = 64;
    options.max_model_len = weights_->config.max_seq_len;
    options.vocab_size = weights_->config.vocab_size;
    options.eos_id = weights_->vocab.eos_id;
    options.num_blocks = kNumBlocks;
    options.recovery.timeout = recovery_timeout;
    options.recovery.first_backoff = absl::Milliseconds(1);
    options.recovery.max_backoff = absl::Milliseconds(2);
    if (speculative_) {
      options.speculative.mode = SpeculativeMode::kNgram;
      options.speculative.ngram_min = 1;
      options.speculative.max_batch = 64;
    }
    scheduler_ = std::make_unique<Scheduler>(options, cache_.get(), worker_.get(),
                                             registry_.get());
  }

  std::vector<int32_t> Prompt(int32_t n, int32_t salt) {
    std::vector<int32_t> p = {weights_->vocab.bos_id};
    for (int32_t i = 1; i < n; ++i) p.push_back(3 + (i * 37 + salt * 11) % 400);
    return p;
  }

  // A mix of 16 requests: greedy, sampled, n = 3 samples, and beam searches.
  std::vector<RequestSpec> Mix() {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 16; ++i) {
      RequestSpec s;
      s.request_id = "q" + std::to_string(i);
      s.prompt = Prompt(3 + i % 7, i);
      s.max_tokens = 24 + i;
      s.ignore_eos = true;
      if (i % 4 == 1) {
        s.sampling.temperature = 0.9f;
        s.sampling.seed = 100 + i;
      } else if (i % 4 == 2) {
        s.sampling.temperature = 1.0f;
        s.sampling.seed = 7;
        s.n = 3;
      } else if (i % 4 == 3) {
        s.beam_width = 3;
        s.n = 2;
        s.ignore_eos = false;
      }
      specs.push_back(std::move(s));
    }
    return specs;
  }

  // Submits `specs` and runs the loop until every request is done (or a bound).
  std::vector<Choices> Run(const std::vector<RequestSpec>& specs) {
    std::vector<Choices> out(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_TRUE(scheduler_->Submit(specs[i], out[i].Sink()).ok());
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    auto all_done = [&] {
      for (const Choices& c : out) {
        if (!c.done) return false;
      }
      return true;
    };
    while (!all_done() && absl::Now() < give_up) {
      if (!scheduler_->RunOnce()) absl::SleepFor(absl::Milliseconds(1));
      EXPECT_TRUE(cache_->CheckInvariants().ok());
    }
    while (scheduler_->RunOnce()) {
    }  // the last frees
    EXPECT_TRUE(all_done()) << "requests did not finish within 60 s";
    return out;
  }

  void ExpectPoolFull() {
    EXPECT_EQ(cache_->Stats().num_sequences, 0);
    EXPECT_EQ(cache_->Stats().pool.num_blocks_free, kNumBlocks);
  }

  double Metric(const std::string& line_prefix) {
    const std::string page = registry_->Serialize();
    const size_t at = page.find("\n" + line_prefix + " ");
    if (at == std::string::npos) return -1;
    return std::stod(page.substr(at + line_prefix.size() + 2));
  }

  std::vector<Choices> Undisturbed() {
    Make();
    return Run(Mix());
  }

  void TearDown() override {
    scheduler_.reset();
    worker_.reset();
    if (host_blocks_ > 0) {
      EXPECT_TRUE(
          worker::HostKvSegment::Unlink("folio-recovery-test-" + std::to_string(getpid())).ok());
    }
  }

  bool speculative_ = false;  // Make: n-gram speculative decoding on
  int32_t host_blocks_ = 0;   // Make: a host KV tier of this many blocks
  std::optional<std::string> dir_;
  std::unique_ptr<worker::ModelWeights> weights_;
  std::unique_ptr<MetricsRegistry> registry_;
  std::unique_ptr<RestartableWorker> worker_;
  std::unique_ptr<RestartableCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
};

void ExpectSameStreams(const std::vector<Choices>& want, const std::vector<Choices>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(got[i].error.ok()) << "request " << i << ": " << got[i].error;
    EXPECT_EQ(got[i].finish, want[i].finish) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i << " repeated or lost tokens";
  }
}

TEST_F(RecoveryTest, AWorkerThatDiesAndRestartsLosesNoStream) {
  const std::vector<Choices> want = Undisturbed();
  Make();
  worker_->KillAfter(12);  // mid-stream: prompts done, samples forked, beams under way
  worker_->RestartAfterProbes(5);
  const std::vector<Choices> got = Run(Mix());
  ExpectSameStreams(want, got);
  ExpectPoolFull();
  EXPECT_EQ(Metric("folio_scheduler_recoveries_total{service=\"worker\"}"), 1);
  EXPECT_EQ(Metric("folio_scheduler_recovering"), 0);
  EXPECT_EQ(Metric("folio_scheduler_recovery_first_token_seconds_count"), 1);
  EXPECT_GE(cache_->restores(), 1) << "the pool was rebuilt: its prefix cache named lost KV";
}

// The tiers' update after the workers came back fails (the cache manager restarted
// meanwhile, its pool to configure again): the next attempt restores the cache manager
// first, rather than updating the tiers of a pool that is not there, attempt after attempt.
TEST_F(RecoveryTest, AFailedTierUpdateRestoresTheCacheManagerAgain) {
  const std::vector<Choices> want = Undisturbed();
  Make(/*recovery_timeout=*/absl::Seconds(10));
  worker_->KillAfter(12);
  worker_->RestartAfterProbes(2);
  const int restores = cache_->restores();
  cache_->FailSetTiersUntilRestores(restores + 2);
  const std::vector<Choices> got = Run(Mix());
  ExpectSameStreams(want, got);
  ExpectPoolFull();
  EXPECT_EQ(cache_->restores(), restores + 2);
  EXPECT_EQ(Metric("folio_scheduler_recoveries_total{service=\"worker\"}"), 1);
}

TEST_F(RecoveryTest, ACacheManagerThatDiesAndRestartsLosesNoStream) {
  const std::vector<Choices> want = Undisturbed();
  Make();
  cache_->KillAfter(20);
  // The cache manager is back, empty, a few loop turns later.
  int turns = 0;
  std::vector<Choices> got(want.size());
  const std::vector<RequestSpec> specs = Mix();
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(scheduler_->Submit(specs[i], got[i].Sink()).ok());
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  auto all_done = [&] {
    return std::all_of(got.begin(), got.end(), [](const Choices& c) { return c.done; });
  };
  bool restarted = false;
  while (!all_done() && absl::Now() < give_up) {
    if (!scheduler_->RunOnce()) absl::SleepFor(absl::Milliseconds(1));
    if (scheduler_->Health().recovering && !restarted && ++turns == 10) {
      EXPECT_EQ(Metric("folio_scheduler_recovering"), 1);
      cache_->Restart();
      restarted = true;
    }
  }
  while (scheduler_->RunOnce()) {
  }
  ASSERT_TRUE(restarted) << "the cache manager was never lost";
  ExpectSameStreams(want, got);
  ExpectPoolFull();
  EXPECT_EQ(Metric("folio_scheduler_recoveries_total{service=\"cachemgr\"}"), 1);
}

// Speculative decoding through a worker loss: a verification step in flight fails, its
// proposals and the KV they wrote go with the lost process, and the streams continue with
// the tokens of an undisturbed run without speculation.
TEST_F(RecoveryTest, SpeculativeStreamsSurviveAWorkerLoss) {
  const std::vector<Choices> want = Undisturbed();
  speculative_ = true;
  for (int kill_after : {6, 12, 25}) {
    SCOPED_TRACE(absl::StrCat("killed after ", kill_after, " steps"));
    Make();
    worker_->KillAfter(kill_after);
    worker_->RestartAfterProbes(3);
    const std::vector<Choices> got = Run(Mix());
    ExpectSameStreams(want, got);
    ExpectPoolFull();
    EXPECT_EQ(Metric("folio_scheduler_recoveries_total{service=\"worker\"}"), 1);
    EXPECT_GT(Metric("folio_scheduler_speculative_accepted_tokens_total{proposer=\"ngram\"}"), 0);
  }
}

// The host KV tier through a worker loss: the stores of the step that failed are never
// confirmed and the reset drops them (their bytes may never have been written); what the
// tier holds is loaded back by the recomputes, and every stream continues exactly.
TEST_F(RecoveryTest, WithAHostTierStreamsSurviveAWorkerLossAndLoadWhatWasStored) {
  // The whole mix (n > 1 and beams step synchronously), then its greedy and sampled
  // requests alone, which pipeline: there a step's successor is planned, and its cache
  // RPC sent, before the step's answer says whether its stores ran.
  for (const bool pipelined_only : {false, true}) {
    std::vector<RequestSpec> specs;
    for (const RequestSpec& s : Mix()) {
      if (!pipelined_only || (s.n == 1 && s.beam_width == 0)) specs.push_back(s);
    }
    host_blocks_ = 0;
    Make();
    const std::vector<Choices> want = Run(specs);
    host_blocks_ = 256;
    int64_t loads = 0;
    int64_t dropped = 0;
    for (int kill_after : {6, 12, 25, 33}) {
      SCOPED_TRACE(absl::StrCat(pipelined_only ? "pipelined, " : "", "killed after ",
                                kill_after, " steps"));
      Make();
      worker_->KillAfter(kill_after);
      worker_->RestartAfterProbes(3);
      const std::vector<Choices> got = Run(specs);
      ExpectSameStreams(want, got);
      ExpectPoolFull();
      EXPECT_EQ(Metric("folio_scheduler_recoveries_total{service=\"worker\"}"), 1);
      loads += cache_->Stats().host.num_loads;
      dropped += cache_->Stats().host.num_dropped_unconfirmed;
    }
    EXPECT_GT(loads, 0) << "the recomputes should have found blocks in the tier";
    EXPECT_GT(dropped, 0) << "some lost step should have carried stores";
  }
}

TEST_F(RecoveryTest, AStepThatFailsOnceRecoversAtOnce) {
  // A network blip: one step fails, the same worker answers the next probe.
  const std::vector<Choices> want = Undisturbed();
  Make();
  worker_->KillAfter(3);
  worker_->RestartAfterProbes(0);
  ExpectSameStreams(want, Run(Mix()));
  ExpectPoolFull();
}

TEST_F(RecoveryTest, AWorkerThatNeverReturnsEndsStreamsWithUnavailable) {
  Make(/*recovery_timeout=*/absl::Milliseconds(200));
  worker_->KillAfter(4);
  const absl::Time start = absl::Now();
  const std::vector<Choices> got = Run(Mix());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  for (const Choices& c : got) {
    EXPECT_EQ(c.finish, FinishReason::kError);
    EXPECT_EQ(c.error.code(), absl::StatusCode::kUnavailable) << c.error;
    EXPECT_THAT(c.error.message(), HasSubstr("the replica is recovering"));
    EXPECT_THAT(c.error.message(), HasSubstr("--recovery_timeout_ms"));
  }
  ExpectPoolFull();  // the cache manager answered: its pool was reset while waiting
  EXPECT_EQ(Metric("folio_scheduler_recovering"), 1) << "still waiting for the worker";

  // A request that arrives while the replica recovers waits, then ends the same way.
  Choices late;
  RequestSpec spec = Mix()[0];
  ASSERT_TRUE(scheduler_->Submit(spec, late.Sink()).ok());
  for (int i = 0; i < 2000 && !late.done; ++i) {
    if (!scheduler_->RunOnce()) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(late.error.code(), absl::StatusCode::kUnavailable);

  // Then the worker comes back: new requests are served again.
  worker_->Restart();
  std::vector<RequestSpec> one = {Mix()[0]};
  std::vector<Choices> after = Run(one);
  EXPECT_TRUE(after[0].error.ok()) << after[0].error;
  EXPECT_EQ(after[0].tokens[0].size(), 24u);
  EXPECT_EQ(Metric("folio_scheduler_recovering"), 0);
}

TEST_F(RecoveryTest, CancelWorksWhileRecovering) {
  Make();
  worker_->KillAfter(2);
  Choices c;
  absl::StatusOr<uint64_t> handle = scheduler_->Submit(Mix()[0], c.Sink());
  ASSERT_TRUE(handle.ok());
  for (int i = 0; i < 100 && !scheduler_->Health().recovering; ++i) scheduler_->RunOnce();
  ASSERT_TRUE(scheduler_->Health().recovering);
  scheduler_->Cancel(*handle);
  scheduler_->RunOnce();
  EXPECT_TRUE(c.done);
  EXPECT_EQ(c.finish, FinishReason::kCancelled);
}

// Requests whose streams are cut: greedy, sampled, n = 3 with penalties and min_tokens
// (which read each choice's own history), and a sampled one that stops at EOS.
std::vector<RequestSpec> ContinuedMix(const std::vector<int32_t>& prompt) {
  std::vector<RequestSpec> specs(4);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].request_id = "c" + std::to_string(i);
    specs[i].prompt = prompt;
    specs[i].max_tokens = 40;
    specs[i].ignore_eos = true;
  }
  specs[1].sampling.temperature = 0.9f;
  specs[1].sampling.seed = 5;
  specs[2].sampling.temperature = 1.0f;
  specs[2].sampling.seed = 11;
  specs[2].n = 3;
  specs[2].sampling.presence_penalty = 0.5f;
  specs[2].sampling.frequency_penalty = 0.7f;
  specs[2].sampling.repetition_penalty = 1.3f;
  specs[2].min_tokens = 30;
  specs[3].sampling.temperature = 1.0f;
  specs[3].sampling.seed = 3;
  specs[3].n = 2;
  specs[3].ignore_eos = false;
  specs[3].max_tokens = 200;
  return specs;
}

TEST_F(RecoveryTest, AContinuationGivesTheRestOfAnUndisturbedRun) {
  const std::vector<RequestSpec> specs = ContinuedMix(Prompt(9, 1));
  Make();
  const std::vector<Choices> want = Run(specs);
  // Cuts per choice as a broken stream leaves them: the same point, uneven points, a
  // choice cut inside the first tokens' fan-out (no token yet) beside ones that have
  // theirs, and a finished choice left out.
  const std::vector<std::vector<int>> cuts = {{1, 1, 1}, {7, 3, 20}, {0, 1, 0}, {5, 0, 12},
                                              {39, 39, 39}, {-1, 6, 2}};
  for (const std::vector<int>& cut : cuts) {
    Make();  // a restarted scheduler: a fresh pool and KV cache
    std::vector<RequestSpec> continued = specs;
    for (size_t r = 0; r < specs.size(); ++r) {
      RequestSpec& spec = continued[r];
      for (int32_t k = 0; k < spec.n; ++k) {
        const std::vector<int32_t>& all = want[r].tokens.at(k);
        const int c = std::min<int>(cut[k], static_cast<int>(all.size()) - 1);
        if (c < 0) continue;  // finished: left out
        spec.continuation.push_back(
            {.index = k, .tokens = {all.begin(), all.begin() + c}});
      }
      if (spec.continuation.empty()) spec.continuation.push_back({.index = 0, .tokens = {}});
    }
    const std::vector<Choices> got = Run(continued);
    for (size_t r = 0; r < specs.size(); ++r) {
      EXPECT_TRUE(got[r].error.ok()) << got[r].error;
      EXPECT_EQ(got[r].finish, want[r].finish);
      for (const RequestSpec::ContinuedChoice& c : continued[r].continuation) {
        const std::vector<int32_t>& all = want[r].tokens.at(c.index);
        const std::vector<int32_t> rest(all.begin() + c.tokens.size(), all.end());
        EXPECT_EQ(got[r].tokens.count(c.index) ? got[r].tokens.at(c.index)
                                               : std::vector<int32_t>{},
                  rest)
            << "request " << r << " choice " << c.index << " cut at " << c.tokens.size();
      }
      EXPECT_EQ(got[r].tokens.size(), continued[r].continuation.size())
          << "request " << r << ": no tokens for choices left out";
    }
    ExpectPoolFull();
  }
}

TEST_F(RecoveryTest, BadContinuationsAreRefused) {
  Make();
  RequestSpec spec = ContinuedMix(Prompt(5, 2))[2];
  auto refused = [&](RequestSpec s, const std::string& why) {
    absl::StatusOr<uint64_t> h = scheduler_->Submit(std::move(s), nullptr);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(h.status().message(), HasSubstr(why));
  };
  RequestSpec s = spec;
  s.continuation = {{.index = 3, .tokens = {5}}};
  refused(s, "choice index 3 must be in [0, n = 3)");
  s.continuation = {{.index = 1, .tokens = {5}}, {.index = 0, .tokens = {5}}};
  refused(s, "ascending");
  s.continuation = {{.index = 0, .tokens = std::vector<int32_t>(40, 5)}};
  refused(s, "already has 40 tokens");
  s.continuation = {{.index = 0, .tokens = {-1}}};
  refused(s, "outside the vocabulary");
  s = Mix()[3];  // beam search
  s.continuation = {{.index = 0, .tokens = {5}}};
  refused(s, "a beam search cannot be continued");
}

TEST_F(RecoveryTest, AFencedSchedulerEndsItsRequestsResumableAndTakesNoMore) {
  Make();
  std::vector<Choices> got(3);
  const std::vector<RequestSpec> specs = Mix();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(scheduler_->Submit(specs[i], got[i].Sink()).ok());
  }
  for (int i = 0; i < 5; ++i) scheduler_->RunOnce();
  const int64_t steps = scheduler_->Stats().num_steps;
  cache_->Fence();
  for (int i = 0; i < 20; ++i) scheduler_->RunOnce();
  for (const Choices& c : got) {
    ASSERT_TRUE(c.done);
    EXPECT_EQ(c.error.code(), absl::StatusCode::kUnavailable) << c.error;
    EXPECT_THAT(c.error.message(), HasSubstr("replaced by a newer one"));
    EXPECT_TRUE(IsResumable(c.error)) << "a frontend continues them on the newer scheduler";
  }
  EXPECT_EQ(scheduler_->Stats().num_steps, steps) << "a fenced scheduler steps no more";
  EXPECT_TRUE(scheduler_->Health().fenced);
  EXPECT_FALSE(scheduler_->Health().recovering) << "nothing to recover: it is not ours";
  absl::StatusOr<uint64_t> late = scheduler_->Submit(specs[0], nullptr);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsResumable(late.status()));
}

// A restore that blocks (an AllocateKvCache converting a large model's weights) runs on
// the restore thread: the loop still cancels requests, ends one whose deadline nears, and
// takes new ones; destroying the scheduler cancels the restore instead of waiting for it.
TEST_F(RecoveryTest, ABlockedRestoreDoesNotHoldTheLoop) {
  Make();
  worker_->KillAfter(2);
  worker_->BlockRestores();
  Choices cancelled, near_deadline, queued;
  absl::StatusOr<uint64_t> handle = scheduler_->Submit(Mix()[0], cancelled.Sink());
  ASSERT_TRUE(handle.ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (worker_->restore_calls() == 0 && absl::Now() < give_up) {
    if (!scheduler_->RunOnce()) absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(worker_->restore_calls(), 1) << "the restore started and blocks";
  ASSERT_TRUE(scheduler_->Health().recovering);

  scheduler_->Cancel(*handle);
  RequestSpec soon = Mix()[1];
  soon.deadline = absl::Now() + absl::Milliseconds(400);
  ASSERT_TRUE(scheduler_->Submit(soon, near_deadline.Sink()).ok());
  ASSERT_TRUE(scheduler_->Submit(Mix()[2], queued.Sink()).ok());
  while (!(cancelled.done && near_deadline.done) && absl::Now() < give_up) {
    if (!scheduler_->RunOnce()) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  EXPECT_EQ(near_deadline.error.code(), absl::StatusCode::kUnavailable) << near_deadline.error;
  EXPECT_THAT(near_deadline.error.message(), HasSubstr("the replica is recovering: worker lost"));
  EXPECT_THAT(near_deadline.error.message(), HasSubstr("deadline"));
  EXPECT_LT(absl::Now(), soon.deadline) << "ended while its caller could still hear why";
  EXPECT_FALSE(queued.done) << "it waits for the replica";
  EXPECT_EQ(worker_->restore_calls(), 1) << "still the same restore";
  scheduler_.reset();  // joins the restore thread: CancelRestore must have unblocked it
}

// The first-token figure waits for a sampled token: a long prompt's recompute first runs
// prefill chunks that sample nothing.
TEST_F(RecoveryTest, FirstTokenAfterRecoveryIsATokenNotAPrefillChunk) {
  Make();
  RequestSpec spec = Mix()[0];
  spec.prompt = Prompt(200, 1);  // four chunks of max_num_batched_tokens = 64
  Choices c;
  ASSERT_TRUE(scheduler_->Submit(spec, c.Sink()).ok());
  worker_->KillAfter(5);  // the prompt and a token, then the worker is lost
  worker_->RestartAfterProbes(0);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!scheduler_->Health().recovering && absl::Now() < give_up) scheduler_->RunOnce();
  while (scheduler_->Health().recovering && absl::Now() < give_up) {
    if (!scheduler_->RunOnce()) absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_FALSE(scheduler_->Health().recovering);
  const int64_t before = scheduler_->Stats().num_steps;
  while (scheduler_->Stats().num_steps < before + 3 && absl::Now() < give_up) {
    scheduler_->RunOnce();
  }
  EXPECT_EQ(Metric("folio_scheduler_recovery_first_token_seconds_count"), 0)
      << "three prefill chunks of the recompute are not a token";
  while (!c.done && absl::Now() < give_up) scheduler_->RunOnce();
  EXPECT_TRUE(c.error.ok()) << c.error;
  EXPECT_EQ(Metric("folio_scheduler_recovery_first_token_seconds_count"), 1);
}

}  // namespace
}  // namespace folio::scheduler
