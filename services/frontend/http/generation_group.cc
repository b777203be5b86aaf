#include "services/frontend/http/generation_group.h"

#include <utility>

namespace folio::frontend {

std::shared_ptr<GenerationGroup> GenerationGroup::Start(
    std::shared_ptr<const ModelContext> model, routing::StreamRouter* router,
    const std::vector<ValidatedRequest>& requests, int32_t n, ResumeOptions resume,
    CallTracker* calls, Generation::Listener listener, std::vector<int32_t> preserved_tokens) {
  std::shared_ptr<GenerationGroup> group(
      new GenerationGroup(requests.size(), n, std::move(listener)));
  for (size_t k = 0; k < requests.size(); ++k) {
    std::shared_ptr<Generation> member = Generation::Start(
        model, router, requests[k], n, resume, calls,
        [group, k](Generation::Update u) { group->OnUpdate(k, std::move(u)); }, preserved_tokens);
    bool cancel = false;
    {
      absl::MutexLock lock(&group->mu_);
      group->members_.push_back(member);
      cancel = group->cancelled_;
    }
    // A member that failed (or a Cancel) before this one started: it does not run either.
    if (cancel) member->Cancel();
  }
  return group;
}

void GenerationGroup::Cancel() {
  std::vector<std::shared_ptr<Generation>> members;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    members = members_;
  }
  // Outside the lock: a member's Cancel may run its last update, which takes it.
  for (const std::shared_ptr<Generation>& m : members) m->Cancel();
}

void GenerationGroup::OnUpdate(size_t k, Generation::Update u) {
  const int32_t offset = static_cast<int32_t>(k) * n_;
  for (openai::ChoiceDelta& d : u.deltas) d.index += offset;
  bool cancel_others = false;
  {
    absl::MutexLock lock(&mu_);
    if (u.done) {
      --remaining_;
      usage_.prompt_tokens += u.usage.prompt_tokens;
      usage_.completion_tokens += u.usage.completion_tokens;
      usage_.cached_prompt_tokens += u.usage.cached_prompt_tokens;
      if (!u.status.ok() && status_.ok()) {
        status_ = u.status;
        cancel_others = !cancelled_ && remaining_ > 0;
        cancelled_ = true;
      }
      u.done = remaining_ == 0;
      u.status = status_;
      u.usage = usage_;
    }
    if (!u.deltas.empty() || u.done) listener_(std::move(u));
  }
  if (cancel_others) Cancel();
}

}  // namespace folio::frontend
