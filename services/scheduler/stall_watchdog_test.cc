// StallWatchdog: the rule on injected times, then a real loop stalled by a worker that
// blocks (the test hook), and a real loop waiting in a recovery, which is not a stall.
#include "services/scheduler/stall_watchdog.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/local_clients.h"

namespace folio::scheduler {
namespace {

TEST(StallWatchdogTest, ALoopWithWorkAndNoIterationIsStalledOnce) {
  MetricsRegistry registry;
  StallWatchdog dog(absl::Seconds(10), &registry);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(dog.Check({.last_iteration = t0, .has_work = true}, t0 + absl::Seconds(9)));
  EXPECT_FALSE(dog.Check({.last_iteration = t0, .has_work = true}, t0 + absl::Seconds(10)));
  EXPECT_FALSE(dog.Check({.last_iteration = t0, .has_work = true}, t0 + absl::Seconds(20)));
  EXPECT_TRUE(dog.Check({.last_iteration = t0 + absl::Seconds(21), .has_work = true},
                        t0 + absl::Seconds(22)))
      << "progress makes it live again";
  EXPECT_TRUE(dog.Check({.last_iteration = t0, .has_work = false}, t0 + absl::Hours(1)))
      << "an idle loop is not stalled";
  EXPECT_TRUE(dog.Check({.last_iteration = t0, .has_work = true, .recovering = true},
                        t0 + absl::Hours(1)))
      << "waiting in a recovery is not a stall";
  EXPECT_FALSE(dog.Check({.last_iteration = t0, .has_work = true}, t0 + absl::Hours(1)));
  const std::string page = registry.Serialize();
  EXPECT_NE(page.find("\nfolio_scheduler_stalls_total 2\n"), std::string::npos) << page;
  EXPECT_NE(page.find("\nfolio_scheduler_loop_stalled 1\n"), std::string::npos) << page;
}

// A worker whose step blocks until released (the stalled loop), or fails while `down`
// (the recovery wait), answering its probes with UNAVAILABLE.
class HookedWorker final : public WorkerClient {
 public:
  absl::Notification release;
  std::atomic<bool> down{false};
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>&) override {
    if (down) return absl::UnavailableError("Socket closed");
    release.WaitForNotification();
    worker::StepOutput out;
    out.seqs.resize(step.seqs.size());
    return out;
  }
  absl::Status Restore() override {
    return down ? absl::UnavailableError("Connection refused") : absl::OkStatus();
  }
};

class CacheForHooks final : public CacheClient {
 public:
  CacheForHooks()
      : manager_(*cachemgr::KvCacheManager::Create({.num_blocks = 16, .block_size = 4})) {}
  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& r) override {
    return manager_->Step(r);
  }
  absl::Status Reset() override { return Restore(); }
  absl::Status Restore() override {
    manager_ = *cachemgr::KvCacheManager::Create({.num_blocks = 16, .block_size = 4});
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<cachemgr::KvCacheManager> manager_;
};

// Whether the watchdog says live at every poll for `duration`.
bool LiveThroughout(StallWatchdog& dog, Scheduler& s, absl::Duration duration) {
  const absl::Time end = absl::Now() + duration;
  while (absl::Now() < end) {
    if (!dog.Check(s.Health(), absl::Now())) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// Whether the watchdog comes to answer `live` within 10 s.
bool Becomes(StallWatchdog& dog, Scheduler& s, bool live) {
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    if (dog.Check(s.Health(), absl::Now()) == live) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

TEST(StallWatchdogTest, AStalledLoopIsNotLiveAndARecoveryWaitIs) {
  MetricsRegistry registry;
  HookedWorker worker;
  CacheForHooks cache;
  SchedulerOptions options{.max_model_len = 32, .vocab_size = 32};
  options.recovery.first_backoff = absl::Milliseconds(1);
  options.recovery.max_backoff = absl::Milliseconds(5);
  Scheduler scheduler(options, &cache, &worker, &registry);
  StallWatchdog dog(absl::Milliseconds(100), &registry);
  std::thread loop([&] { scheduler.Run(); });

  // The loop waits in a recovery for 500 ms: live throughout.
  worker.down = true;
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 2;
  ASSERT_TRUE(scheduler.Submit(spec, nullptr).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!scheduler.Health().recovering && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(scheduler.Health().recovering);
  EXPECT_TRUE(LiveThroughout(dog, scheduler, absl::Milliseconds(500)))
      << "a recovery wait is not a stall";
  EXPECT_TRUE(scheduler.Health().recovering);

  // The worker comes back but its step blocks: the loop stalls.
  worker.down = false;
  EXPECT_TRUE(Becomes(dog, scheduler, /*live=*/false)) << "a loop stuck in a step is not live";
  worker.release.Notify();
  EXPECT_TRUE(Becomes(dog, scheduler, /*live=*/true)) << "it moves again";
  EXPECT_NE(registry.Serialize().find("\nfolio_scheduler_stalls_total 1\n"), std::string::npos);
  scheduler.Stop();
  loop.join();
}

}  // namespace
}  // namespace folio::scheduler
