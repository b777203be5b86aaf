#include "services/scheduler/recovery.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/scheduler_epoch.h"
#include "glog/logging.h"

namespace folio::scheduler {

Recovery::Recovery(const RecoveryOptions& options, RequestState* state, CacheClient* cache,
                   WorkerClient* workers, MetricsRegistry* r)
    : options_(options),
      state_(state),
      cache_(cache),
      workers_(workers),
      recovering_(r->AddGauge("folio_scheduler_recovering",
                              "1 while the replica recovers from a lost worker or cache "
                              "manager (no step runs), else 0.")),
      recoveries_(r->AddCounterFamily("folio_scheduler_recoveries_total",
                                      "Recoveries begun, by the service whose call failed.",
                                      {"service"})),
      recovery_seconds_(r->AddHistogram(
          "folio_scheduler_recovery_seconds",
          "From a failed call to the worker ranks and the cache manager set up again.",
          ExponentialBuckets(1e-3, 2, 18))),
      first_token_seconds_(r->AddHistogram(
          "folio_scheduler_recovery_first_token_seconds",
          "From the processes set up again to the end of the first step after a recovery "
          "that sampled a token.",
          ExponentialBuckets(1e-3, 2, 16))) {}

Recovery::~Recovery() {
  if (!restore_thread_.joinable()) return;
  cache_->CancelRestore();
  workers_->CancelRestore();
  restore_thread_.join();
}

void Recovery::Begin(absl::Time now) {
  begun_ = true;
  lost_at_ = now;
  next_attempt_ = now;  // at once: a blip may already be over
  backoff_ = options_.first_backoff;
  attempts_ = 0;
  cache_restored_ = false;
  awaiting_first_step_ = false;
  const Loss& loss = *state_->loss;
  LOG(WARNING) << "replica recovering: " << LostServiceName(loss.service)
               << " call failed (" << loss.cause << "); stepping stops, "
               << state_->waiting.size()
               << " requests wait for the processes to be set up again (at most "
               << absl::FormatDuration(options_.timeout) << ")";
  recovering_.Set(1);
  recoveries_.WithLabels({LostServiceName(loss.service)}).Increment();
}

void Recovery::ExpireWaiting(absl::Time now) {
  std::vector<std::pair<Request*, std::string>> expired;
  for (Request* r : state_->waiting) {
    auto [it, inserted] = waiting_since_.try_emplace(r->arrival, now);
    if (now - it->second >= options_.timeout) {
      expired.push_back({r, absl::StrCat("gave up after waiting ",
                                         absl::FormatDuration(options_.timeout),
                                         " (--recovery_timeout_ms)")});
    } else if (r->spec.deadline - now <= options_.deadline_margin) {
      // Its caller's deadline is about to pass: say why now, while the status still
      // reaches the caller (after the deadline it would only see DEADLINE_EXCEEDED).
      expired.push_back({r, absl::StrCat("the request's deadline passes in ",
                                         absl::FormatDuration(absl::Trunc(
                                             r->spec.deadline - now, absl::Milliseconds(1))),
                                         ", before the replica is back")});
    }
  }
  for (auto& [r, why] : expired) {
    waiting_since_.erase(r->arrival);
    state_->Finish(r, FinishReason::kError,
                   absl::UnavailableError(absl::StrCat(
                       "the replica is recovering: ", LostServiceName(state_->loss->service),
                       " lost (", state_->loss->cause.message(), "); ", why)));
  }
}

bool Recovery::Poll(absl::Time now) {
  if (!active()) return false;
  if (!begun_) Begin(now);
  ExpireWaiting(now);
  if (attempt_ != nullptr) {
    if (!attempt_->done.HasBeenNotified()) return false;
    restore_thread_.join();
    const std::unique_ptr<Attempt> attempt = std::move(attempt_);
    Finished(now, attempt->cache, attempt->workers);
    return true;
  }
  if (now < next_attempt_) return false;
  ++attempts_;
  // The cache manager first: once it answers, its pool is empty again (every request
  // waits, none holds blocks) even while a worker is still away. The loop does not touch
  // the clients until the attempt is done.
  attempt_ = std::make_unique<Attempt>();
  restore_thread_ = std::thread([this, attempt = attempt_.get(), cache_done = cache_restored_] {
    attempt->cache = cache_done ? absl::OkStatus() : cache_->Restore();
    if (attempt->cache.ok()) attempt->workers = workers_->Restore();
    if (attempt->cache.ok() && attempt->workers.ok()) {
      // A worker that came back with a new host segment or other disk settings: the
      // tiers' indexes follow. A failure counts as the cache manager's, so that the next
      // attempt restores it first (it may have restarted since: a pool to configure again).
      attempt->cache = cache_->SetTiers(workers_->tiers());
    }
    attempt->done.Notify();
  });
  return true;
}

void Recovery::Finished(absl::Time now, const absl::Status& cache, const absl::Status& workers) {
  cache_restored_ = cache.ok();
  const absl::Status& s = cache.ok() ? workers : cache;
  if (IsFenced(s)) {
    state_->fenced = s;  // a newer scheduler holds the replica: nothing to restore
    LOG(ERROR) << "recovery stops: " << s;
    recovering_.Set(0);
    begun_ = false;
    return;
  }
  if (!s.ok()) {
    next_attempt_ = now + backoff_;
    backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    LOG_EVERY_N(INFO, 20) << "still recovering after " << attempts_ << " attempts: " << s;
    return;
  }
  const absl::Time restored = absl::Now();
  LOG(WARNING) << "replica recovered after " << absl::FormatDuration(restored - lost_at_)
               << " (" << attempts_ << " attempts); " << state_->waiting.size()
               << " requests resume, recomputed from their tokens so far";
  recovery_seconds_.Observe(absl::ToDoubleSeconds(restored - lost_at_));
  recovering_.Set(0);
  state_->loss.reset();
  begun_ = false;
  restored_at_ = restored;
  awaiting_first_step_ = true;
}

void Recovery::OnStep(absl::Time now, bool sampled) {
  waiting_since_.clear();
  if (!awaiting_first_step_ || !sampled) return;
  awaiting_first_step_ = false;
  LOG(INFO) << "first token after recovery sampled "
            << absl::FormatDuration(now - restored_at_) << " after the processes were set up";
  first_token_seconds_.Observe(absl::ToDoubleSeconds(now - restored_at_));
}

}  // namespace folio::scheduler
