// ResumableStream: the frontend's side of one scheduler Generate stream, which survives
// the loss of the scheduler.
//
// It remembers, per choice, every token it has handed to its listener and whether the
// choice has finished. When the stream breaks with UNAVAILABLE (the scheduler died, is
// restarting, or was fenced by a newer one), and the scheduler did not mark the error as
// its final word (common/stream_resume.h), it waits with backoff (50 ms doubling to
// 250 ms) and submits the request again, to the replica its StreamRouter picks (with many
// replicas, another one than the replica that broke, while another can take it):
//   * sampling: the original request plus a Continuation (scheduler.proto) naming the
//     unfinished choices and their tokens so far; the scheduler recomputes them and
//     streams only new tokens, exactly those of an undisturbed run (draws are keyed by
//     seed, choice and position; penalties read the choice's own history);
//   * beam search (nothing streams until it ends): the original request again; events of
//     choices already handed over are dropped.
// A scheduler that is not up yet answers UNAVAILABLE at once, and the wait goes on. The
// wait ends at the request's deadline, or `recovery_timeout` after the break (the clock
// restarts whenever an event arrives), with UNAVAILABLE naming --recovery_timeout_ms.
// So the listener sees one unbroken stream: the events as an undisturbed run would send
// them (num_cached_prompt_tokens kept as the first scheduler reported it), then one end.
//
// The listener contract mirrors grpc::ClientReadReactor: Read() asks for the next event
// (one at a time); OnEvent() delivers it (the event is valid until the next Read());
// OnEnd() comes exactly once, last. Until Release(), the gRPC call is held open so that
// Read() may come from any thread; after it, the listener calls Read() only from within
// OnEvent (so a finished call may be freed). Cancel() ends the stream (OnEnd with
// CANCELLED, or whatever came first).
//
// Thread-safe. Listener callbacks run on gRPC threads with no lock of this class held;
// the listener may call Read(), Release() and Cancel() from them.
#ifndef FOLIO_SERVICES_FRONTEND_RESUMABLE_STREAM_H_
#define FOLIO_SERVICES_FRONTEND_RESUMABLE_STREAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"
#include "services/frontend/call_tracker.h"
#include "services/frontend/routing/stream_router.h"

namespace folio::frontend {

struct ResumeOptions {
  // How long a broken stream waits for a scheduler to take it over (--recovery_timeout_ms);
  // 0 turns resuming off (a break ends the stream at once).
  absl::Duration recovery_timeout = absl::Seconds(60);
  absl::Duration first_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Milliseconds(250);
};

class ResumableStream : public std::enable_shared_from_this<ResumableStream> {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnEvent(const folio::internal::v1::ScheduleEvent& event) = 0;
    // OK when the scheduler ended the stream normally; otherwise why it failed.
    virtual void OnEnd(const grpc::Status& status) = 0;
  };

  // Starts the stream of `request` under `deadline` (infinite: none), each attempt on the
  // replica `router` picks. `router` and `listener` must outlive the stream's OnEnd. No
  // read is started: call Read(). `calls` (may be null) counts the stream and its attempts
  // until gRPC is done with them (call_tracker.h); it must outlive them, or its owner
  // must WaitIdle.
  static std::shared_ptr<ResumableStream> Start(routing::StreamRouter* router,
                                                folio::internal::v1::ScheduleRequest request,
                                                absl::Time deadline, ResumeOptions options,
                                                Listener* listener,
                                                CallTracker* calls = nullptr);

  void Read();
  void Release();
  void Cancel();

  // How many times the stream was submitted again (for logs and tests).
  int num_resumes() const;

  // The continuation for a request after `streamed` tokens per choice (`finished`
  // choices left out): the request itself when nothing was streamed, or for beam search.
  static folio::internal::v1::ScheduleRequest ContinuationOf(
      const folio::internal::v1::ScheduleRequest& request,
      const std::vector<std::vector<int32_t>>& streamed, const std::vector<bool>& finished);

 private:
  class Attempt;
  ResumableStream(routing::StreamRouter* router,
                  folio::internal::v1::ScheduleRequest request, absl::Time deadline,
                  ResumeOptions options, Listener* listener, CallTracker* calls);

  // Submits the request (again) where the router says. When no replica can take it, waits
  // as after a break; returns the status to End with (outside the lock) when that wait is
  // over or resuming is off.
  std::optional<grpc::Status> StartAttempt() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a break with `status`: schedules the next attempt (nullopt), or returns the
  // status to End with when the recovery window or the deadline has passed.
  std::optional<grpc::Status> WaitToResume(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAttemptEvent(Attempt* attempt);
  void OnAttemptEnd(Attempt* attempt, const grpc::Status& status, bool final_error);
  void OnAlarm(bool fired);
  // Ends the stream: OnEnd(status) once, outside the lock.
  void End(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const CallTracker::Hold hold_;  // first: released last
  routing::StreamRouter* const router_;
  const folio::internal::v1::ScheduleRequest request_;
  const absl::Time deadline_;
  const ResumeOptions options_;
  Listener* const listener_;

  mutable absl::Mutex mu_;
  std::shared_ptr<Attempt> attempt_ ABSL_GUARDED_BY(mu_);  // null while waiting
  std::shared_ptr<ResumableStream> self_ ABSL_GUARDED_BY(mu_);  // until End
  bool read_wanted_ ABSL_GUARDED_BY(mu_) = false;  // Read() while no attempt could take it
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // What the listener has been handed, by choice.
  std::vector<std::vector<int32_t>> streamed_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> finished_ ABSL_GUARDED_BY(mu_);
  std::optional<int32_t> num_cached_prompt_tokens_ ABSL_GUARDED_BY(mu_);
  // The replica of the attempt that broke last: the next attempt avoids it if it can.
  std::string broken_replica_ ABSL_GUARDED_BY(mu_);
  // The wait after a break.
  std::optional<absl::Time> broke_at_ ABSL_GUARDED_BY(mu_);
  grpc::Status break_status_ ABSL_GUARDED_BY(mu_);
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);  // one per wait
  bool alarm_set_ ABSL_GUARDED_BY(mu_) = false;
  int num_resumes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_RESUMABLE_STREAM_H_
