// GenerationGroup: the generations of one HTTP request as one stream of updates. A
// /v1/completions request may carry a list of prompts: each runs as its own Generation
// (generation.h) with n choices, and prompt k's choice i is the response's choice
// k * n + i, as the OpenAI API numbers them. A request with one prompt is a group of one.
//
// The listener gets the members' updates one at a time, in the order they arrive (each
// member's own in order), re-indexed; only the last one has done set, once every member
// has ended, with the usage summed over them and the first failure's status (a failure
// cancels the other members).
//
// Thread-safe: Cancel() from any thread at any time. The group lives while the caller or
// a member holds it.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_GROUP_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_GROUP_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "services/frontend/http/generation.h"

namespace folio::frontend {

class GenerationGroup : public std::enable_shared_from_this<GenerationGroup> {
 public:
  // Starts one Generation per request (each with `n` choices); arguments as
  // Generation::Start's. `requests` must not be empty.
  static std::shared_ptr<GenerationGroup> Start(std::shared_ptr<const ModelContext> model,
                                                routing::StreamRouter* router,
                                                const std::vector<ValidatedRequest>& requests,
                                                int32_t n, ResumeOptions resume,
                                                CallTracker* calls, Generation::Listener listener,
                                                std::vector<int32_t> preserved_tokens = {});

  // Cancels every member; the last update follows (CANCELLED unless all had finished).
  void Cancel();

 private:
  GenerationGroup(size_t size, int32_t n, Generation::Listener listener)
      : n_(n), remaining_(size), listener_(std::move(listener)) {}
  // Member k's update: re-indexed and passed on; the members' ends are gathered.
  void OnUpdate(size_t k, Generation::Update u);

  const int32_t n_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Generation>> members_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_);  // members not ended yet
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the first failure
  openai::Usage usage_ ABSL_GUARDED_BY(mu_);  // summed over ended members
  Generation::Listener listener_;  // called with mu_ held: one update at a time
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_GENERATION_GROUP_H_
