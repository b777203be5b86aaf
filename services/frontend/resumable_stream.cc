#include "services/frontend/resumable_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/stream_resume.h"
#include "glog/logging.h"

namespace folio::frontend {
namespace ipb = folio::internal::v1;

// One submission of the request: the scheduler call and its buffers. Owned by itself from
// its start until its OnDone (and by the stream while it is the current one).
class ResumableStream::Attempt final : public grpc::ClientReadReactor<ipb::ScheduleEvent> {
 public:
  explicit Attempt(std::shared_ptr<ResumableStream> stream)
      : hold(stream->hold_.Another()), stream_(std::move(stream)) {}

  void OnReadDone(bool ok) override {
    if (ok) {
      stream_->OnAttemptEvent(this);
      return;
    }
    // The stream ended (OnDone follows): no read can come from outside any more.
    bool release = false;
    {
      absl::MutexLock lock(&stream_->mu_);
      read_in_flight = false;
      over = true;
      stream_->read_wanted_ = true;  // the listener's read is still owed an event
      release = std::exchange(held, false);
    }
    if (release) RemoveHold();
  }

  void OnDone(const grpc::Status& status) override {
    const auto& trailers = ctx.GetServerTrailingMetadata();
    const bool final_error = trailers.find(kFinalErrorTrailer) != trailers.end();
    std::shared_ptr<ResumableStream> stream = std::move(stream_);
    std::shared_ptr<Attempt> keep = std::move(self);  // may delete this at scope exit
    stream->OnAttemptEnd(this, status, final_error);
  }

  const CallTracker::Hold hold;  // first: released after the context is gone
  std::shared_ptr<routing::RouteLease> lease;  // the replica's count of this attempt
  std::string replica;                         // where it runs
  grpc::ClientContext ctx;
  ipb::ScheduleRequest request;
  ipb::ScheduleEvent event;
  std::shared_ptr<Attempt> self;  // until OnDone
  // Guarded by the stream's mu_.
  bool read_in_flight = false;
  bool over = false;  // its reads have ended
  bool held = false;  // a hold keeps the call from finishing before outside reads

 private:
  std::shared_ptr<ResumableStream> stream_;
};

ResumableStream::ResumableStream(routing::StreamRouter* router, ipb::ScheduleRequest request,
                                 absl::Time deadline, ResumeOptions options, Listener* listener,
                                 CallTracker* calls)
    : hold_(CallTracker::Enter(calls)),
      router_(router),
      request_(std::move(request)),
      deadline_(deadline),
      options_(options),
      listener_(listener) {
  const size_t n = static_cast<size_t>(std::max(request_.n(), 1));
  streamed_.resize(n);
  finished_.assign(n, false);
  backoff_ = options_.first_backoff;
}

std::shared_ptr<ResumableStream> ResumableStream::Start(routing::StreamRouter* router,
                                                        ipb::ScheduleRequest request,
                                                        absl::Time deadline,
                                                        ResumeOptions options,
                                                        Listener* listener,
                                                        CallTracker* calls) {
  std::shared_ptr<ResumableStream> s(
      new ResumableStream(router, std::move(request), deadline, options, listener, calls));
  std::optional<grpc::Status> end;
  {
    absl::MutexLock lock(&s->mu_);
    s->self_ = s;
    end = s->StartAttempt();
  }
  if (end.has_value()) s->End(*end);
  return s;
}

ipb::ScheduleRequest ResumableStream::ContinuationOf(const ipb::ScheduleRequest& request,
                                                     const std::vector<std::vector<int32_t>>& streamed,
                                                     const std::vector<bool>& finished) {
  const bool any = std::any_of(streamed.begin(), streamed.end(),
                               [](const std::vector<int32_t>& t) { return !t.empty(); });
  if (request.beam_width() > 0 || !any) return request;
  ipb::ScheduleRequest out = request;
  ipb::Continuation* c = out.mutable_continuation();
  for (size_t i = 0; i < streamed.size(); ++i) {
    if (finished[i]) continue;
    ipb::ContinuedChoice* choice = c->add_choices();
    choice->set_index(static_cast<int32_t>(i));
    choice->mutable_token_ids()->Assign(streamed[i].begin(), streamed[i].end());
  }
  return out;
}

std::optional<grpc::Status> ResumableStream::StartAttempt() {
  absl::StatusOr<routing::StreamRouter::Target> target = router_->Route(request_, broken_replica_);
  if (!target.ok()) {
    return WaitToResume(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                     std::string(target.status().message())));
  }
  auto a = std::make_shared<Attempt>(shared_from_this());
  a->self = a;
  a->replica = target->replica;
  a->lease = std::move(target->lease);
  a->request = num_resumes_ == 0 ? request_ : ContinuationOf(request_, streamed_, finished_);
  if (deadline_ != absl::InfiniteFuture()) a->ctx.set_deadline(absl::ToChronoTime(deadline_));
  target->stub->async()->Generate(&a->ctx, &a->request, a.get());
  if (!released_) {
    a->AddHold();
    a->held = true;
  }
  attempt_ = a;
  if (read_wanted_) {
    read_wanted_ = false;
    a->read_in_flight = true;
    a->StartRead(&a->event);
  }
  a->StartCall();
  return std::nullopt;
}

void ResumableStream::Read() {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  Attempt* a = attempt_.get();
  if (a == nullptr || a->over) {
    read_wanted_ = true;  // the next attempt starts with it
    return;
  }
  a->read_in_flight = true;
  a->StartRead(&a->event);
}

void ResumableStream::Release() {
  std::shared_ptr<Attempt> a;
  {
    absl::MutexLock lock(&mu_);
    released_ = true;
    if (attempt_ != nullptr && std::exchange(attempt_->held, false)) a = attempt_;
  }
  if (a != nullptr) a->RemoveHold();
}

void ResumableStream::Cancel() {
  std::shared_ptr<Attempt> a;
  grpc::Alarm* alarm = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (ended_ || cancelled_) return;
    cancelled_ = true;
    a = attempt_;
    if (alarm_set_) alarm = alarm_.get();
  }
  // Outside the lock: cancelling may run reactions.
  if (a != nullptr) a->ctx.TryCancel();
  if (alarm != nullptr) alarm->Cancel();
}

int ResumableStream::num_resumes() const {
  absl::MutexLock lock(&mu_);
  return num_resumes_;
}

void ResumableStream::OnAttemptEvent(Attempt* a) {
  {
    absl::MutexLock lock(&mu_);
    a->read_in_flight = false;
    broke_at_.reset();  // progress: a later break gets a full recovery window
    backoff_ = options_.first_backoff;
    ipb::ScheduleEvent& e = a->event;
    const int32_t index = e.index();
    if (!num_cached_prompt_tokens_.has_value()) {
      num_cached_prompt_tokens_ = e.num_cached_prompt_tokens();
      a->lease->ReportCachedTokens(e.num_cached_prompt_tokens());
    } else {
      // As the first scheduler counted them: a recomputed prompt may hit other caches.
      e.set_num_cached_prompt_tokens(*num_cached_prompt_tokens_);
    }
    if (index >= 0 && index < static_cast<int32_t>(finished_.size())) {
      if (finished_[index]) {
        // A beam search done again after a break: this choice was handed over already.
        a->read_in_flight = true;
        a->StartRead(&a->event);
        return;
      }
      for (const ipb::GeneratedToken& t : e.tokens()) streamed_[index].push_back(t.token_id());
      if (e.finish_reason() != ipb::FINISH_REASON_UNSPECIFIED) finished_[index] = true;
    }
  }
  listener_->OnEvent(a->event);
}

void ResumableStream::OnAttemptEnd(Attempt* a, const grpc::Status& status, bool final_error) {
  grpc::Status end;
  {
    absl::MutexLock lock(&mu_);
    if (attempt_.get() == a) attempt_.reset();
    if (ended_) return;
    const bool all_finished =
        std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; });
    const bool resumable = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                           !final_error && !cancelled_ && !all_finished &&
                           options_.recovery_timeout > absl::ZeroDuration();
    if (!resumable) {
      end = all_finished && !cancelled_ ? grpc::Status::OK : status;
    } else {
      // The replica is lost to this stream: new work avoids it, and so does the next attempt.
      a->lease->ReportBroken();
      broken_replica_ = a->replica;
      std::optional<grpc::Status> over = WaitToResume(status);
      if (!over.has_value()) return;
      end = *over;
    }
  }
  End(end);
}

std::optional<grpc::Status> ResumableStream::WaitToResume(const grpc::Status& status) {
  const absl::Time now = absl::Now();
  if (options_.recovery_timeout <= absl::ZeroDuration()) return status;
  if (!broke_at_.has_value()) {
    broke_at_ = now;
    break_status_ = status;
    LOG(WARNING) << "request " << request_.request_id() << ": the scheduler stream broke ("
                 << status.error_message() << "); waiting up to "
                 << absl::FormatDuration(options_.recovery_timeout)
                 << " for a scheduler to continue it";
  }
  const absl::Time give_up = std::min(deadline_, *broke_at_ + options_.recovery_timeout);
  if (now >= give_up) {
    return give_up == deadline_
               ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "the deadline passed while waiting for the scheduler")
               : grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              absl::StrCat("no scheduler took the stream over within ",
                                           absl::FormatDuration(options_.recovery_timeout),
                                           " (--recovery_timeout_ms) after it broke: ",
                                           break_status_.error_message()));
  }
  const absl::Time at = std::min(now + backoff_, give_up);
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  // The previous alarm (if any) has fired: it started the attempt that just ended.
  alarm_ = std::make_unique<grpc::Alarm>();
  alarm_set_ = true;
  std::weak_ptr<ResumableStream> weak = weak_from_this();
  alarm_->Set(absl::ToChronoTime(at), [weak](bool fired) {
    if (std::shared_ptr<ResumableStream> s = weak.lock()) s->OnAlarm(fired);
  });
  return std::nullopt;
}

void ResumableStream::OnAlarm(bool fired) {
  grpc::Status end(grpc::StatusCode::CANCELLED, "cancelled while waiting for the scheduler");
  {
    absl::MutexLock lock(&mu_);
    alarm_set_ = false;
    if (ended_) return;
    if (fired && !cancelled_) {
      ++num_resumes_;
      VLOG(1) << "request " << request_.request_id() << ": submitting it again (attempt "
              << num_resumes_ + 1 << ")";
      std::optional<grpc::Status> over = StartAttempt();
      if (!over.has_value()) return;
      end = *over;
    }
  }
  End(end);
}

void ResumableStream::End(const grpc::Status& status) {
  std::shared_ptr<ResumableStream> keep;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    keep = std::move(self_);
    if (num_resumes_ > 0) {
      LOG(INFO) << "request " << request_.request_id() << ": stream ended after "
                << num_resumes_ << " resubmission(s): "
                << (status.ok() ? std::string("OK") : status.error_message());
    }
  }
  listener_->OnEnd(status);
}

}  // namespace folio::frontend
