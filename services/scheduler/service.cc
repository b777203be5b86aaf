#include "services/scheduler/service.h"

#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/incarnation.h"
#include "common/stream_resume.h"
#include "glog/logging.h"

namespace folio::scheduler {
namespace pb = folio::internal::v1;

namespace {

// Every RPC's answer before Start(): the replica is still setting up.
grpc::Status Starting() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the cluster is starting");
}

pb::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return pb::FINISH_REASON_LENGTH;
    case FinishReason::kStop: return pb::FINISH_REASON_STOP;
    case FinishReason::kCancelled: return pb::FINISH_REASON_CANCELLED;
    case FinishReason::kError: return pb::FINISH_REASON_ERROR;
    case FinishReason::kNone: break;
  }
  return pb::FINISH_REASON_UNSPECIFIED;
}

absl::StatusOr<RequestSpec> FromProto(const pb::ScheduleRequest& req) {
  const pb::SamplingParams& s = req.sampling();
  if (s.temperature() < 0 || !(s.temperature() == s.temperature())) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be >= 0, got ", s.temperature()));
  }
  const float top_p = s.top_p() == 0 ? 1.0f : s.top_p();  // unset means off
  if (!(top_p > 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", s.top_p()));
  }
  if (s.top_k() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", s.top_k()));
  }
  if (!(s.min_p() >= 0 && s.min_p() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", s.min_p()));
  }
  if (req.num_logprobs() < 0 || req.num_logprobs() > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_logprobs must be in [0, 20], got ", req.num_logprobs()));
  }
  RequestSpec spec;
  spec.request_id = req.request_id();
  spec.prompt.assign(req.prompt_token_ids().begin(), req.prompt_token_ids().end());
  spec.sampling.temperature = s.temperature();
  spec.sampling.top_p = top_p;
  spec.sampling.top_k = s.top_k();
  spec.sampling.min_p = s.min_p();
  spec.sampling.seed = s.seed();
  spec.sampling.presence_penalty = s.presence_penalty();
  spec.sampling.frequency_penalty = s.frequency_penalty();
  // repetition_penalty must be > 0, so proto3's unset 0 can only mean "off" (1).
  spec.sampling.repetition_penalty = s.repetition_penalty() == 0.0f ? 1.0f : s.repetition_penalty();
  for (const pb::LogitBias& b : s.logit_bias()) {
    spec.sampling.logit_bias.push_back(worker::LogitBias{.token_id = b.token_id(), .bias = b.bias()});
  }
  spec.min_tokens = req.min_tokens();
  if (req.has_num_speculative_tokens()) {
    if (req.num_speculative_tokens() < 0 || req.num_speculative_tokens() > kMaxSpeculativeTokens) {
      return absl::InvalidArgumentError(absl::StrCat("num_speculative_tokens is ",
                                                     req.num_speculative_tokens(),
                                                     "; it must be in [0, ",
                                                     kMaxSpeculativeTokens, "]"));
    }
    spec.num_speculative_tokens = req.num_speculative_tokens();
  }
  spec.grammar = req.grammar();
  for (const pb::GrammarTrigger& t : req.grammar_triggers()) {
    structured::GrammarTrigger& g = spec.grammar_triggers.emplace_back();
    g.text = t.text();
    if (t.has_token_id()) g.token_id = t.token_id();
    g.at_start = t.at_start();
  }
  spec.max_tokens = req.max_tokens();
  spec.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  spec.ignore_eos = req.ignore_eos();
  spec.num_logprobs = req.num_logprobs();
  spec.n = req.n() == 0 ? 1 : req.n();
  spec.beam_width = req.beam_width();
  if (req.has_length_penalty()) spec.length_penalty = req.length_penalty();
  if (req.has_continuation()) {
    if (req.continuation().choices().empty()) {
      return absl::InvalidArgumentError("continuation: it names no unfinished choice");
    }
    for (const pb::ContinuedChoice& c : req.continuation().choices()) {
      spec.continuation.push_back(
          {.index = c.index(), .tokens = {c.token_ids().begin(), c.token_ids().end()}});
    }
  }
  return spec;
}

// Streams one request's events. The scheduler's sink may outlive the reactor (a request
// cancelled by its client still gets its final event), so the two share State, and the
// reactor detaches itself in OnDone.
class GenerateReactor final : public grpc::ServerWriteReactor<pb::ScheduleEvent> {
 public:
  GenerateReactor(grpc::CallbackServerContext* ctx, Scheduler* scheduler,
                  const pb::ScheduleRequest& request,
                  std::chrono::system_clock::time_point deadline)
      : scheduler_(scheduler), state_(std::make_shared<State>()) {
    state_->reactor = this;
    state_->ctx = ctx;
    state_->request_id = request.request_id();
    absl::StatusOr<RequestSpec> spec = FromProto(request);
    if (!spec.ok()) {
      LOG(WARNING) << "request " << request.request_id() << " rejected: " << spec.status();
      Finish(ToGrpcStatus(spec.status()));
      return;
    }
    if (deadline != std::chrono::system_clock::time_point::max()) {
      spec->deadline = absl::FromChrono(deadline);
    }
    std::shared_ptr<State> state = state_;
    absl::StatusOr<uint64_t> handle =
        scheduler_->Submit(*std::move(spec), [state](const RequestEvent& e) { state->Push(e); });
    if (!handle.ok()) {
      LOG(WARNING) << "request " << request.request_id() << " rejected: " << handle.status();
      Finish(ToGrpcStatus(handle.status()));
      return;
    }
    absl::MutexLock lock(&state_->mu);
    handle_ = *handle;
    submitted_ = true;
  }

  void OnWriteDone(bool ok) override { state_->WriteDone(ok, this); }

  void OnCancel() override {
    absl::MutexLock lock(&state_->mu);
    if (submitted_) scheduler_->Cancel(handle_);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->reactor = nullptr;
    }
    delete this;
  }

 private:
  struct State {
    absl::Mutex mu;
    GenerateReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    std::deque<pb::ScheduleEvent> queue ABSL_GUARDED_BY(mu);
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool done ABSL_GUARDED_BY(mu) = false;  // the final event has arrived
    grpc::Status final_status ABSL_GUARDED_BY(mu);
    std::string request_id;
    grpc::CallbackServerContext* ctx ABSL_GUARDED_BY(mu) = nullptr;  // while reactor is set

    void Push(const RequestEvent& e) {
      absl::MutexLock lock(&mu);
      if (reactor == nullptr || done) return;
      if (!e.tokens.empty() || e.finish == FinishReason::kLength ||
          e.finish == FinishReason::kStop) {
        pb::ScheduleEvent event;
        for (const GeneratedToken& t : e.tokens) {
          pb::GeneratedToken* out = event.add_tokens();
          out->set_token_id(t.token_id);
          out->set_logprob(t.logprob);
          for (const auto& lp : t.top_logprobs) {
            pb::TokenLogprob* alt = out->add_top_logprobs();
            alt->set_token_id(lp.token_id);
            alt->set_logprob(lp.logprob);
          }
        }
        event.set_index(e.index);
        event.set_cumulative_logprob(e.cumulative_logprob);
        event.set_finish_reason(ToProto(e.finish));
        event.set_num_prompt_tokens(e.num_prompt_tokens);
        event.set_num_cached_prompt_tokens(e.num_cached_prompt_tokens);
        queue.push_back(std::move(event));
      }
      if (e.request_done) {
        done = true;
        if (e.finish == FinishReason::kError) {
          final_status = ToGrpcStatus(e.error);
          // This scheduler's final word (common/stream_resume.h): not to be resumed.
          if (!IsResumable(e.error)) ctx->AddTrailingMetadata(kFinalErrorTrailer, "1");
        } else if (e.finish == FinishReason::kCancelled) {
          final_status = grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled");
        }
      }
      Pump();
    }

    void WriteDone(bool ok, GenerateReactor* r) {
      absl::MutexLock lock(&mu);
      writing = false;
      if (!queue.empty()) queue.pop_front();
      if (!ok) {  // the client is gone; OnCancel takes care of the request
        queue.clear();
        return;
      }
      Pump();
    }

    // Starts the next write, or finishes once everything is written.
    void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      if (writing || reactor == nullptr) return;
      if (!queue.empty()) {
        writing = true;
        reactor->StartWrite(&queue.front());
      } else if (done) {
        reactor->Finish(final_status);
        done = false;  // finish once
        reactor = nullptr;
      }
    }
  };

  Scheduler* const scheduler_;
  std::shared_ptr<State> state_;
  uint64_t handle_ = 0;    // guarded by state_->mu
  bool submitted_ = false; // guarded by state_->mu
};

// A stream answered with an error before anything is submitted.
class RejectedStream final : public grpc::ServerWriteReactor<pb::ScheduleEvent> {
 public:
  explicit RejectedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

void SchedulerService::Start(Scheduler* scheduler, const pb::ClusterInfo& info) {
  absl::MutexLock lock(&mu_);
  info_ = info;
  scheduler_ = scheduler;
}

Scheduler* SchedulerService::ready() const {
  absl::MutexLock lock(&mu_);
  return scheduler_;
}

grpc::ServerUnaryReactor* SchedulerService::GetClusterInfo(grpc::CallbackServerContext* ctx,
                                                           const pb::GetClusterInfoRequest* req,
                                                           pb::ClusterInfo* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::MutexLock lock(&mu_);
  if (scheduler_ == nullptr) {
    reactor->Finish(Starting());
  } else {
    *resp = info_;
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<pb::ScheduleEvent>* SchedulerService::Generate(
    grpc::CallbackServerContext* ctx, const pb::ScheduleRequest* req) {
  Scheduler* scheduler = ready();
  if (scheduler == nullptr) {
    return new RejectedStream(Starting());
  }
  return new GenerateReactor(ctx, scheduler, *req, ctx->deadline());
}

grpc::ServerUnaryReactor* SchedulerService::GetSchedulerStats(
    grpc::CallbackServerContext* ctx, const pb::GetSchedulerStatsRequest* req,
    pb::SchedulerStats* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Scheduler* scheduler = ready();
  if (scheduler == nullptr) {
    reactor->Finish(Starting());
    return reactor;
  }
  const SchedulerStats s = scheduler->Stats();
  resp->set_num_running(s.num_running);
  resp->set_num_waiting(s.num_waiting);
  resp->set_num_preemptions(s.num_preemptions);
  resp->set_num_steps(s.num_steps);
  resp->set_prompt_tokens(s.prompt_tokens);
  resp->set_generation_tokens(s.generation_tokens);
  resp->set_prefix_cache_hit_tokens(s.prefix_cache_hit_tokens);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

SchedulerService::SchedulerService(std::shared_ptr<grpc::ChannelInterface> cachemgr)
    : cachemgr_(cachemgr == nullptr ? nullptr : pb::CacheManager::NewStub(std::move(cachemgr))),
      incarnation_id_(NewIncarnationId()) {}

grpc::ServerUnaryReactor* SchedulerService::GetReplicaState(grpc::CallbackServerContext* ctx,
                                                            const pb::ReplicaStateRequest* req,
                                                            pb::ReplicaState* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Scheduler* scheduler = ready();
  if (scheduler == nullptr) {
    reactor->Finish(Starting());
    return reactor;
  }
  const SchedulerStats s = scheduler->Stats();
  resp->set_num_running(s.num_running);
  resp->set_num_waiting(s.num_waiting);
  resp->set_num_tokens_pending(s.num_tokens_pending);
  resp->set_incarnation_id(incarnation_id_);
  if (cachemgr_ == nullptr) {
    resp->set_block_events_error("this scheduler has no cache manager channel");
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // The relay: one call to the cache manager, finished from its callback.
  struct Relay {
    grpc::ClientContext context;
    pb::BlockEventsRequest request;
    pb::BlockEvents events;
  };
  auto* relay = new Relay;
  relay->request = req->block_events();
  relay->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  cachemgr_->async()->GetBlockEvents(
      &relay->context, &relay->request, &relay->events,
      [relay, resp, reactor](grpc::Status status) {
        if (status.ok()) {
          resp->mutable_block_events()->Swap(&relay->events);
        } else {
          resp->set_block_events_error(absl::StrCat("cache manager: ", status.error_message()));
        }
        delete relay;
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

}  // namespace folio::scheduler
