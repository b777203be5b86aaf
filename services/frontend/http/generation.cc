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
// from. Every loss of the scheduler (unreachable, gone mid-stream) is UNAVAILABLE.
absl::Status FromScheduler(const grpc::Status& status) {
  const absl::Status s = FromGrpcStatus(status);
  const char* prefix = s.code() == absl::StatusCode::kUnavailable ? "scheduler unavailable: "
                                                                  : "scheduler: ";
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

Generation::Generation(std::shared_ptr<const ModelContext> model,
                       const ValidatedRequest& request, int32_t n, Listener listener,
                       const std::vector<int32_t>& preserved_tokens)
    : model_(std::move(model)),
      want_logprobs_(request.logprobs.has_value()),
      max_top_logprobs_(request.logprobs.value_or(0)),
      listener_(std::move(listener)),
      choices_(static_cast<size_t>(std::max(n, 1))) {
  for (Choice& c : choices_) {
    c.text.emplace(model_->tokenizer(), request.stop, request.prompt_token_ids,
                   preserved_tokens);
  }
  num_prompt_tokens_ = static_cast<int32_t>(request.prompt_token_ids.size());
  request_ = ToScheduleRequest(request);
  request_.set_n(n);
}

std::shared_ptr<Generation> Generation::Start(std::shared_ptr<const ModelContext> model,
                                              routing::StreamRouter* router,
                                              const ValidatedRequest& request, int32_t n,
                                              ResumeOptions resume, CallTracker* calls,
                                              Listener listener,
                                              std::vector<int32_t> preserved_tokens) {
  std::shared_ptr<Generation> g(new Generation(std::move(model), request, n,
                                               std::move(listener), preserved_tokens));
  g->self_ = g;
  g->stream_ = ResumableStream::Start(router, g->request_, absl::InfiniteFuture(), resume,
                                      g.get(), calls);
  g->stream_->Read();
  // From here on reads come only from OnEvent.
  g->stream_->Release();
  return g;
}

openai::Usage Generation::usage() const {
  openai::Usage u;
  u.prompt_tokens = num_prompt_tokens_;
  u.cached_prompt_tokens = num_cached_prompt_tokens_;
  for (const Choice& c : choices_) u.completion_tokens += c.text->num_tokens();
  return u;
}

bool Generation::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(),
                     [](const Choice& c) { return c.finished; });
}

void Generation::OnEvent(const ipb::ScheduleEvent& event) {
  if (all_finished() || !error_.ok()) {
    // Drain what the scheduler still sends so that its stream can end.
    stream_->Read();
    return;
  }
  Update update;
  const bool cancel = HandleEvent(event, &update.deltas);
  if (!update.deltas.empty()) listener_(std::move(update));
  stream_->Read();
  if (cancel) stream_->Cancel();
}

void Generation::OnEnd(const grpc::Status& status) {
  Update last;
  last.done = true;
  last.usage = usage();
  if (!error_.ok()) {
    last.status = error_;
  } else if (all_finished()) {
    last.status = absl::OkStatus();  // whatever ended the stream after the last choice
  } else if (!status.ok()) {
    last.status = FromScheduler(status);
    // The scheduler went away mid-stream (not cancelled here): an upstream loss.
    if (!cancelled_.load() && (last.status.code() == absl::StatusCode::kCancelled ||
                               last.status.code() == absl::StatusCode::kUnknown)) {
      last.status = absl::UnavailableError(
          absl::StrCat("scheduler unavailable: the stream broke: ", status.error_message()));
    }
  } else {
    last.status = absl::UnavailableError(
        "scheduler unavailable: it ended the stream without a finish reason");
  }
  Listener listener = std::move(listener_);
  listener(std::move(last));
  std::shared_ptr<Generation> keep = std::move(self_);  // may delete this at scope exit
}

bool Generation::HandleEvent(const ipb::ScheduleEvent& event,
                             std::vector<openai::ChoiceDelta>* deltas) {
  if (event.num_prompt_tokens() > 0) num_prompt_tokens_ = event.num_prompt_tokens();
  if (event.num_cached_prompt_tokens() > 0) {
    num_cached_prompt_tokens_ = event.num_cached_prompt_tokens();
  }
  if (event.index() < 0 || event.index() >= static_cast<int32_t>(choices_.size())) {
    error_ = absl::InternalError(absl::StrCat("scheduler sent choice index ", event.index(),
                                              " for a request of ", choices_.size()));
    return true;
  }
  Choice& choice = choices_[event.index()];
  if (choice.finished) return false;  // a stop string already ended it

  std::vector<int32_t> ids;
  for (const ipb::GeneratedToken& t : event.tokens()) ids.push_back(t.token_id());
  absl::StatusOr<CompletionText::Delta> delta = choice.text->AddTokens(ids);
  if (!delta.ok()) {
    error_ = absl::InternalError(
        absl::StrCat("scheduler sent a bad token: ", delta.status().message()));
    return true;
  }
  const Tokenizer& tokenizer = model_->tokenizer();
  openai::ChoiceDelta out;
  out.index = event.index();
  out.text = std::move(delta->text);
  for (int i = 0; i < delta->num_tokens_used; ++i) {
    const ipb::GeneratedToken& t = event.tokens(i);
    openai::TokenOut token;
    token.id = t.token_id();
    token.text = TokenDisplayText(tokenizer, t.token_id());
    if (want_logprobs_) {
      token.logprob = t.logprob();
      const int k = std::min(t.top_logprobs_size(), max_top_logprobs_);
      for (int j = 0; j < k; ++j) {
        token.top_logprobs.emplace_back(TokenDisplayText(tokenizer, t.top_logprobs(j).token_id()),
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
    error_ = absl::InternalError("scheduler: the request failed (finish reason ERROR)");
    return true;
  } else if (event.finish_reason() != ipb::FINISH_REASON_UNSPECIFIED) {
    CompletionText::Delta rest = choice.text->Finish();
    out.text += rest.text;
    out.finish_reason = rest.stopped ? "stop" : FinishReasonText(event.finish_reason());
  }
  if (!out.finish_reason.empty()) choice.finished = true;
  if (!out.text.empty() || !out.tokens.empty() || !out.finish_reason.empty()) {
    deltas->push_back(std::move(out));
  }
  // A stop string ended the last choice: the scheduler would keep generating.
  return stopped_by_string && all_finished();
}

}  // namespace folio::frontend
