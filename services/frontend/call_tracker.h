// CallTracker: counts the scheduler streams (and their gRPC attempts) an owner has started,
// so that its shutdown can wait until gRPC has let go of every one of them.
//
// A stream's listener hears the end (ResumableStream::Listener::OnEnd) from inside the
// call's last gRPC callback, before that callback has destroyed the call's context. An
// owner that unregisters the request there, and is then destroyed (or lets the process
// exit), would race gRPC's clean-up of that call: the last gRPC object going runs
// grpc_shutdown while a callback thread still unrefs the call. So each tracked object
// holds a CallTracker::Hold as its first member (destroyed last), and the owner's
// shutdown waits for WaitIdle().
//
// Holds share the tracker's state, so a Hold outliving its tracker (after a WaitIdle that
// timed out) is safe. Thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_CALL_TRACKER_H_
#define FOLIO_SERVICES_FRONTEND_CALL_TRACKER_H_

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace folio::frontend {

class CallTracker {
  struct State {
    absl::Mutex mu;
    int live ABSL_GUARDED_BY(mu) = 0;
  };

 public:
  // One live object; an empty Hold (default) tracks nothing. Move-only.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : state_(std::move(other.state_)) {}
    Hold& operator=(Hold&& other) noexcept {
      Release();
      state_ = std::move(other.state_);
      return *this;
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { Release(); }

    // Another hold on the same tracker (empty when this one is).
    Hold Another() const { return state_ == nullptr ? Hold() : Hold(state_); }

   private:
    friend class CallTracker;
    explicit Hold(std::shared_ptr<State> state) : state_(std::move(state)) {
      absl::MutexLock lock(&state_->mu);
      ++state_->live;
    }
    void Release() {
      if (state_ == nullptr) return;
      {
        absl::MutexLock lock(&state_->mu);
        --state_->live;
      }
      state_.reset();
    }
    std::shared_ptr<State> state_;
  };

  // A hold on this tracker; `tracker` may be null (then an empty hold).
  static Hold Enter(CallTracker* tracker) {
    return tracker == nullptr ? Hold() : Hold(tracker->state_);
  }

  // Waits until no hold is live; false when `timeout` passed first.
  bool WaitIdle(absl::Duration timeout) const {
    State& s = *state_;
    auto idle = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.live == 0; };
    absl::MutexLock lock(&s.mu);
    return s.mu.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }

  int live() const {
    absl::MutexLock lock(&state_->mu);
    return state_->live;
  }

 private:
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CALL_TRACKER_H_
