#include "services/scheduler/scheduler.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kv_block_file.h"
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
  if (options_.speculative.mode != SpeculativeMode::kOff) {
    proposer_metrics_ = metrics_->ForProposer(SpeculativeModeName(options_.speculative.mode));
  }
}

Scheduler::~Scheduler() {
  if (inflight_.has_value()) DropInflight();  // its calls must not outlive us
}

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
  if (inflight_.has_value()) DropInflight();
  DrainInbox();
  while (!state_.running.empty()) state_.Finish(state_.running.back(), FinishReason::kCancelled);
  while (!state_.waiting.empty()) state_.Finish(state_.waiting.back(), FinishReason::kCancelled);
  state_.Flush();
}

bool Scheduler::HasWork() const {
  return !state_.running.empty() || !state_.waiting.empty() || state_.HasPendingCacheOps() ||
         !state_.pending_transfers.empty() || recovery_.active() || inflight_.has_value();
}

void Scheduler::LoseToDiskLoads(const absl::Status& status) {
  // A block file the step was to load is gone, damaged or unreadable (the workers ran the
  // step with the block zeroed, every rank in step, and refused its answer): the cache
  // manager's index counted on it, so it drops the blocks named, its pool is reset and
  // every running request recomputes, token for token.
  ++state_.stats.num_disk_load_refusals;
  std::vector<std::pair<uint64_t, uint64_t>> bad = KvDiskBlocksOf(status);
  LOG(WARNING) << "the workers could not load " << bad.size()
               << " KV block(s) from disk; the cache manager drops them, the pool is reset "
                  "and the running requests recompute";
  cache_->NoteBadDiskBlocks(std::move(bad));
  state_.Lose(LostService::kCache,
              absl::UnavailableError(absl::StrCat("worker step refused: ", status.message())));
}

void Scheduler::SendTransfers() {
  if (state_.pending_transfers.empty() || state_.loss.has_value() || inflight_.has_value()) {
    return;
  }
  PlannedStep plan;
  planner_.TakeTransfers(&plan);
  absl::StatusOr<worker::StepOutput> output = workers_->Execute(plan.input, {});
  if (!output.ok()) {
    if (output.status().code() == absl::StatusCode::kDataLoss) {  // as in Complete
      LoseToDiskLoads(output.status());
      return;
    }
    if (IsFenced(output.status())) {
      state_.Lose(LostService::kWorker, output.status());
      return;
    }
    state_.Lose(LostService::kWorker,
                absl::UnavailableError(absl::StrCat("worker step of host KV transfers failed: ",
                                                    output.status().message())));
    return;
  }
  state_.transfers_done = std::max(state_.transfers_done, plan.transfers_ticket);
}

bool Scheduler::RunOnce() {
  DrainInbox();
  bool did = false;
  if (inflight_.has_value() && (state_.fenced.has_value() || state_.loss.has_value())) {
    DropInflight();  // before recovery or the fence touches anything
    did = true;
  }
  if (state_.fenced.has_value()) {
    did = Fence() || did;
  } else if (recovery_.active()) {
    did = recovery_.Poll(absl::Now()) || did;
  } else if (inflight_.has_value() || !state_.running.empty() || !state_.waiting.empty()) {
    did = true;
    Step();
  } else if (state_.HasPendingCacheOps() || !state_.pending_transfers.empty()) {
    did = true;
    state_.Flush();
    SendTransfers();
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
  state_.pending_swap_outs.clear();
  state_.pending_resolves.clear();
  state_.pending_commits.clear();
  state_.pending_truncates.clear();
  state_.pending_forks.clear();
  state_.pending_copies.clear();
  state_.pending_transfers.clear();
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
  if (!inflight_.has_value()) {
    PlannedStep plan = planner_.Plan();
    if (state_.loss.has_value()) return;  // recovery takes over at the next iteration
    if (plan.batch.empty()) {
      state_.Flush();
      SendTransfers();
      return;
    }
    Launch(std::move(plan), nullptr, nullptr);
    if (options_.async_steps && inflight_->pipelined) return;  // planned ahead next time
    InflightStep step = std::move(*inflight_);
    inflight_.reset();
    Complete(step, workers_->Finish());
    return;
  }
  // A step is in flight: plan the next one meanwhile, if its sequences can go on before
  // its answer, and send it the moment the answer is there.
  PlannedStep next;
  if (inflight_->pipelined) next = planner_.Plan();
  absl::StatusOr<worker::StepOutput> output = workers_->Finish();
  InflightStep done = std::move(*inflight_);
  inflight_.reset();
  bool launched = false;
  if (output.ok() && CheckAnswer(done, *output).ok() && !state_.loss.has_value() &&
      !next.batch.empty()) {
    Launch(std::move(next), &done, &*output);
    launched = true;
  }
  Complete(done, std::move(output));
  if (!launched) planner_.ReturnTransfers(&next);
  // A step planned ahead and not sent (its predecessor failed) holds slots that the loss
  // or the failed requests give back.
}

void Scheduler::Launch(PlannedStep plan, const InflightStep* previous,
                       const worker::StepOutput* output) {
  // The tokens the previous step sampled are the inputs its pending slots stand for.
  if (previous != nullptr) {
    absl::flat_hash_map<uint64_t, int32_t> sampled;
    for (size_t i = 0; i < previous->seqs.size(); ++i) {
      const std::vector<worker::SampledToken>& samples = output->seqs[i].samples;
      if (previous->seqs[i].pending && !samples.empty()) {
        sampled[previous->seqs[i].seq_id] = samples[0].token_id;
      }
    }
    for (size_t i = 0; i < plan.input.seqs.size(); ++i) {
      worker::SequenceStep& s = plan.input.seqs[i];
      if (s.token_ids.back() != cachemgr::kPendingToken) continue;
      auto it = sampled.find(s.seq_id);
      CHECK(it != sampled.end()) << "sequence " << s.seq_id
                                 << " has a pending token its last step did not sample";
      const int32_t token = it->second;
      s.token_ids.back() = token;
      state_.pending_resolves.push_back(
          {SeqId{s.seq_id}, s.start_pos + static_cast<int32_t>(s.token_ids.size()) - 1, token});
      const Request& r = *plan.batch[i].request;
      if (UsesTokenHistory(r.spec)) {
        std::vector<int32_t> history = r.branches[plan.batch[i].branch].output;
        history.push_back(token);
        s.history = MakeTokenHistory(r.spec, r.prompt_token_set, history, options_.eos_id);
      }
    }
  }
  if (previous != nullptr) {
    ++state_.stats.num_steps_planned_ahead;
    metrics_->steps_planned_ahead.Increment();
  }
  InflightStep step;
  step.start = absl::Now();
  step.transfers_ticket = plan.transfers_ticket;
  step.had_transfers = !plan.input.host_transfers.empty();
  // A branch that may speculate next step needs this step's answer first; one that sits
  // out a pause next step does not (StepPlanner::ScheduleRunning counts the step off).
  const bool small_batch = plan.speculative_batch;
  for (size_t i = 0; i < plan.batch.size(); ++i) {
    const Granted& g = plan.batch[i];
    Request* r = g.request;
    Branch& b = r->branches[g.branch];
    const worker::SequenceStep& s = plan.input.seqs[i];
    CHECK(std::find(s.token_ids.begin(), s.token_ids.end(), cachemgr::kPendingToken) ==
          s.token_ids.end())
        << "sequence " << b.seq_id << " goes to the workers with a pending token";
    b.num_computed += g.num_tokens;
    InflightStep::Seq seq{.handle = r->arrival, .seq_id = b.seq_id,
                          .num_computed = b.num_computed, .num_samples = s.num_samples,
                          .num_candidates = s.num_candidates, .num_draft = s.num_draft_tokens};
    if (s.num_samples > 0 || s.num_candidates > 0) {
      if (s.num_draft_tokens > 0) {
        step.pipelined = false;  // the next plan needs to know what was accepted
      } else if (!r->beam() && EndsByLength(*r, b)) {
        // Its last token: nothing follows it, the next step can go without it.
      } else if (options_.async_steps && Pipelinable(*r) &&
                 !(small_batch && planner_.MaySpeculate(*r) && b.spec.MayProposeNext())) {
        seq.pending = true;
        ++b.pending_samples;
      } else {
        step.pipelined = false;
      }
    }
    step.seqs.push_back(seq);
  }
  ++state_.stats.num_steps;
  metrics_->batch_size.Observe(static_cast<double>(plan.batch.size()));
  metrics_->batch_tokens.Observe(static_cast<double>(plan.num_tokens));
  inflight_ = std::move(step);
  workers_->Start(plan.input, plan.request_ids);
}

void Scheduler::Complete(const InflightStep& step, absl::StatusOr<worker::StepOutput> output) {
  if (!output.ok()) {
    if (output.status().code() == absl::StatusCode::kInvalidArgument) {
      // The workers refused the step as malformed: a scheduler bug, which recomputing
      // would only repeat.
      state_.FailRunning(absl::InternalError(
          absl::StrCat("worker step failed: ", output.status().message())));
      if (step.had_transfers) {
        // Its host-tier transfers did not run, but the cache manager counts on them (loaded
        // blocks in its index, stores in the tier): its pool is reset.
        state_.Lose(LostService::kCache,
                    absl::InternalError(absl::StrCat("a step with host KV transfers was "
                                                     "refused: ", output.status().message())));
      }
      return;
    }
    if (output.status().code() == absl::StatusCode::kDataLoss) {
      LoseToDiskLoads(output.status());
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
  if (state_.loss.has_value()) return;  // everything it computed is recomputed
  // Its host-tier transfers ran before it: the stores among them are written. (After a
  // loss the tier may be another, with tickets of its own: nothing is confirmed.)
  state_.transfers_done = std::max(state_.transfers_done, step.transfers_ticket);
  if (absl::Status s = CheckAnswer(step, *output); !s.ok()) {
    // A worker bug (a step planned ahead was not sent on it): nothing to recompute from.
    state_.FailRunning(s);
    return;
  }
  const bool sampled = std::any_of(output->seqs.begin(), output->seqs.end(), [](const auto& s) {
    return !s.samples.empty() || !s.candidates.empty();
  });
  recovery_.OnStep(absl::Now(), sampled);
  // Every branch's new KV first, then each request's outputs, request by request. A
  // request or branch that ended (or was preempted) since the step was sent has its
  // outputs dropped.
  std::vector<std::pair<Request*, BranchOutputs>> per_request;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const InflightStep::Seq& seq = step.seqs[i];
    Request* r = state_.Find(seq.handle);
    auto b = r == nullptr ? std::vector<Branch>::iterator()
                          : std::find_if(r->branches.begin(), r->branches.end(),
                                         [&seq](const Branch& b) { return b.seq_id == seq.seq_id; });
    if (r == nullptr || b == r->branches.end()) {
      if (!output->seqs[i].samples.empty()) {
        ++state_.stats.num_samples_dropped;
        metrics_->samples_dropped.Increment();
      }
      continue;
    }
    if (seq.pending) --b->pending_samples;
    const int32_t computed =
        seq.num_draft > 0 ? AcceptProposals(seq, output->seqs[i], &*b) : seq.num_computed;
    state_.QueueCommit(seq.seq_id, computed);
    auto it = std::find_if(per_request.begin(), per_request.end(),
                           [r](const auto& p) { return p.first == r; });
    if (it == per_request.end()) {
      per_request.push_back({r, {}});
      it = per_request.end() - 1;
    }
    it->second.push_back({static_cast<int32_t>(b - r->branches.begin()), &output->seqs[i]});
  }
  for (auto& [r, outs] : per_request) sharing_.Advance(r, outs);
  sharing_.ApplyForks();
  metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - step.start));
}

int32_t Scheduler::AcceptProposals(const InflightStep::Seq& seq, const worker::SequenceOutput& out,
                                   Branch* b) {
  const int32_t accepted = static_cast<int32_t>(out.samples.size()) - 1;
  const int32_t computed = seq.num_computed - (seq.num_draft - accepted);
  if (options_.speculative.mode == SpeculativeMode::kDraft) {
    // The cache manager holds the drafted proposals as pending tokens: the accepted ones
    // are resolved before the commit hashes their blocks; the truncate drops the rest.
    const int32_t first = seq.num_computed - seq.num_draft;
    for (int32_t i = 0; i < accepted; ++i) {
      state_.pending_resolves.push_back({SeqId{seq.seq_id}, first + i, out.samples[i].token_id});
    }
  }
  b->num_computed = computed;
  if (accepted < seq.num_draft) {
    state_.pending_truncates.push_back({SeqId{seq.seq_id}, computed});
    const int32_t blocks = (computed + options_.block_size - 1) / options_.block_size;
    b->block_table.resize(blocks);
    for (worker::WindowBlockTable& w : b->window_tables) {
      w.blocks.resize(std::max(0, blocks - w.first_block));
    }
  }
  b->draft.clear();
  if (options_.speculative.synth_len == 0.0) {  // benchmarks measure a fixed k
    AdaptSpeculation(seq.num_draft, accepted, options_.speculative.num_tokens, &b->spec);
  }
  ++state_.stats.num_spec_verifications;
  state_.stats.num_spec_proposed += seq.num_draft;
  state_.stats.num_spec_accepted += accepted;
  proposer_metrics_.proposed->Increment(seq.num_draft);
  proposer_metrics_.accepted->Increment(accepted);
  proposer_metrics_.accepted_len->Observe(accepted + 1);
  return computed;
}

absl::Status Scheduler::CheckAnswer(const InflightStep& step, const worker::StepOutput& output) {
  if (output.seqs.size() != step.seqs.size()) {
    return absl::InternalError(absl::StrCat("the workers answered a step of ", step.seqs.size(),
                                            " sequences with ", output.seqs.size(), " outputs"));
  }
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const InflightStep::Seq& seq = step.seqs[i];
    const worker::SequenceOutput& out = output.seqs[i];
    if (seq.num_draft > 0) {  // a verification: 1 .. k + 1 tokens
      if (out.samples.empty() || static_cast<int32_t>(out.samples.size()) > seq.num_draft + 1) {
        return absl::InternalError(absl::StrCat(
            "the workers answered the verification of ", seq.num_draft, " proposals for sequence ",
            seq.seq_id, " with ", out.samples.size(), " tokens"));
      }
      continue;
    }
    // Candidates may be fewer than asked: a grammar's mask may allow fewer tokens.
    if (static_cast<int32_t>(out.samples.size()) != seq.num_samples ||
        static_cast<int32_t>(out.candidates.size()) > seq.num_candidates) {
      return absl::InternalError(absl::StrCat(
          "the workers answered sequence ", seq.seq_id, " with ", out.samples.size(),
          " samples and ", out.candidates.size(), " candidates; the step asked for ",
          seq.num_samples, " and at most ", seq.num_candidates));
    }
  }
  return absl::OkStatus();
}

void Scheduler::DropInflight() {
  absl::StatusOr<worker::StepOutput> output = workers_->Finish();
  inflight_.reset();
  if (!output.ok()) LOG(WARNING) << "dropped step failed too: " << output.status();
}

bool Scheduler::Pipelinable(const Request& r) const {
  return !r.beam() && (r.spec.n == 1 || r.fanned_out) && r.grammar == nullptr;
}

bool Scheduler::EndsByLength(const Request& r, const Branch& b) {
  const int64_t outputs = static_cast<int64_t>(b.output.size()) + b.pending_samples + 1;
  return outputs >= r.spec.max_tokens || b.num_tokens(r.spec.prompt) + 1 >= r.max_len;
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
