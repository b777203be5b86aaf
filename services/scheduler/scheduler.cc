#include "services/scheduler/scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace folio::scheduler {

using cachemgr::SeqId;
using cachemgr::SeqStatus;

struct Scheduler::Metrics {
  explicit Metrics(MetricsRegistry* r)
      : running(r->AddGauge("folio_scheduler_requests_running", "Requests holding KV blocks.")),
        waiting(r->AddGauge("folio_scheduler_requests_waiting",
                            "Requests queued for admission (new or preempted).")),
        preemptions(r->AddCounter("folio_scheduler_preemptions_total",
                                  "Requests preempted (blocks freed, recomputed later).")),
        prompt_tokens(r->AddCounter("folio_scheduler_prompt_tokens_total",
                                    "Prompt tokens of admitted requests (first admission).")),
        generation_tokens(r->AddCounter("folio_scheduler_generation_tokens_total",
                                        "Tokens generated.")),
        prefix_hits(r->AddCounter("folio_scheduler_prefix_cache_hit_tokens_total",
                                  "Tokens whose KV came from the prefix cache at admission.")),
        finished(r->AddCounterFamily("folio_scheduler_requests_finished_total",
                                     "Requests ended, by reason.", {"reason"})),
        step_duration(r->AddHistogram("folio_scheduler_step_duration_seconds",
                                      "Wall time of one scheduler step, RPCs included.",
                                      ExponentialBuckets(1e-4, 2, 18))),
        batch_size(r->AddHistogram("folio_scheduler_batch_sequences",
                                   "Sequences computed per step.",
                                   ExponentialBuckets(1, 2, 10))),
        batch_tokens(r->AddHistogram("folio_scheduler_batch_tokens", "Tokens computed per step.",
                                     ExponentialBuckets(1, 2, 14))),
        ttft(r->AddHistogram("folio_scheduler_time_to_first_token_seconds",
                             "From arrival to the first generated token.",
                             ExponentialBuckets(1e-3, 2, 18))),
        itl(r->AddHistogram("folio_scheduler_inter_token_latency_seconds",
                            "Between consecutive tokens of one request.",
                            ExponentialBuckets(1e-4, 2, 18))),
        e2e(r->AddHistogram("folio_scheduler_request_latency_seconds",
                            "From arrival to the end of the request.",
                            ExponentialBuckets(1e-3, 2, 20))) {}

  Gauge& running;
  Gauge& waiting;
  Counter& preemptions;
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Counter& prefix_hits;
  Family<Counter>& finished;
  Histogram& step_duration;
  Histogram& batch_size;
  Histogram& batch_tokens;
  Histogram& ttft;
  Histogram& itl;
  Histogram& e2e;
  std::unique_ptr<MetricsRegistry> own_registry;  // when none was injected
};

namespace {

const char* ReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, CacheClient* cache, WorkerClient* workers,
                     MetricsRegistry* registry)
    : options_(options), cache_(cache), workers_(workers) {
  CHECK_GT(options_.block_size, 0);
  CHECK_GT(options_.max_num_batched_tokens, 0);
  CHECK_GT(options_.max_num_seqs, 0);
  std::unique_ptr<MetricsRegistry> own;
  if (registry == nullptr) {
    own = std::make_unique<MetricsRegistry>();
    registry = own.get();
  }
  metrics_ = std::make_unique<Metrics>(registry);
  metrics_->own_registry = std::move(own);
}

Scheduler::~Scheduler() = default;

absl::StatusOr<uint64_t> Scheduler::Submit(RequestSpec spec, EventSink sink) {
  if (spec.prompt.empty()) {
    return absl::InvalidArgumentError("the prompt has no tokens");
  }
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= options_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", spec.prompt[i],
                                                     ", outside the vocabulary [0, ",
                                                     options_.vocab_size, ")"));
    }
  }
  if (spec.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be at least 1, got ", spec.max_tokens));
  }
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (total > options_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", spec.prompt.size(), " tokens) plus max_tokens (", spec.max_tokens,
        ") is ", total, ", more than the model's context of ", options_.max_model_len));
  }
  if (spec.n < 1 || spec.n > options_.max_n) {
    return absl::InvalidArgumentError(
        absl::StrCat("n must be in [1, ", options_.max_n, "], got ", spec.n));
  }
  if (spec.beam_width < 0 || spec.beam_width > options_.max_beam_width) {
    return absl::InvalidArgumentError(absl::StrCat("beam_width must be in [0, ",
                                                   options_.max_beam_width, "], got ",
                                                   spec.beam_width));
  }
  if (spec.beam_width > 0 && spec.n > spec.beam_width) {
    return absl::InvalidArgumentError(absl::StrCat("n (", spec.n,
                                                   ") must not exceed beam_width (",
                                                   spec.beam_width, ") in beam search"));
  }
  if (!std::isfinite(spec.length_penalty)) {
    return absl::InvalidArgumentError("length_penalty must be finite");
  }
  const int32_t width = spec.beam_width > 0 ? spec.beam_width : spec.n;
  if (width > options_.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request runs ", width, " sequences at once, more than max_num_seqs (",
                     options_.max_num_seqs, ")"));
  }
  if (options_.num_blocks > 0 && width > 1) {
    // Worst case: the full prompt blocks shared, every other block private to a branch.
    const int64_t shared = static_cast<int64_t>(spec.prompt.size()) / options_.block_size;
    const int64_t own = (total + options_.block_size - 1) / options_.block_size - shared;
    const int64_t need = shared + width * own;
    if (need > options_.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the request may need ", need, " KV blocks (", width, " sequences of up to ", total,
          " tokens), more than the pool's ", options_.num_blocks,
          "; lower n, beam_width or max_tokens"));
    }
  }
  auto request = std::make_unique<Request>();
  request->spec = std::move(spec);
  request->sink = std::move(sink);
  request->arrival_time = absl::Now();
  request->max_len = static_cast<int32_t>(total);
  request->branches.emplace_back();
  request->finished_beams.set_capacity(std::max(request->spec.beam_width, 1));
  absl::MutexLock lock(&mu_);
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
  while (!running_.empty()) Finish(running_.back(), FinishReason::kCancelled);
  while (!waiting_.empty()) Finish(waiting_.back(), FinishReason::kCancelled);
  Flush();
}

bool Scheduler::IsEndOfGeneration(int32_t token) const {
  return token == options_.eos_id ||
         std::find(options_.eog_ids.begin(), options_.eog_ids.end(), token) !=
             options_.eog_ids.end();
}

bool Scheduler::HasWork() const {
  return !running_.empty() || !waiting_.empty() || !pending_frees_.empty();
}

bool Scheduler::RunOnce() {
  DrainInbox();
  bool did = false;
  if (!running_.empty() || !waiting_.empty()) {
    did = true;
    Step();
  } else if (!pending_frees_.empty() || !pending_commits_.empty()) {
    did = true;
    Flush();
  }
  Publish();
  return did;
}

void Scheduler::DrainInbox() {
  std::vector<std::unique_ptr<Request>> inbox;
  std::vector<uint64_t> cancels;
  {
    absl::MutexLock lock(&mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& r : inbox) {
    VLOG(1) << "request " << r->spec.request_id << " queued";
    waiting_.push_back(r.get());
    requests_.emplace(r->arrival, std::move(r));
  }
  for (uint64_t handle : cancels) {
    auto it = requests_.find(handle);
    if (it == requests_.end()) continue;
    LOG(INFO) << "request " << it->second->spec.request_id << " cancelled";
    Finish(it->second.get(), FinishReason::kCancelled);
  }
}

absl::StatusOr<cachemgr::StepResponse> Scheduler::CacheStep(cachemgr::StepRequest request) {
  request.commits = std::move(pending_commits_);
  request.frees = std::move(pending_frees_);
  pending_commits_.clear();
  pending_frees_.clear();
  return cache_->Step(request);
}

void Scheduler::Flush() {
  if (pending_commits_.empty() && pending_frees_.empty()) return;
  absl::StatusOr<cachemgr::StepResponse> resp = CacheStep({});
  if (!resp.ok()) {
    LOG(ERROR) << "cache manager step failed: " << resp.status();
    cache_lost_ = true;
  }
}

void Scheduler::ApplyTable(Branch* branch, const cachemgr::SeqResult& result) {
  branch->block_table.resize(result.table_offset);
  for (cachemgr::BlockId b : result.entries) branch->block_table.push_back(b.value);
}

void Scheduler::ReleaseSeq(uint64_t seq_id) {
  if (seq_id == 0) return;
  auto it = std::find_if(pending_forks_.begin(), pending_forks_.end(),
                         [seq_id](const PendingFork& f) { return f.child == seq_id; });
  if (it != pending_forks_.end()) {
    pending_forks_.erase(it);  // never reached the cache manager
    return;
  }
  pending_frees_.push_back(SeqId{seq_id});
}

int32_t Scheduler::RunningSeqs() const {
  int32_t n = 0;
  for (const Request* r : running_) n += r->width();
  return n;
}

void Scheduler::Finish(Request* request, FinishReason reason, absl::Status error) {
  RequestEvent event;
  event.finish = reason;
  event.error = std::move(error);
  Finish(request, std::move(event));
}

void Scheduler::Finish(Request* request, RequestEvent event) {
  const FinishReason reason = event.finish;
  for (Branch& b : request->branches) {
    ReleaseSeq(b.seq_id);
    b.seq_id = 0;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
  event.request_done = true;
  if (request->sink) request->sink(event);
  LOG(INFO) << "request " << request->spec.request_id << " finished (" << ReasonName(reason)
            << ") after " << request->num_generated << " tokens"
            << (event.error.ok() ? "" : absl::StrCat(": ", event.error.ToString()));
  metrics_->finished.WithLabels({ReasonName(reason)}).Increment();
  metrics_->e2e.Observe(absl::ToDoubleSeconds(absl::Now() - request->arrival_time));
  requests_.erase(request->arrival);
}

void Scheduler::FailRunning(const absl::Status& status, bool cache_lost) {
  LOG(ERROR) << "failing " << running_.size() << " running requests: " << status;
  while (!running_.empty()) Finish(running_.back(), FinishReason::kError, status);
  if (cache_lost) {
    // The pool's state is unknown: drop what we meant to tell it and reset it.
    pending_frees_.clear();
    pending_commits_.clear();
    pending_forks_.clear();
    pending_copies_.clear();
    cache_lost_ = true;
  }
}

void Scheduler::Preempt(Request* victim) {
  LOG(INFO) << "request " << victim->spec.request_id << " preempted ("
            << victim->branches.size() << " sequences) after " << victim->num_generated
            << " tokens; it will be recomputed";
  for (Branch& b : victim->branches) {
    ReleaseSeq(b.seq_id);
    b.seq_id = 0;
    b.block_table.clear();
    b.num_computed = 0;
    b.candidates.clear();
  }
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  waiting_.push_front(victim);
  ++loop_stats_.num_preemptions;
  metrics_->preemptions.Increment();
}

int32_t Scheduler::Wanted(const Request& r, size_t i) const {
  const Branch& b = r.branches[i];
  if (b.seq_id == 0) return 0;  // waits to fork from the root
  int32_t end = b.num_tokens(r.spec.prompt);
  if (i == 0) {
    for (const Branch& other : r.branches) {
      if (other.seq_id == 0) end = std::min(end, r.prompt_len());
    }
  }
  return end - b.num_computed;
}

std::vector<Scheduler::Granted> Scheduler::ScheduleRunning(int32_t* budget,
                                                           cachemgr::StepResponse* copies) {
  std::vector<Granted> want;
  for (Request* r : running_) {
    for (size_t i = 0; i < r->branches.size(); ++i) {
      const int32_t n = std::min(Wanted(*r, i), *budget);
      if (n <= 0) continue;
      want.push_back({r, static_cast<int32_t>(i), n});
      *budget -= n;
    }
  }
  std::vector<Granted> granted;
  while (!want.empty()) {
    cachemgr::StepRequest req;
    for (const Granted& g : want) {
      const Branch& b = g.request->branches[g.branch];
      cachemgr::GrantOp op{.seq = SeqId{b.seq_id}, .start_pos = b.num_computed};
      for (int32_t i = 0; i < g.num_tokens; ++i) {
        op.token_ids.push_back(b.TokenAt(g.request->spec.prompt, b.num_computed + i));
      }
      req.grants.push_back(std::move(op));
    }
    absl::StatusOr<cachemgr::StepResponse> resp = CacheStep(std::move(req));
    if (!resp.ok()) {
      FailRunning(absl::UnavailableError(absl::StrCat("cache manager: ", resp.status().message())),
                  /*cache_lost=*/true);
      return {};
    }
    std::vector<Granted> retry;
    for (size_t i = 0; i < want.size(); ++i) {
      const cachemgr::SeqResult& res = resp->grants[i];
      if (res.status == SeqStatus::kOk) {
        ApplyTable(&want[i].request->branches[want[i].branch], res);
        granted.push_back(want[i]);
        copies->grants.push_back(res);
      } else {
        retry.push_back(want[i]);
      }
    }
    if (retry.empty()) break;
    // No room: preempt the request that arrived last (all of its sequences), then ask
    // again for the rest.
    Request* victim = running_.back();
    auto drop = [victim](const Granted& g) { return g.request == victim; };
    for (const auto* list : {&granted, &retry}) {
      for (const Granted& g : *list) {
        if (g.request == victim) *budget += g.num_tokens;  // not computed this step after all
      }
    }
    granted.erase(std::remove_if(granted.begin(), granted.end(), drop), granted.end());
    std::vector<uint64_t> victim_seqs;
    for (const Branch& b : victim->branches) victim_seqs.push_back(b.seq_id);
    copies->grants.erase(
        std::remove_if(copies->grants.begin(), copies->grants.end(),
                       [&victim_seqs](const cachemgr::SeqResult& r) {
                         return std::find(victim_seqs.begin(), victim_seqs.end(),
                                          r.seq.value) != victim_seqs.end();
                       }),
        copies->grants.end());
    retry.erase(std::remove_if(retry.begin(), retry.end(), drop), retry.end());
    Preempt(victim);
    want = std::move(retry);
  }
  return granted;
}

std::vector<Scheduler::Granted> Scheduler::AdmitWaiting(int32_t* budget,
                                                        cachemgr::StepResponse* copies) {
  std::vector<Request*> candidates;
  const int32_t slots = options_.max_num_seqs - RunningSeqs();
  int32_t used = 0;
  for (Request* r : waiting_) {
    if (used + r->width() > slots || static_cast<int32_t>(candidates.size()) >= *budget) break;
    candidates.push_back(r);
    used += r->width();
  }
  if (candidates.empty()) return {};

  // First the root sequences, with their prefix lookups; their cached tokens decide the
  // chunks. A group's root looks up the prompt only: its other branches fork from it at
  // the end of the prompt.
  cachemgr::StepRequest create;
  for (Request* r : candidates) {
    const Branch& root = r->branches[0];
    cachemgr::CreateOp op{.seq = SeqId{next_seq_id_++},
                          .max_len = options_.reserve_max_model_len ? options_.max_model_len
                                                                    : r->max_len,
                          .request_id = r->spec.request_id};
    const int32_t lookup =
        r->branches.size() > 1 ? r->prompt_len() : root.num_tokens(r->spec.prompt);
    for (int32_t i = 0; i < lookup; ++i) op.prompt.push_back(root.TokenAt(r->spec.prompt, i));
    create.creates.push_back(std::move(op));
  }
  absl::StatusOr<cachemgr::StepResponse> created = CacheStep(std::move(create));
  if (!created.ok()) {
    FailRunning(absl::UnavailableError(absl::StrCat("cache manager: ", created.status().message())),
                /*cache_lost=*/true);
    return {};
  }
  std::vector<Request*> admitted;
  bool refused = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cachemgr::SeqResult& res = created->creates[i];
    refused = refused || res.status != SeqStatus::kOk;
    if (refused) {
      // Keep arrival order: once one waits, the later ones wait too.
      if (res.status == SeqStatus::kOk) pending_frees_.push_back(res.seq);
      continue;
    }
    Request* r = candidates[i];
    Branch& root = r->branches[0];
    root.seq_id = res.seq.value;
    root.num_computed = res.num_cached_tokens;
    ApplyTable(&root, res);
    admitted.push_back(r);
  }

  cachemgr::StepRequest grant;
  std::vector<Granted> want;
  for (Request* r : admitted) {
    const int32_t n = std::min(Wanted(*r, 0), *budget);
    if (n <= 0) break;
    const Branch& root = r->branches[0];
    cachemgr::GrantOp op{.seq = SeqId{root.seq_id}, .start_pos = root.num_computed};
    for (int32_t i = 0; i < n; ++i) {
      op.token_ids.push_back(root.TokenAt(r->spec.prompt, root.num_computed + i));
    }
    grant.grants.push_back(std::move(op));
    want.push_back({r, 0, n});
    *budget -= n;
  }
  absl::StatusOr<cachemgr::StepResponse> granted_resp = CacheStep(std::move(grant));
  if (!granted_resp.ok()) {
    FailRunning(
        absl::UnavailableError(absl::StrCat("cache manager: ", granted_resp.status().message())),
        /*cache_lost=*/true);
    return {};
  }
  std::vector<Granted> granted;
  size_t first_refused = admitted.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const cachemgr::SeqResult& res = granted_resp->grants[i];
    if (res.status != SeqStatus::kOk || first_refused < admitted.size()) {
      first_refused = std::min(first_refused, i);
      continue;
    }
    ApplyTable(&want[i].request->branches[0], res);
    copies->grants.push_back(res);
    granted.push_back(want[i]);
  }
  // Requests past the first refusal go back to waiting, their sequences freed.
  for (size_t i = first_refused; i < admitted.size(); ++i) {
    Branch& root = admitted[i]->branches[0];
    pending_frees_.push_back(SeqId{root.seq_id});
    root.seq_id = 0;
    root.block_table.clear();
    root.num_computed = 0;
  }
  admitted.resize(first_refused);
  for (Request* r : admitted) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    running_.insert(std::upper_bound(running_.begin(), running_.end(), r,
                                     [](const Request* a, const Request* b) {
                                       return a->arrival < b->arrival;
                                     }),
                    r);
    const int32_t cached = r->branches[0].num_computed;
    if (r->first_admission) {
      r->first_admission = false;
      r->num_cached_prompt_tokens = cached;
      loop_stats_.prompt_tokens += static_cast<int64_t>(r->spec.prompt.size());
      metrics_->prompt_tokens.Increment(static_cast<double>(r->spec.prompt.size()));
    }
    loop_stats_.prefix_cache_hit_tokens += cached;
    metrics_->prefix_hits.Increment(cached);
  }
  return granted;
}

worker::SequenceStep Scheduler::MakeStep(const Request& r, const Granted& g) const {
  const Branch& b = r.branches[g.branch];
  worker::SequenceStep s;
  s.seq_id = b.seq_id;
  s.start_pos = b.num_computed;
  for (int32_t i = 0; i < g.num_tokens; ++i) {
    s.token_ids.push_back(b.TokenAt(r.spec.prompt, b.num_computed + i));
  }
  s.block_table = b.block_table;
  s.sampling = r.spec.sampling;
  s.num_logprobs = r.spec.num_logprobs;
  const bool at_end = b.num_computed + g.num_tokens == b.num_tokens(r.spec.prompt);
  s.num_samples = 0;
  if (!at_end) return s;
  if (r.beam()) {
    s.num_candidates = 2 * r.spec.beam_width;
    s.num_logprobs = 0;
  } else if (!r.fanned_out) {
    s.num_samples = r.spec.n;  // the first token of every sample, from the shared prompt
    s.first_sample_index = 0;
  } else {
    s.num_samples = 1;
    s.first_sample_index = b.index;
  }
  return s;
}

void Scheduler::Step() {
  const absl::Time start = absl::Now();
  if (cache_lost_) {
    if (absl::Status s = cache_->Reset(); !s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "cache manager reset failed: " << s;
      absl::SleepFor(absl::Milliseconds(50));
      return;
    }
    cache_lost_ = false;
  }
  int32_t budget = options_.max_num_batched_tokens;
  cachemgr::StepResponse granted_results;
  std::vector<Granted> batch = ScheduleRunning(&budget, &granted_results);
  if (cache_lost_) return;
  std::vector<Granted> admitted = AdmitWaiting(&budget, &granted_results);
  if (cache_lost_) return;
  batch.insert(batch.end(), admitted.begin(), admitted.end());
  if (batch.empty()) {
    Flush();
    return;
  }

  worker::StepInput input;
  // Copies made by forks (baseline policy) run before any copy-on-write of this step.
  input.block_copies = std::move(pending_copies_);
  pending_copies_.clear();
  for (const cachemgr::SeqResult& r : granted_results.grants) {
    for (const cachemgr::BlockCopy& c : r.copies) {
      input.block_copies.push_back({c.src.value, c.dst.value});
    }
  }
  int64_t num_tokens = 0;
  std::vector<std::string> request_ids;
  for (const Granted& g : batch) {
    request_ids.push_back(g.request->spec.request_id);
    input.seqs.push_back(MakeStep(*g.request, g));
    num_tokens += g.num_tokens;
  }
  absl::StatusOr<worker::StepOutput> output = workers_->Execute(input, request_ids);
  if (!output.ok()) {
    const absl::StatusCode code = output.status().code() == absl::StatusCode::kInvalidArgument
                                      ? absl::StatusCode::kInternal
                                      : absl::StatusCode::kUnavailable;
    FailRunning(absl::Status(code, absl::StrCat("worker step failed: ", output.status().message())),
                /*cache_lost=*/false);
    return;
  }
  // Every branch's new KV first, then each request's outputs, request by request.
  std::vector<std::pair<Request*, std::vector<std::pair<int32_t, const worker::SequenceOutput*>>>>
      per_request;
  for (size_t i = 0; i < batch.size(); ++i) {
    Request* r = batch[i].request;
    Branch& b = r->branches[batch[i].branch];
    b.num_computed += batch[i].num_tokens;
    pending_commits_.push_back({SeqId{b.seq_id}, b.num_computed});
    auto it = std::find_if(per_request.begin(), per_request.end(),
                           [r](const auto& p) { return p.first == r; });
    if (it == per_request.end()) {
      per_request.push_back({r, {}});
      it = per_request.end() - 1;
    }
    it->second.push_back({batch[i].branch, &output->seqs[i]});
  }
  for (auto& [r, outs] : per_request) Advance(r, outs);
  ApplyForks();
  ++loop_stats_.num_steps;
  metrics_->batch_size.Observe(static_cast<double>(batch.size()));
  metrics_->batch_tokens.Observe(static_cast<double>(num_tokens));
  metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - start));
}

void Scheduler::Advance(
    Request* r, const std::vector<std::pair<int32_t, const worker::SequenceOutput*>>& outs) {
  const uint64_t arrival = r->arrival;
  const bool root_reached_prompt_end = r->branches[0].num_computed == r->prompt_len();
  if (r->beam()) {
    AdvanceBeams(r, outs);
  } else {
    AdvanceSamples(r, outs);
  }
  if (!requests_.contains(arrival)) return;  // finished
  if (root_reached_prompt_end) ForkFromRoot(r);
}

void Scheduler::AdvanceSamples(
    Request* r, const std::vector<std::pair<int32_t, const worker::SequenceOutput*>>& outs) {
  const absl::Time now = absl::Now();
  // (branch index, sample) pairs that produced a token this step.
  std::vector<std::pair<int32_t, const worker::SampledToken*>> drawn;
  for (const auto& [i, out] : outs) {
    if (out->samples.empty()) continue;
    if (!r->fanned_out) {
      // The root's n first tokens: sample k goes to branch k, forked from the root.
      r->fanned_out = true;
      CHECK_EQ(i, 0);
      CHECK_EQ(static_cast<int32_t>(out->samples.size()), r->spec.n);
      for (int32_t k = 1; k < r->spec.n; ++k) {
        Branch child;
        child.index = k;
        child.seq_id = next_seq_id_++;
        child.block_table = r->branches[0].block_table;
        child.num_computed = r->branches[0].num_computed;
        QueueFork(r, r->branches[0].seq_id, child.seq_id);
        r->branches.push_back(std::move(child));
      }
      for (int32_t k = 0; k < r->spec.n; ++k) drawn.push_back({k, &out->samples[k]});
    } else {
      drawn.push_back({i, &out->samples.at(0)});
    }
  }
  if (drawn.empty()) return;
  if (r->num_generated == 0) {
    metrics_->ttft.Observe(absl::ToDoubleSeconds(now - r->arrival_time));
  } else {
    metrics_->itl.Observe(absl::ToDoubleSeconds(now - r->last_token_time));
  }
  r->last_token_time = now;

  std::vector<RequestEvent> events;
  std::vector<int32_t> ended;  // branch indices
  for (const auto& [i, sample] : drawn) {
    Branch& b = r->branches[i];
    b.output.push_back(sample->token_id);
    ++r->num_generated;
    ++loop_stats_.generation_tokens;
    metrics_->generation_tokens.Increment();
    RequestEvent event;
    event.index = b.index;
    event.tokens.push_back({sample->token_id, sample->logprob, sample->top_logprobs});
    event.num_prompt_tokens = r->prompt_len();
    event.num_cached_prompt_tokens = r->num_cached_prompt_tokens;
    const auto& stops = r->spec.stop_token_ids;
    if ((!r->spec.ignore_eos && IsEndOfGeneration(sample->token_id)) ||
        std::find(stops.begin(), stops.end(), sample->token_id) != stops.end()) {
      event.finish = FinishReason::kStop;
    } else if (static_cast<int32_t>(b.output.size()) >= r->spec.max_tokens ||
               b.num_tokens(r->spec.prompt) >= r->max_len) {
      event.finish = FinishReason::kLength;
    }
    if (event.finish != FinishReason::kNone) ended.push_back(i);
    events.push_back(std::move(event));
  }
  std::sort(events.begin(), events.end(),
            [](const RequestEvent& a, const RequestEvent& b) { return a.index < b.index; });
  const bool all_ended = ended.size() == r->branches.size();
  if (!all_ended) {
    // Ended samples give their sequences back at once (the root's free waits for the
    // forks it feeds, see ApplyForks). The root's place goes to the next live branch.
    std::sort(ended.rbegin(), ended.rend());
    for (int32_t i : ended) {
      ReleaseSeq(r->branches[i].seq_id);
      r->branches.erase(r->branches.begin() + i);
    }
  }
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    if (r->sink) r->sink(events[e]);
  }
  if (all_ended) {
    Finish(r, std::move(events.back()));  // the last token and the finish reason travel together
  } else if (r->sink) {
    r->sink(events.back());
  }
}

void Scheduler::AdvanceBeams(
    Request* r, const std::vector<std::pair<int32_t, const worker::SequenceOutput*>>& outs) {
  for (const auto& [i, out] : outs) {
    if (!out->candidates.empty()) r->branches[i].candidates = out->candidates;
  }
  for (const Branch& b : r->branches) {
    if (b.candidates.empty()) return;  // the beam step waits for every live beam
  }
  r->fanned_out = true;
  const int32_t k = r->spec.beam_width;
  std::vector<Expansion> expansions;
  for (size_t i = 0; i < r->branches.size(); ++i) {
    const Branch& b = r->branches[i];
    for (const worker::TokenLogprob& c : b.candidates) {
      expansions.push_back({static_cast<int32_t>(i), c.token_id, c.logprob,
                            b.cum_logprob + static_cast<double>(c.logprob)});
    }
  }
  const auto& stops = r->spec.stop_token_ids;
  auto ends = [&](int32_t token) {
    return (!r->spec.ignore_eos && IsEndOfGeneration(token)) ||
           std::find(stops.begin(), stops.end(), token) != stops.end();
  };
  std::vector<Expansion> survivors;
  std::vector<Expansion> ended;
  SelectExpansions(std::move(expansions), k, ends, &survivors, &ended);

  auto hypothesis = [&](const Branch& parent, const Expansion& e, bool stopped) {
    Hypothesis h;
    h.tokens = parent.output;
    h.tokens.push_back(e.token_id);
    h.logprobs = parent.logprobs;
    h.logprobs.push_back(e.logprob);
    h.cum_logprob = e.cum_logprob;
    h.score = BeamScore(h.cum_logprob, static_cast<int32_t>(h.tokens.size()),
                        r->spec.length_penalty);
    h.stopped = stopped;
    return h;
  };
  for (const Expansion& e : ended) {
    r->finished_beams.Add(hypothesis(r->branches[e.parent], e, /*stopped=*/true));
  }
  // Survivors: the first one from a parent takes over the parent's sequence, the others
  // fork from it. Parents without survivors are freed.
  std::vector<Branch> next;
  std::vector<bool> parent_kept(r->branches.size(), false);
  const int32_t new_len = static_cast<int32_t>(r->branches[0].output.size()) + 1;
  const bool at_limit = new_len >= r->spec.max_tokens || r->prompt_len() + new_len >= r->max_len;
  for (const Expansion& e : survivors) {
    const Branch& parent = r->branches[e.parent];
    if (at_limit) {
      r->finished_beams.Add(hypothesis(parent, e, /*stopped=*/false));
      continue;
    }
    Branch b;
    if (!parent_kept[e.parent]) {
      parent_kept[e.parent] = true;
      b = parent;
    } else {
      b.seq_id = next_seq_id_++;
      b.block_table = parent.block_table;
      b.num_computed = parent.num_computed;
      b.output = parent.output;
      b.logprobs = parent.logprobs;
      QueueFork(r, parent.seq_id, b.seq_id);
    }
    b.output.push_back(e.token_id);
    b.logprobs.push_back(e.logprob);
    b.cum_logprob = e.cum_logprob;
    b.candidates.clear();
    next.push_back(std::move(b));
  }
  r->num_generated += static_cast<int64_t>(survivors.size() + ended.size());
  loop_stats_.generation_tokens += static_cast<int64_t>(survivors.size() + ended.size());
  metrics_->generation_tokens.Increment(static_cast<double>(survivors.size() + ended.size()));
  for (size_t i = 0; i < r->branches.size(); ++i) {
    if (!parent_kept[i]) ReleaseSeq(r->branches[i].seq_id);
  }
  r->branches = std::move(next);

  std::vector<double> reachable;
  for (const Branch& b : r->branches) {
    reachable.push_back(BestReachableScore(b.cum_logprob, static_cast<int32_t>(b.output.size()),
                                           r->spec.max_tokens, r->spec.length_penalty));
  }
  if (!r->finished_beams.Done(reachable)) return;

  std::vector<Hypothesis> best = r->finished_beams.Best(r->spec.n);
  const absl::Time now = absl::Now();
  metrics_->ttft.Observe(absl::ToDoubleSeconds(now - r->arrival_time));
  std::vector<RequestEvent> events;
  for (size_t i = 0; i < best.size(); ++i) {
    RequestEvent event;
    event.index = static_cast<int32_t>(i);
    for (size_t t = 0; t < best[i].tokens.size(); ++t) {
      event.tokens.push_back({best[i].tokens[t], best[i].logprobs[t], {}});
    }
    event.finish = best[i].stopped ? FinishReason::kStop : FinishReason::kLength;
    event.cumulative_logprob = best[i].cum_logprob;
    event.num_prompt_tokens = r->prompt_len();
    event.num_cached_prompt_tokens = r->num_cached_prompt_tokens;
    events.push_back(std::move(event));
  }
  CHECK(!events.empty()) << "a beam search always finishes some beam";
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    if (r->sink) r->sink(events[e]);
  }
  Finish(r, std::move(events.back()));
}

void Scheduler::QueueFork(Request* r, uint64_t parent, uint64_t child) {
  pending_forks_.push_back({r, parent, child});
}

void Scheduler::ForkFromRoot(Request* r) {
  Branch& root = r->branches[0];
  if (root.seq_id == 0 || root.num_computed != r->prompt_len()) return;
  for (Branch& b : r->branches) {
    if (b.seq_id != 0) continue;
    b.seq_id = next_seq_id_++;
    b.block_table = root.block_table;
    b.num_computed = root.num_computed;
    QueueFork(r, root.seq_id, b.seq_id);
  }
}

void Scheduler::ApplyForks() {
  if (pending_forks_.empty()) return;
  std::vector<PendingFork> forks = std::move(pending_forks_);
  pending_forks_.clear();
  cachemgr::StepRequest req;
  for (const PendingFork& f : forks) req.forks.push_back({SeqId{f.parent}, SeqId{f.child}});
  // Frees run before forks within one RPC: a parent freed this step (its own sample
  // ended) must outlive its forks, so its free waits for the next RPC.
  std::vector<SeqId> held;
  std::vector<SeqId> now;
  for (SeqId s : pending_frees_) {
    const bool parent = std::any_of(forks.begin(), forks.end(),
                                    [s](const PendingFork& f) { return f.parent == s.value; });
    (parent ? held : now).push_back(s);
  }
  pending_frees_ = std::move(now);
  absl::StatusOr<cachemgr::StepResponse> resp = CacheStep(std::move(req));
  pending_frees_.insert(pending_frees_.end(), held.begin(), held.end());
  if (!resp.ok()) {
    FailRunning(absl::UnavailableError(absl::StrCat("cache manager: ", resp.status().message())),
                /*cache_lost=*/true);
    return;
  }
  std::vector<Request*> refused;
  for (size_t i = 0; i < forks.size(); ++i) {
    const cachemgr::SeqResult& res = resp->forks[i];
    Request* r = forks[i].request;
    auto b = std::find_if(r->branches.begin(), r->branches.end(),
                          [&](const Branch& x) { return x.seq_id == forks[i].child; });
    CHECK(b != r->branches.end());
    if (res.status != SeqStatus::kOk) {
      b->seq_id = 0;  // never created
      if (std::find(refused.begin(), refused.end(), r) == refused.end()) refused.push_back(r);
      continue;
    }
    ApplyTable(&*b, res);
    for (const cachemgr::BlockCopy& c : res.copies) {
      pending_copies_.push_back({c.src.value, c.dst.value});
    }
  }
  // A fork can only find no room under the baseline policy, which copies: the group is
  // recomputed as a whole, like any preempted request.
  for (Request* r : refused) Preempt(r);
}

void Scheduler::Publish() {
  metrics_->running.Set(static_cast<double>(running_.size()));
  metrics_->waiting.Set(static_cast<double>(waiting_.size()));
  absl::MutexLock lock(&mu_);
  loop_stats_.num_running = static_cast<int32_t>(running_.size());
  loop_stats_.num_waiting = static_cast<int32_t>(waiting_.size());
  stats_ = loop_stats_;
  num_queued_ = static_cast<int32_t>(inbox_.size() + waiting_.size());
}

SchedulerStats Scheduler::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace folio::scheduler
