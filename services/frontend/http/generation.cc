#include "services/frontend/http/generation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "services/frontend/generate_call.h"

namespace folio::frontend {
namespace ipb = folio::internal::v1;

namespace {

const char* FinishReasonText(ipb::FinishReason reason) {
  return reason == ipb::FINISH_REASON_LENGTH ? "length" : "stop";
}

// As the gRPC path reports them: the scheduler's code, the message saying where it came
// from.
absl::Status FromScheduler(const grpc::Status& status) {
  const absl::Status s = FromGrpcStatus(status);
  const char* prefix = s.code() == absl::StatusCode::kUnavailable ? "scheduler unavailable: "
                                                                  : "scheduler: ";
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

Generation::Generation(const ModelContext& model, ipb::Scheduler::Stub* scheduler,
                       const ValidatedRequest& request, int32_t n)
    : model_(model),
      want_logprobs_(request.logprobs.has_value()),
      max_top_logprobs_(request.logprobs.value_or(0)),
      choices_(static_cast<size_t>(std::max(n, 1))) {
  for (Choice& c : choices_) {
    c.text.emplace(model.tokenizer(), request.stop, request.prompt_token_ids);
  }
  num_prompt_tokens_ = static_cast<int32_t>(request.prompt_token_ids.size());
  ipb::ScheduleRequest schedule = ToScheduleRequest(request);
  schedule.set_n(n);
  reader_ = scheduler->Generate(&ctx_, schedule);
}

Generation::~Generation() {
  if (!stream_closed_) {
    ctx_.TryCancel();
    Drain();
  }
}

grpc::Status Generation::Drain() {
  ipb::ScheduleEvent event;
  while (reader_->Read(&event)) {
  }
  stream_closed_ = true;
  return reader_->Finish();
}

openai::Usage Generation::usage() const {
  openai::Usage u;
  u.prompt_tokens = num_prompt_tokens_;
  u.cached_prompt_tokens = num_cached_prompt_tokens_;
  for (const Choice& c : choices_) u.completion_tokens += c.text->num_tokens();
  return u;
}

absl::Status Generation::Next(std::vector<openai::ChoiceDelta>* deltas) {
  deltas->clear();
  if (done_) return absl::OkStatus();
  ipb::ScheduleEvent event;
  if (!reader_->Read(&event)) {
    done_ = true;
    stream_closed_ = true;
    const grpc::Status status = reader_->Finish();
    if (!status.ok()) return FromScheduler(status);
    const bool all_finished = std::all_of(choices_.begin(), choices_.end(),
                                          [](const Choice& c) { return c.finished; });
    if (!all_finished) {
      return absl::InternalError("scheduler ended the stream without a finish reason");
    }
    return absl::OkStatus();
  }
  if (event.num_prompt_tokens() > 0) num_prompt_tokens_ = event.num_prompt_tokens();
  if (event.num_cached_prompt_tokens() > 0) {
    num_cached_prompt_tokens_ = event.num_cached_prompt_tokens();
  }
  if (event.index() < 0 || event.index() >= static_cast<int32_t>(choices_.size())) {
    done_ = true;
    Cancel();
    return absl::InternalError(absl::StrCat("scheduler sent choice index ", event.index(),
                                            " for a request of ", choices_.size()));
  }
  Choice& choice = choices_[event.index()];
  if (choice.finished) return absl::OkStatus();  // a stop string already ended it

  std::vector<int32_t> ids;
  for (const ipb::GeneratedToken& t : event.tokens()) ids.push_back(t.token_id());
  absl::StatusOr<CompletionText::Delta> delta = choice.text->AddTokens(ids);
  if (!delta.ok()) {
    done_ = true;
    Cancel();
    return absl::InternalError(
        absl::StrCat("scheduler sent a bad token: ", delta.status().message()));
  }
  openai::ChoiceDelta out;
  out.index = event.index();
  out.text = std::move(delta->text);
  for (int i = 0; i < delta->num_tokens_used; ++i) {
    const ipb::GeneratedToken& t = event.tokens(i);
    openai::TokenOut token;
    token.id = t.token_id();
    token.text = TokenDisplayText(model_.tokenizer(), t.token_id());
    if (want_logprobs_) {
      token.logprob = t.logprob();
      const int k = std::min(t.top_logprobs_size(), max_top_logprobs_);
      for (int j = 0; j < k; ++j) {
        token.top_logprobs.emplace_back(
            TokenDisplayText(model_.tokenizer(), t.top_logprobs(j).token_id()),
            t.top_logprobs(j).logprob());
      }
    }
    out.tokens.push_back(std::move(token));
  }
  bool stopped_by_string = false;
  if (delta->stopped) {
    out.finish_reason = "stop";
    stopped_by_string = true;
  } else if (event.finish_reason() == ipb::FINISH_REASON_ERROR) {
    done_ = true;
    Cancel();
    return absl::InternalError("scheduler: the request failed (finish reason ERROR)");
  } else if (event.finish_reason() != ipb::FINISH_REASON_UNSPECIFIED) {
    CompletionText::Delta rest = choice.text->Finish();
    out.text += rest.text;
    out.finish_reason = rest.stopped ? "stop" : FinishReasonText(event.finish_reason());
  }
  if (!out.finish_reason.empty()) choice.finished = true;
  if (!out.text.empty() || !out.tokens.empty() || !out.finish_reason.empty()) {
    deltas->push_back(std::move(out));
  }
  if (std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished; })) {
    done_ = true;
    // A stop string ended the last choice: the scheduler would keep generating.
    if (stopped_by_string) Cancel();
    Drain();
  }
  return absl::OkStatus();
}

}  // namespace folio::frontend
