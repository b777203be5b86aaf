// Scheduler epochs: fencing, so that two schedulers never drive one replica at once.
//
// A scheduler picks an epoch at start-up, larger than any its workers and cache manager
// have seen (NewSchedulerEpoch), and sends it with every call that changes their state
// (AllocateKvCache, ExecuteStep; Configure, Step, Reset). Each of those services keeps an
// EpochFence: the first call with a larger epoch raises the fence, and from then on every
// call with a smaller one is refused with FAILED_PRECONDITION "fenced: ...". So once a
// new scheduler has claimed the replica, the old one's next step fails and it stops
// (IsFenced), whatever state it believed it held. Epoch 0 means "unfenced" (tools and
// tests that drive one service by hand) and is always admitted.
//
// EpochFence is thread-safe.
#ifndef FOLIO_COMMON_SCHEDULER_EPOCH_H_
#define FOLIO_COMMON_SCHEDULER_EPOCH_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace folio {

class EpochFence {
 public:
  // `service` names this process in messages ("worker rank 0", "cache manager").
  explicit EpochFence(absl::string_view service) : service_(service) {}

  // Admits a call of `what` (an RPC name) from a scheduler with `epoch`: OK when it is 0
  // or at least the newest seen (a larger one becomes the newest), FAILED_PRECONDITION
  // "fenced: ..." when it is older.
  absl::Status Admit(uint64_t epoch, absl::string_view what);

  // The newest epoch admitted (0: none yet).
  uint64_t current() const;

 private:
  const std::string service_;
  mutable absl::Mutex mu_;
  uint64_t current_ ABSL_GUARDED_BY(mu_) = 0;
};

// An epoch newer than `newest_seen` (the largest any service of the replica reports):
// the wall clock in microseconds, or newest_seen + 1 if that is not larger (a clock
// behind the previous scheduler's). Wall-clock based so that two schedulers started at
// once, having read the same newest_seen, still pick different epochs.
uint64_t NewSchedulerEpoch(uint64_t newest_seen, absl::Time now);

// Whether `status` is a fencing refusal (Admit's), perhaps with context prepended.
bool IsFenced(const absl::Status& status);

}  // namespace folio

#endif  // FOLIO_COMMON_SCHEDULER_EPOCH_H_
