// Generation: one request of the HTTP API run through the scheduler's Generate stream,
// asynchronously (grpc::ClientReadReactor): no thread waits for the scheduler.
//
// Each scheduler event becomes per-choice text deltas, each choice decoded and cut at stop
// strings by its own CompletionText (as the gRPC path does). Choices are told apart by the
// event's index (0..n-1). A stop string ends its choice; once every choice has ended, the
// scheduler call is cancelled (so it stops generating). Events are read as fast as the
// scheduler sends them: the HTTP side bounds what it buffers (a slow reader is cut, which
// cancels the generation).
//
// The listener receives the updates in order, one at a time, on gRPC callback threads; it
// must not block. The last update has done = true and the final status and usage; after
// it the Generation holds no reference to the listener and the scheduler call is over.
//
// A scheduler lost mid-stream is waited for and the request continued on its successor,
// unseen by the listener (resumable_stream.h).
//
// Thread-safe: Cancel() may be called from any thread at any time, before or after the
// end. The object lives until both the caller's reference and the scheduler call are gone.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "services/frontend/cluster_info.h"
#include "services/frontend/completion_text.h"
#include "services/frontend/http/openai_json.h"
#include "services/frontend/resumable_stream.h"

namespace folio::frontend {

class Generation final : public ResumableStream::Listener {
 public:
  struct Update {
    std::vector<openai::ChoiceDelta> deltas;  // possibly empty on the last update
    bool done = false;                        // the last update
    absl::Status status;                      // last update: OK, or why it failed
    openai::Usage usage;                      // last update: the request's usage
  };
  using Listener = std::function<void(Update)>;

  // Starts the scheduler call for `request` with `n` choices. `router` must outlive the
  // call (the server waits for every generation to end before it goes); `calls` counts
  // its gRPC stream until gRPC is done with it (call_tracker.h). `preserved_tokens` are
  // control tokens decoded to their text (CompletionText), for a tool-call parser.
  static std::shared_ptr<Generation> Start(std::shared_ptr<const ModelContext> model,
                                           routing::StreamRouter* router,
                                           const ValidatedRequest& request, int32_t n,
                                           ResumeOptions resume, CallTracker* calls,
                                           Listener listener,
                                           std::vector<int32_t> preserved_tokens = {});
  ~Generation() override = default;

  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Cancels the scheduler call (which aborts the request and frees its blocks); the last
  // update follows with CANCELLED unless every choice had already finished.
  void Cancel() {
    cancelled_.store(true);
    stream_->Cancel();
  }

  void OnEvent(const folio::internal::v1::ScheduleEvent& event) override;
  void OnEnd(const grpc::Status& status) override;

 private:
  Generation(std::shared_ptr<const ModelContext> model, const ValidatedRequest& request,
             int32_t n, Listener listener, const std::vector<int32_t>& preserved_tokens);
  struct Choice {
    std::optional<CompletionText> text;
    bool finished = false;
  };
  // Turns event_ into deltas. Sets error_ on a bad event. Returns true when the call must
  // be cancelled (a stop string ended the last choice, or the event was bad).
  bool HandleEvent(const folio::internal::v1::ScheduleEvent& event,
                   std::vector<openai::ChoiceDelta>* deltas);
  openai::Usage usage() const;
  bool all_finished() const;

  const std::shared_ptr<const ModelContext> model_;
  const bool want_logprobs_;
  const int32_t max_top_logprobs_;
  Listener listener_;
  std::shared_ptr<Generation> self_;  // held until OnEnd
  std::shared_ptr<ResumableStream> stream_;  // set by Start
  folio::internal::v1::ScheduleRequest request_;
  // Touched only by the stream's callbacks, which come one at a time.
  std::vector<Choice> choices_;
  int32_t num_prompt_tokens_ = 0;
  int32_t num_cached_prompt_tokens_ = 0;
  absl::Status error_;  // a bad event seen here
  std::atomic<bool> cancelled_{false};  // Cancel() was called
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_H_
