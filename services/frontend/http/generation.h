// Generation: one request of the HTTP API run through the scheduler's Generate stream.
//
// The HTTP server gives each connection a thread, so this is a blocking reader: Next()
// waits for the scheduler's next event and turns it into per-choice text deltas, each
// choice decoded and cut at stop strings by its own CompletionText (as the gRPC path
// does). Choices are told apart by the event's index (0..n-1), so n > 1 works as soon as
// the scheduler streams several samples.
//
// A stop string ends its choice; once every choice has ended, the scheduler call is
// cancelled (so it stops generating). Cancel() may be called from another thread at any
// time; destroying a Generation that has not finished cancels its scheduler call, which
// aborts the request and frees its blocks.
//
// Thread-compatible, except Cancel(), which is thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "services/frontend/cluster_info.h"
#include "services/frontend/completion_text.h"
#include "services/frontend/http/openai_json.h"

namespace folio::frontend {

class Generation {
 public:
  // Starts the scheduler call for `request` with `n` choices. `model` and `scheduler`
  // must outlive the Generation.
  Generation(const ModelContext& model, folio::internal::v1::Scheduler::Stub* scheduler,
             const ValidatedRequest& request, int32_t n);
  ~Generation();

  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits for the next event. OK with the deltas it produced (possibly none), or OK and
  // done() once every choice has finished. An error (the scheduler's code, with a message
  // saying it came from the scheduler) ends the generation.
  absl::Status Next(std::vector<openai::ChoiceDelta>* deltas);

  bool done() const { return done_; }
  openai::Usage usage() const;
  // Thread-safe.
  void Cancel() { ctx_.TryCancel(); }

 private:
  struct Choice {
    std::optional<CompletionText> text;
    bool finished = false;
  };
  // Reads the rest of the stream and its status; returns the status.
  grpc::Status Drain();

  const ModelContext& model_;
  const bool want_logprobs_;
  const int32_t max_top_logprobs_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<folio::internal::v1::ScheduleEvent>> reader_;
  std::vector<Choice> choices_;
  int32_t num_prompt_tokens_ = 0;
  int32_t num_cached_prompt_tokens_ = 0;
  bool done_ = false;
  bool stream_closed_ = false;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_H_
