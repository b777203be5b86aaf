#include "services/scheduler/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/scheduler_epoch.h"
#include "common/stream_resume.h"
#include "glog/logging.h"
#include "services/scheduler/token_history.h"

namespace folio::scheduler {

using cachemgr::SeqId;

namespace {

std::unique_ptr<MetricsRegistry> OwnRegistryIfNone(MetricsRegistry* registry) {
  return registry == nullptr ? std::make_unique<MetricsRegistry>() : nullptr;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, CacheClient* cache, WorkerClient* workers,
                     MetricsRegistry* registry)
    : options_(options),
      cache_(cache),
      workers_(workers),
      own_registry_(OwnRegistryIfNone(registry)),
      metrics_(std::make_unique<SchedulerMetrics>(registry != nullptr ? registry
                                                                      : own_registry_.get())),
      state_(options, cache, metrics_.get()),
      planner_(&state_),
      sharing_(&state_),
      recovery_(options.recovery, &state_, cache, workers,
                registry != nullptr ? registry : own_registry_.get()) {
  CHECK_GT(options_.block_size, 0);
  CHECK_GT(options_.max_num_batched_tokens, 0);
  CHECK_GT(options_.max_num_seqs, 0);
}

Scheduler::~Scheduler() = default;

namespace {

// The branches a request starts with: one root for a new request; for a continuation,
// one per unfinished choice with its tokens so far.
void StartBranches(Request* r) {
  const std::vector<RequestSpec::ContinuedChoice>& cont = r->spec.continuation;
  const bool fresh = cont.empty() || (static_cast<int32_t>(cont.size()) == r->spec.n &&
                                      std::all_of(cont.begin(), cont.end(), [](const auto& c) {
                                        return c.tokens.empty();
                                      }));
  if (fresh) {
    r->spec.continuation.clear();
    r->branches.emplace_back();
    return;
  }
  // A continuation starts where a preempted request is recomputed from (request.h): its
  // root prefills the prompt, the others fork from it there and recompute their own tokens.
  // Choices the client has no token of yet (the stream broke inside the first tokens'
  // fan-out) get theirs from the root's n-way draw at the end of the prompt, so the root
  // is one of them and the request has not fanned out yet.
  auto empty = std::find_if(cont.begin(), cont.end(), [](const auto& c) { return c.tokens.empty(); });
  const size_t root = empty == cont.end() ? 0 : static_cast<size_t>(empty - cont.begin());
  r->fanned_out = empty == cont.end();
  for (size_t k = 0; k < cont.size(); ++k) {
    const size_t i = k == 0 ? root : (k <= root ? k - 1 : k);
    Branch b;
    b.index = cont[i].index;
    b.output = cont[i].tokens;
    r->num_generated += static_cast<int64_t>(b.output.size());
    r->branches.push_back(std::move(b));
  }
}

}  // namespace

absl::StatusOr<uint64_t> Scheduler::Submit(RequestSpec spec, EventSink sink) {
  if (absl::Status s = ValidateRequest(spec, options_); !s.ok()) return s;
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  auto request = std::make_unique<Request>();
  request->spec = std::move(spec);
  request->prompt_token_set = PromptTokenSet(request->spec);
  request->sink = std::move(sink);
  request->arrival_time = absl::Now();
  request->max_len = static_cast<int32_t>(total);
  StartBranches(request.get());
  if (!request->spec.grammar.empty()) {
    if (options_.grammars == nullptr) {
      return absl::InvalidArgumentError(
          "structured output is not available: the scheduler has no vocabulary");
    }
    // Compiled here, on the caller's thread (cached by text); the loop only matches.
    absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
        options_.grammars->Get(request->spec.grammar);
    if (!grammar.ok()) return grammar.status();
    request->grammar = *grammar;
    const std::vector<structured::GrammarTrigger>& triggers = request->spec.grammar_triggers;
    if (absl::Status s = structured::ValidateGrammarTriggers(triggers, options_.vocab_size);
        !s.ok()) {
      return s;
    }
    // Every branch starts at the grammar's start (a lazy grammar's: at its watch); a
    // continued choice's matcher then accepts the tokens the client already has, so it
    // resumes where its stream broke.
    for (Branch& b : request->branches) {
      if (triggers.empty()) {
        b.matcher.emplace(*grammar);
        if (!b.matcher->last_error().ok()) return b.matcher->last_error();
      } else {
        b.watch.emplace(absl::MakeConstSpan(triggers));
      }
      for (size_t t = 0; t < b.output.size(); ++t) {
        const int32_t id = b.output[t];
        bool ok = true;
        if (b.matcher.has_value()) {
          ok = b.matcher->AcceptToken(id);
        } else if (std::optional<std::string> fed =
                       b.watch->Accept(id, (*grammar)->vocab().bytes(id))) {
          b.matcher.emplace(*grammar);
          ok = b.matcher->AcceptBytes(*fed);
        }
        if (!ok) {
          if (!b.matcher->last_error().ok()) return b.matcher->last_error();
          return absl::InvalidArgumentError(absl::StrCat(
              "continuation: token ", t, " (id ", id, ") of choice ", b.index,
              " is not allowed by the request's grammar"));
        }
      }
      if (b.matcher.has_value()) {
        b.mask.assign(structured::BitmaskWords(options_.vocab_size), 0);
        // The first mask here, not in the loop: a grammar that goes over an ambiguity
        // bound at its first token is refused to the caller (INVALID_ARGUMENT).
        if (absl::Status s = b.matcher->FillNextTokenBitmask(absl::MakeSpan(b.mask)); !s.ok()) {
          return s;
        }
      }
    }
  } else if (!request->spec.grammar_triggers.empty()) {
    return absl::InvalidArgumentError("grammar_triggers: set without a grammar");
  }
  request->finished_beams.set_capacity(std::max(request->spec.beam_width, 1));
  absl::MutexLock lock(&mu_);
  if (health_.fenced) {
    return MarkResumable(absl::UnavailableError(
        "this scheduler was replaced by a newer one (fenced) and takes no requests"));
  }
  if (num_queued_ >= options_.max_waiting_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the waiting queue is full (", options_.max_waiting_requests,
                     " requests); retry later"));
  }
  const uint64_t handle = next_handle_++;
  request->arrival = handle;
  inbox_.push_back(std::move(request));
  ++num_queued_;
  wake_.Signal();
  return handle;
}

void Scheduler::Cancel(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  cancels_.push_back(handle);
  wake_.Signal();
}

void Scheduler::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
  wake_.Signal();
}

void Scheduler::Run() {
  while (true) {
    const bool busy = HasWork();
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && !busy && inbox_.empty() && cancels_.empty()) wake_.Wait(&mu_);
      if (stop_) break;
    }
    if (!RunOnce()) absl::SleepFor(absl::Milliseconds(2));
  }
  // Whatever is left ends now.
  DrainInbox();
  while (!state_.running.empty()) state_.Finish(state_.running.back(), FinishReason::kCancelled);
  while (!state_.waiting.empty()) state_.Finish(state_.waiting.back(), FinishReason::kCancelled);
  state_.Flush();
}

bool Scheduler::HasWork() const {
  return !state_.running.empty() || !state_.waiting.empty() || !state_.pending_frees.empty() ||
         recovery_.active();
}

bool Scheduler::RunOnce() {
  DrainInbox();
  bool did = false;
  if (state_.fenced.has_value()) {
    did = Fence();
  } else if (recovery_.active()) {
    did = recovery_.Poll(absl::Now());
  } else if (!state_.running.empty() || !state_.waiting.empty()) {
    did = true;
    Step();
  } else if (state_.HasPendingCacheOps()) {
    did = true;
    state_.Flush();
  }
  Publish();
  return did;
}

bool Scheduler::Fence() {
  if (state_.running.empty() && state_.waiting.empty() && !state_.loss.has_value()) {
    return false;
  }
  // Resumable: the frontends continue these streams on the scheduler that replaced us.
  const absl::Status why = MarkResumable(absl::UnavailableError(absl::StrCat(
      "this scheduler was replaced by a newer one and steps no more (",
      state_.fenced->message(), ")")));
  LOG(ERROR) << why.message() << "; ending " << state_.running.size() + state_.waiting.size()
             << " requests";
  while (!state_.running.empty()) state_.Finish(state_.running.back(), FinishReason::kError, why);
  while (!state_.waiting.empty()) state_.Finish(state_.waiting.back(), FinishReason::kError, why);
  // Nothing goes to the replica any more: it is not ours.
  state_.loss.reset();
  state_.pending_frees.clear();
  state_.pending_commits.clear();
  state_.pending_forks.clear();
  state_.pending_copies.clear();
  return true;
}

void Scheduler::DrainInbox() {
  std::vector<std::unique_ptr<Request>> inbox;
  std::vector<uint64_t> cancels;
  {
    absl::MutexLock lock(&mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : inbox) state_.Queue(std::move(r));
  for (uint64_t handle : cancels) {
    Request* r = state_.Find(handle);
    if (r == nullptr) continue;
    LOG(INFO) << "request " << r->spec.request_id << " cancelled";
    state_.Finish(r, FinishReason::kCancelled);
  }
}

void Scheduler::Step() {
  const absl::Time start = absl::Now();
  PlannedStep plan = planner_.Plan();
  if (state_.loss.has_value()) return;  // recovery takes over at the next iteration
  if (plan.batch.empty()) {
    state_.Flush();
    return;
  }
  absl::StatusOr<worker::StepOutput> output = workers_->Execute(plan.input, plan.request_ids);
  if (!output.ok()) {
    if (output.status().code() == absl::StatusCode::kInvalidArgument) {
      // The workers refused the step as malformed: a scheduler bug, which recomputing
      // would only repeat.
      state_.FailRunning(absl::InternalError(
          absl::StrCat("worker step failed: ", output.status().message())));
      return;
    }
    if (IsFenced(output.status())) {  // a newer scheduler holds the replica
      state_.Lose(LostService::kWorker, output.status());
      return;
    }
    // Any other failure (the process is gone, stopped past the step deadline, or came
    // back without its KV cache) loses the workers' KV: recovery rebuilds it.
    state_.Lose(LostService::kWorker,
                absl::UnavailableError(
                    absl::StrCat("worker step failed: ", output.status().message())));
    return;
  }
  const bool sampled = std::any_of(output->seqs.begin(), output->seqs.end(), [](const auto& s) {
    return !s.samples.empty() || !s.candidates.empty();
  });
  recovery_.OnStep(absl::Now(), sampled);
  // Every branch's new KV first, then each request's outputs, request by request.
  const std::vector<Granted>& batch = plan.batch;
  std::vector<std::pair<Request*, BranchOutputs>> per_request;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request* r = batch[i].request;
    Branch& b = r->branches[batch[i].branch];
    b.num_computed += batch[i].num_tokens;
    state_.pending_commits.push_back({SeqId{b.seq_id}, b.num_computed});
    auto it = std::find_if(per_request.begin(), per_request.end(),
                           [r](const auto& p) { return p.first == r; });
    if (it == per_request.end()) {
      per_request.push_back({r, {}});
      it = per_request.end() - 1;
    }
    it->second.push_back({batch[i].branch, &output->seqs[i]});
  }
  for (auto& [r, outs] : per_request) sharing_.Advance(r, outs);
  sharing_.ApplyForks();
  ++state_.stats.num_steps;
  metrics_->batch_size.Observe(static_cast<double>(batch.size()));
  metrics_->batch_tokens.Observe(static_cast<double>(plan.num_tokens));
  metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - start));
}

void Scheduler::Publish() {
  metrics_->running.Set(static_cast<double>(state_.running.size()));
  metrics_->waiting.Set(static_cast<double>(state_.waiting.size()));
  absl::MutexLock lock(&mu_);
  state_.stats.num_running = static_cast<int32_t>(state_.running.size());
  state_.stats.num_waiting = static_cast<int32_t>(state_.waiting.size());
  int64_t pending = 0;
  auto add_pending = [&pending](const Request* r) {
    for (const Branch& b : r->branches) pending += std::max(0, r->max_len - b.num_computed);
  };
  for (const Request* r : state_.running) add_pending(r);
  for (const Request* r : state_.waiting) add_pending(r);
  state_.stats.num_tokens_pending = pending;
  stats_ = state_.stats;
  health_ = LoopHealth{.last_iteration = absl::Now(), .has_work = HasWork(),
                       .recovering = recovery_.active(), .fenced = state_.fenced.has_value()};
  num_queued_ = static_cast<int32_t>(inbox_.size() + state_.waiting.size());
}

LoopHealth Scheduler::Health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

SchedulerStats Scheduler::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace folio::scheduler
