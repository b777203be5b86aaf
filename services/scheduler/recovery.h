// Recovery: how the scheduler heals its replica when a worker rank or the cache manager
// fails a call (the process died and is restarted, or it stopped answering for a while).
//
// RequestState::Lose() has already put every running request back at the front of the
// waiting queue with its tokens, to be recomputed. While recovering, no step runs; each
// Poll() ends the requests that have waited longer than `timeout`, or whose own deadline
// is within `deadline_margin` (UNAVAILABLE, "the replica is recovering"), and, when the
// backoff allows, restores the processes on a thread of its own (the restore thread), so
// that the loop keeps taking requests and cancels however long a restore takes (an
// AllocateKvCache that converts a large model's weights, a join that waits out its
// deadline); each restore call is bounded by the clients' deadlines, and destroying the
// Recovery cancels the one in flight (CancelRestore):
//   1. the cache manager answers again and is configured again (a new incarnation) or
//      reset (the same one): the pool is empty, its prefix cache too, since the workers'
//      KV may be gone (CacheClient::Restore); so the pool is full while requests wait;
//   2. every worker rank answers again; a new incarnation gets its KV cache allocated
//      again with the start-up block count and size (WorkerClient::Restore).
// Both are restored whichever call failed, so a replica that lost both heals at once.
// Then stepping resumes: the recomputed streams continue token for token (sampling is
// keyed by seed, sample index and position), nothing repeated and nothing lost.
//
// A request's recovery clock starts when it is first seen waiting in a recovery and
// restarts at every successful step, so a replica whose steps fail again and again ends
// its requests after `timeout` instead of recomputing them forever.
//
// Metrics: folio_scheduler_recovering (1 while recovering),
// folio_scheduler_recoveries_total{service}, folio_scheduler_recovery_seconds (loss to
// processes restored) and folio_scheduler_recovery_first_token_seconds (processes
// restored to the end of the first step after that sampled a token: a long prompt's
// prefill chunks come first).
//
// Owned by the scheduler's loop thread; thread-compatible. While the restore thread runs,
// it alone calls the clients (no step runs during a recovery).
#ifndef FOLIO_SERVICES_SCHEDULER_RECOVERY_H_
#define FOLIO_SERVICES_SCHEDULER_RECOVERY_H_

#include <memory>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "services/scheduler/clients.h"
#include "services/scheduler/request_state.h"
#include "services/scheduler/scheduler_options.h"

namespace folio::scheduler {

class Recovery {
 public:
  // None of the pointers is owned; all must outlive this object.
  Recovery(const RecoveryOptions& options, RequestState* state, CacheClient* cache,
           WorkerClient* workers, MetricsRegistry* registry);
  // Cancels a restore in flight and waits for its thread.
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // True from a loss (state->loss set) until the processes are restored.
  bool active() const { return state_->loss.has_value(); }

  // One turn of the wait, at `now`: ends the requests past the timeout or near their
  // deadline; when the backoff allows, starts restoring the processes; takes the result
  // of a restore that finished. Never blocks on the processes. Returns true when it
  // started or finished a restore (the loop did work), false when it only waited.
  bool Poll(absl::Time now);

  // After each successful worker step: requests' recovery clocks restart; the first step
  // after a recovery that sampled a token (`sampled`) records the time since the
  // processes were restored.
  void OnStep(absl::Time now, bool sampled);

 private:
  void Begin(absl::Time now);
  void ExpireWaiting(absl::Time now);
  // Handles the result of a finished restore.
  void Finished(absl::Time now, const absl::Status& cache, const absl::Status& workers);

  // One restore on the restore thread: what it found, once `done` is notified.
  struct Attempt {
    absl::Notification done;
    absl::Status cache;
    absl::Status workers;
  };

  const RecoveryOptions options_;
  RequestState* const state_;
  CacheClient* const cache_;
  WorkerClient* const workers_;
  Gauge& recovering_;
  Family<Counter>& recoveries_;
  Histogram& recovery_seconds_;
  Histogram& first_token_seconds_;

  bool begun_ = false;  // the current loss has been logged and counted
  absl::Time lost_at_;
  absl::Time next_attempt_;
  absl::Duration backoff_;
  int attempts_ = 0;
  bool cache_restored_ = false;  // this recovery has emptied the pool (no step since)
  absl::Time restored_at_ = absl::InfinitePast();  // awaiting the first step after it
  bool awaiting_first_step_ = false;
  // When each request (by handle) was first seen waiting in a recovery, since the last
  // successful step.
  absl::flat_hash_map<uint64_t, absl::Time> waiting_since_;
  std::unique_ptr<Attempt> attempt_;  // the restore in flight, if any
  std::thread restore_thread_;        // runs attempt_
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_RECOVERY_H_
