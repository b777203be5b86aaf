#include "services/scheduler/scheduler.h"

#include <algorithm>

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
  auto request = std::make_unique<Request>();
  request->spec = std::move(spec);
  request->sink = std::move(sink);
  request->arrival_time = absl::Now();
  request->max_len = static_cast<int32_t>(total);
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

void Scheduler::ApplyTable(Request* request, const cachemgr::SeqResult& result) {
  request->block_table.resize(result.table_offset);
  for (cachemgr::BlockId b : result.entries) request->block_table.push_back(b.value);
}

void Scheduler::Finish(Request* request, FinishReason reason, absl::Status error) {
  RequestEvent event;
  event.finish = reason;
  event.error = std::move(error);
  Finish(request, std::move(event));
}

void Scheduler::Finish(Request* request, RequestEvent event) {
  const FinishReason reason = event.finish;
  if (request->seq_id != 0) {
    pending_frees_.push_back(SeqId{request->seq_id});
    request->seq_id = 0;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
  if (request->sink) request->sink(event);
  LOG(INFO) << "request " << request->spec.request_id << " finished (" << ReasonName(reason)
            << ") after " << request->output.size() << " tokens"
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
    cache_lost_ = true;
  }
}

void Scheduler::Preempt(Request* victim) {
  LOG(INFO) << "request " << victim->spec.request_id << " preempted after "
            << victim->output.size() << " tokens; it will be recomputed";
  pending_frees_.push_back(SeqId{victim->seq_id});
  victim->seq_id = 0;
  victim->block_table.clear();
  victim->num_computed = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  waiting_.push_front(victim);
  ++loop_stats_.num_preemptions;
  metrics_->preemptions.Increment();
}

std::vector<Scheduler::Granted> Scheduler::ScheduleRunning(int32_t* budget,
                                                           cachemgr::StepResponse* copies) {
  std::vector<Granted> want;
  for (Request* r : running_) {
    const int32_t n = std::min(r->num_tokens() - r->num_computed, *budget);
    if (n <= 0) continue;
    want.push_back({r, n});
    *budget -= n;
  }
  std::vector<Granted> granted;
  while (!want.empty()) {
    cachemgr::StepRequest req;
    for (const Granted& g : want) {
      cachemgr::GrantOp op{.seq = SeqId{g.request->seq_id}, .start_pos = g.request->num_computed};
      for (int32_t i = 0; i < g.num_tokens; ++i) {
        op.token_ids.push_back(g.request->TokenAt(g.request->num_computed + i));
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
        ApplyTable(want[i].request, res);
        granted.push_back(want[i]);
        copies->grants.push_back(res);
      } else {
        retry.push_back(want[i]);
      }
    }
    if (retry.empty()) break;
    // No room: preempt the request that arrived last, then ask again for the rest.
    Request* victim = running_.back();
    auto drop = [victim](const Granted& g) { return g.request == victim; };
    for (const auto* list : {&granted, &retry}) {
      for (const Granted& g : *list) {
        if (g.request == victim) *budget += g.num_tokens;  // not computed this step after all
      }
    }
    granted.erase(std::remove_if(granted.begin(), granted.end(), drop), granted.end());
    const uint64_t victim_seq = victim->seq_id;
    copies->grants.erase(std::remove_if(copies->grants.begin(), copies->grants.end(),
                                        [victim_seq](const cachemgr::SeqResult& r) {
                                          return r.seq.value == victim_seq;
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
  const int32_t slots = options_.max_num_seqs - static_cast<int32_t>(running_.size());
  for (Request* r : waiting_) {
    if (static_cast<int32_t>(candidates.size()) >= std::min(slots, *budget)) break;
    candidates.push_back(r);
  }
  if (candidates.empty()) return {};

  // First the sequences, with their prefix lookups; their cached tokens decide the chunks.
  cachemgr::StepRequest create;
  for (Request* r : candidates) {
    cachemgr::CreateOp op{
        .seq = SeqId{next_seq_id_++}, .max_len = r->max_len, .request_id = r->spec.request_id};
    for (int32_t i = 0; i < r->num_tokens(); ++i) op.prompt.push_back(r->TokenAt(i));
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
    r->seq_id = res.seq.value;
    r->num_computed = res.num_cached_tokens;
    ApplyTable(r, res);
    admitted.push_back(r);
  }

  cachemgr::StepRequest grant;
  std::vector<Granted> want;
  for (Request* r : admitted) {
    const int32_t n = std::min(r->num_tokens() - r->num_computed, *budget);
    if (n <= 0) break;
    cachemgr::GrantOp op{.seq = SeqId{r->seq_id}, .start_pos = r->num_computed};
    for (int32_t i = 0; i < n; ++i) op.token_ids.push_back(r->TokenAt(r->num_computed + i));
    grant.grants.push_back(std::move(op));
    want.push_back({r, n});
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
    ApplyTable(want[i].request, res);
    copies->grants.push_back(res);
    granted.push_back(want[i]);
  }
  // Requests past the first refusal go back to waiting, their sequences freed.
  for (size_t i = first_refused; i < admitted.size(); ++i) {
    Request* r = admitted[i];
    pending_frees_.push_back(SeqId{r->seq_id});
    r->seq_id = 0;
    r->block_table.clear();
    r->num_computed = 0;
    granted.erase(std::remove_if(granted.begin(), granted.end(),
                                 [r](const Granted& g) { return g.request == r; }),
                  granted.end());
  }
  admitted.resize(first_refused);
  for (Request* r : admitted) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    running_.insert(std::upper_bound(running_.begin(), running_.end(), r,
                                     [](const Request* a, const Request* b) {
                                       return a->arrival < b->arrival;
                                     }),
                    r);
    if (r->first_admission) {
      r->first_admission = false;
      r->num_cached_prompt_tokens = r->num_computed;
      loop_stats_.prompt_tokens += static_cast<int64_t>(r->spec.prompt.size());
      metrics_->prompt_tokens.Increment(static_cast<double>(r->spec.prompt.size()));
    }
    loop_stats_.prefix_cache_hit_tokens += r->num_computed;
    metrics_->prefix_hits.Increment(r->num_computed);
  }
  return granted;
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
  for (const cachemgr::SeqResult& r : granted_results.grants) {
    for (const cachemgr::BlockCopy& c : r.copies) {
      input.block_copies.push_back({c.src.value, c.dst.value});
    }
  }
  int64_t num_tokens = 0;
  std::vector<std::string> request_ids;
  for (const Granted& g : batch) {
    request_ids.push_back(g.request->spec.request_id);
    Request* r = g.request;
    worker::SequenceStep s;
    s.seq_id = r->seq_id;
    s.start_pos = r->num_computed;
    for (int32_t i = 0; i < g.num_tokens; ++i) s.token_ids.push_back(r->TokenAt(r->num_computed + i));
    s.block_table = r->block_table;
    s.sampling = r->spec.sampling;
    s.num_samples = r->num_computed + g.num_tokens == r->num_tokens() ? 1 : 0;
    s.num_logprobs = r->spec.num_logprobs;
    input.seqs.push_back(std::move(s));
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
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < batch.size(); ++i) {
    Request* r = batch[i].request;
    r->num_computed += batch[i].num_tokens;
    pending_commits_.push_back({SeqId{r->seq_id}, r->num_computed});
    if (input.seqs[i].num_samples == 0) continue;
    const worker::SampledToken& sample = output->seqs[i].samples.at(0);
    r->output.push_back(sample.token_id);
    ++loop_stats_.generation_tokens;
    metrics_->generation_tokens.Increment();
    if (r->output.size() == 1) {
      metrics_->ttft.Observe(absl::ToDoubleSeconds(now - r->arrival_time));
    } else {
      metrics_->itl.Observe(absl::ToDoubleSeconds(now - r->last_token_time));
    }
    r->last_token_time = now;

    RequestEvent event;
    event.tokens.push_back({sample.token_id, sample.logprob, sample.top_logprobs});
    event.num_prompt_tokens = static_cast<int32_t>(r->spec.prompt.size());
    event.num_cached_prompt_tokens = r->num_cached_prompt_tokens;
    const auto& stops = r->spec.stop_token_ids;
    if ((!r->spec.ignore_eos && sample.token_id == options_.eos_id) ||
        std::find(stops.begin(), stops.end(), sample.token_id) != stops.end()) {
      event.finish = FinishReason::kStop;
    } else if (static_cast<int32_t>(r->output.size()) >= r->spec.max_tokens ||
               r->num_tokens() >= r->max_len) {
      event.finish = FinishReason::kLength;
    }
    if (event.finish == FinishReason::kNone) {
      if (r->sink) r->sink(event);
    } else {
      Finish(r, std::move(event));  // the last token and the finish reason travel together
    }
  }
  ++loop_stats_.num_steps;
  metrics_->batch_size.Observe(static_cast<double>(batch.size()));
  metrics_->batch_tokens.Observe(static_cast<double>(num_tokens));
  metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - start));
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
