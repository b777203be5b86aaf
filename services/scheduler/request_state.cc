#include "services/scheduler/request_state.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/scheduler_epoch.h"
#include "glog/logging.h"
#include "services/scheduler/token_history.h"

namespace folio::scheduler {

using cachemgr::SeqId;

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

const char* LostServiceName(LostService service) {
  return service == LostService::kWorker ? "worker" : "cachemgr";
}

absl::Status ValidateContinuation(const RequestSpec& spec, const SchedulerOptions& options) {
  if (spec.continuation.empty()) return absl::OkStatus();
  if (spec.beam_width > 0) {
    return absl::InvalidArgumentError(
        "a beam search cannot be continued (it streams nothing until it is done); "
        "submit it again from its prompt");
  }
  int32_t previous = -1;
  for (const RequestSpec::ContinuedChoice& c : spec.continuation) {
    if (c.index <= previous || c.index >= spec.n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "continuation: choice index ", c.index, " must be in [0, n = ", spec.n,
          ") and the choices ascending, each once"));
    }
    previous = c.index;
    const int64_t len = static_cast<int64_t>(c.tokens.size());
    if (len >= spec.max_tokens ||
        static_cast<int64_t>(spec.prompt.size()) + len >= options.max_model_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "continuation: choice ", c.index, " already has ", len, " tokens, so it is done (",
          "max_tokens ", spec.max_tokens, ", context ", options.max_model_len,
          "); leave finished choices out"));
    }
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      if (c.tokens[i] < 0 || c.tokens[i] >= options.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "continuation: choice ", c.index, " token ", i, " is ", c.tokens[i],
            ", outside the vocabulary [0, ", options.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const RequestSpec& spec, const SchedulerOptions& options) {
  if (spec.prompt.empty()) {
    return absl::InvalidArgumentError("the prompt has no tokens");
  }
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= options.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", spec.prompt[i],
                                                     ", outside the vocabulary [0, ",
                                                     options.vocab_size, ")"));
    }
  }
  if (spec.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be at least 1, got ", spec.max_tokens));
  }
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (total > options.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", spec.prompt.size(), " tokens) plus max_tokens (", spec.max_tokens,
        ") is ", total, ", more than the model's context of ", options.max_model_len));
  }
  if (spec.n < 1 || spec.n > options.max_n) {
    return absl::InvalidArgumentError(
        absl::StrCat("n must be in [1, ", options.max_n, "], got ", spec.n));
  }
  if (spec.beam_width < 0 || spec.beam_width > options.max_beam_width) {
    return absl::InvalidArgumentError(absl::StrCat("beam_width must be in [0, ",
                                                   options.max_beam_width, "], got ",
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
  if (absl::Status s = ValidateLogitsRequest(spec, options.vocab_size); !s.ok()) return s;
  if (absl::Status s = ValidateContinuation(spec, options); !s.ok()) return s;
  const int32_t width = spec.beam_width > 0 ? spec.beam_width : spec.n;
  if (width > options.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request runs ", width, " sequences at once, more than max_num_seqs (",
                     options.max_num_seqs, ")"));
  }
  if (options.num_blocks > 0 && width > 1) {
    // Worst case: the full prompt blocks shared, every other block private to a branch.
    const int64_t shared = static_cast<int64_t>(spec.prompt.size()) / options.block_size;
    const int64_t own = (total + options.block_size - 1) / options.block_size - shared;
    // Each window group's table: the most its blocks hold at once, or the whole sequence.
    int64_t window = 0;
    for (int32_t held : options.window_held_blocks) {
      window += std::min<int64_t>(held, (total + options.block_size - 1) / options.block_size);
    }
    const int64_t need = shared + width * (own + window);
    if (need > options.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the request may need ", need, " KV blocks (", width, " sequences of up to ", total,
          " tokens), more than the pool's ", options.num_blocks,
          "; lower n, beam_width or max_tokens"));
    }
  }
  return absl::OkStatus();
}

RequestState::RequestState(const SchedulerOptions& options, CacheClient* cache,
                           SchedulerMetrics* metrics)
    : options_(options), cache_(cache), metrics_(metrics) {}

void RequestState::Queue(std::unique_ptr<Request> request) {
  VLOG(1) << "request " << request->spec.request_id << " queued";
  waiting.push_back(request.get());
  const uint64_t arrival = request->arrival;
  requests_.emplace(arrival, std::move(request));
}

Request* RequestState::Find(uint64_t handle) {
  auto it = requests_.find(handle);
  return it == requests_.end() ? nullptr : it->second.get();
}

absl::StatusOr<cachemgr::StepResponse> RequestState::CacheStep(cachemgr::StepRequest request) {
  request.resolves = std::move(pending_resolves);
  request.commits = std::move(pending_commits);
  request.truncates = std::move(pending_truncates);
  request.frees = std::move(pending_frees);
  request.swap_outs = std::move(pending_swap_outs);
  pending_resolves.clear();
  pending_swap_outs.clear();
  pending_commits.clear();
  pending_truncates.clear();
  pending_frees.clear();
  request.transfers_done = transfers_done;
  absl::StatusOr<cachemgr::StepResponse> response = cache_->Step(request);
  if (response.ok()) {
    for (const cachemgr::BlockTransfer& t : response->transfers) {
      worker::HostTransfer::Kind kind = worker::HostTransfer::Kind::kStore;
      switch (t.kind) {
        case cachemgr::BlockTransfer::Kind::kStore: kind = worker::HostTransfer::Kind::kStore; break;
        case cachemgr::BlockTransfer::Kind::kLoad: kind = worker::HostTransfer::Kind::kLoad; break;
        case cachemgr::BlockTransfer::Kind::kSpill: kind = worker::HostTransfer::Kind::kSpill; break;
        case cachemgr::BlockTransfer::Kind::kLoadDisk:
          kind = worker::HostTransfer::Kind::kLoadDisk;
          break;
      }
      pending_transfers.push_back(worker::HostTransfer{.kind = kind,
                                                       .block = t.block.value,
                                                       .host_slot = t.host_slot,
                                                       .hash_hi = t.hash_hi,
                                                       .hash_lo = t.hash_lo,
                                                       .tokens = t.tokens});
      pending_transfers_ticket = std::max(pending_transfers_ticket, t.ticket);
    }
  }
  return response;
}

void RequestState::Flush() {
  if (!HasPendingCacheOps()) return;
  absl::StatusOr<cachemgr::StepResponse> resp = CacheStep({});
  if (!resp.ok()) {
    Lose(LostService::kCache, resp.status());
  }
}

void RequestState::QueueCommit(uint64_t seq_id, int32_t num_computed) {
  for (cachemgr::CommitOp& c : pending_commits) {
    if (c.seq.value == seq_id) {
      c.num_computed_tokens = std::max(c.num_computed_tokens, num_computed);
      return;
    }
  }
  pending_commits.push_back({cachemgr::SeqId{seq_id}, num_computed});
}

void RequestState::ApplyTable(Branch* branch, const cachemgr::SeqResult& result) {
  branch->block_table.resize(result.table_offset);
  for (cachemgr::BlockId b : result.entries) branch->block_table.push_back(b.value);
  if (result.windows.empty()) return;
  branch->window_tables.resize(result.windows.size());
  for (size_t g = 0; g < result.windows.size(); ++g) {
    const cachemgr::WindowResult& r = result.windows[g];
    worker::WindowBlockTable& t = branch->window_tables[g];
    // The blocks before first_block went back to the pool; then entries from
    // table_offset on are replaced.
    const int32_t released = std::clamp(r.first_block - t.first_block, 0,
                                        static_cast<int32_t>(t.blocks.size()));
    t.blocks.erase(t.blocks.begin(), t.blocks.begin() + released);
    t.first_block = r.first_block;
    t.blocks.resize(std::max(0, r.table_offset - r.first_block));
    for (cachemgr::BlockId b : r.entries) t.blocks.push_back(b.value);
  }
}

void RequestState::ReleaseSeq(uint64_t seq_id) {
  if (seq_id == 0) return;
  auto it = std::find_if(pending_forks.begin(), pending_forks.end(),
                         [seq_id](const PendingFork& f) { return f.child == seq_id; });
  if (it != pending_forks.end()) {
    pending_forks.erase(it);  // never reached the cache manager
    return;
  }
  pending_frees.push_back(SeqId{seq_id});
}

int32_t RequestState::RunningSeqs() const {
  int32_t n = 0;
  for (const Request* r : running) n += r->width();
  return n;
}

void RequestState::MarkRunning(Request* r) {
  waiting.erase(std::find(waiting.begin(), waiting.end(), r));
  running.insert(std::upper_bound(running.begin(), running.end(), r,
                                  [](const Request* a, const Request* b) {
                                    return a->arrival < b->arrival;
                                  }),
                 r);
}

void RequestState::Finish(Request* request, FinishReason reason, absl::Status error) {
  RequestEvent event;
  event.finish = reason;
  event.error = std::move(error);
  Finish(request, std::move(event));
}

void RequestState::Finish(Request* request, RequestEvent event) {
  const FinishReason reason = event.finish;
  for (Branch& b : request->branches) {
    ReleaseSeq(b.seq_id);
    b.seq_id = 0;
  }
  running.erase(std::remove(running.begin(), running.end(), request), running.end());
  waiting.erase(std::remove(waiting.begin(), waiting.end(), request), waiting.end());
  event.request_done = true;
  if (request->sink) request->sink(event);
  LOG(INFO) << "request " << request->spec.request_id << " finished ("
            << FinishReasonName(reason) << ") after " << request->num_generated << " tokens"
            << (event.error.ok() ? "" : absl::StrCat(": ", event.error.ToString()));
  metrics_->finished.WithLabels({FinishReasonName(reason)}).Increment();
  metrics_->e2e.Observe(absl::ToDoubleSeconds(absl::Now() - request->arrival_time));
  requests_.erase(request->arrival);
}

void RequestState::FailRunning(const absl::Status& status) {
  LOG(ERROR) << "failing " << running.size() << " running requests: " << status;
  while (!running.empty()) Finish(running.back(), FinishReason::kError, status);
}

void RequestState::Lose(LostService service, const absl::Status& cause) {
  if (!loss.has_value()) loss = Loss{service, cause};
  if (IsFenced(cause) && !fenced.has_value()) fenced = cause;
  LOG(WARNING) << LostServiceName(service) << " call failed: " << cause << "; "
               << running.size() << " running requests go back to the queue to be recomputed";
  // Latest arrival first, each pushed to the front: the queue starts in arrival order.
  for (auto it = running.rbegin(); it != running.rend(); ++it) {
    Request* r = *it;
    for (Branch& b : r->branches) {
      b.seq_id = 0;
      b.block_table.clear();
      b.window_tables.clear();
      b.num_computed = 0;
      b.candidates.clear();
      b.pending_samples = 0;  // its steps' outputs are dropped; it is sampled again
      b.draft.clear();
    }
    waiting.push_front(r);
  }
  running.clear();
  // The pool is rebuilt from scratch: what we meant to tell it no longer applies.
  pending_frees.clear();
  pending_swap_outs.clear();
  pending_resolves.clear();
  pending_commits.clear();
  pending_truncates.clear();
  pending_forks.clear();
  pending_copies.clear();
  // The cache manager's reset drops their unconfirmed stores; the tier that comes back
  // may be another, with tickets of its own.
  pending_transfers.clear();
  pending_transfers_ticket = 0;
  transfers_done = 0;
}

void RequestState::Preempt(Request* victim, bool may_swap) {
  // A group is recomputed from its root's prompt (its choices fork again at its end), so
  // only a request of one live sequence (a single choice, a group before its fan-out or
  // with one choice left, a beam search down to one beam) has KV worth keeping.
  const uint64_t root = victim->branches[0].seq_id;
  const bool swap =
      may_swap && options_.preemption == Preemption::kSwap && victim->branches.size() == 1 &&
      root != 0 &&
      std::none_of(pending_forks.begin(), pending_forks.end(), [root](const PendingFork& f) {
        return f.parent == root || f.child == root;
      });
  LOG(INFO) << "request " << victim->spec.request_id << " preempted ("
            << victim->branches.size() << " sequences) after " << victim->num_generated
            << " tokens; "
            << (swap ? "swapped out to the host tier" : "it will be recomputed");
  if (swap) {
    pending_swap_outs.push_back(SeqId{root});
    victim->branches[0].seq_id = 0;
  }
  for (Branch& b : victim->branches) {
    ReleaseSeq(b.seq_id);
    b.seq_id = 0;
    b.block_table.clear();
    b.window_tables.clear();
    b.num_computed = 0;
    b.candidates.clear();
    b.pending_samples = 0;  // its steps' outputs are dropped; it is sampled again
    b.draft.clear();
  }
  running.erase(std::remove(running.begin(), running.end(), victim), running.end());
  waiting.push_front(victim);
  ++stats.num_preemptions;
  metrics_->preemptions.Increment();
}

absl::Status RequestState::CheckInvariants() const {
  absl::flat_hash_set<const Request*> seen;
  absl::flat_hash_set<uint64_t> seqs;
  for (const Request* r : waiting) {
    if (!seen.insert(r).second) return absl::InternalError("a request is queued twice");
    for (const Branch& b : r->branches) {
      if (b.seq_id != 0 || !b.block_table.empty() || !b.window_tables.empty() ||
          b.num_computed != 0) {
        return absl::InternalError(absl::StrCat("waiting request ", r->spec.request_id,
                                                " holds a sequence"));
      }
    }
  }
  for (size_t i = 0; i < running.size(); ++i) {
    const Request* r = running[i];
    if (!seen.insert(r).second) {
      return absl::InternalError(absl::StrCat("request ", r->spec.request_id,
                                              " is both waiting and running"));
    }
    if (i > 0 && running[i - 1]->arrival >= r->arrival) {
      return absl::InternalError("running requests are out of arrival order");
    }
    for (const Branch& b : r->branches) {
      if (b.seq_id != 0 && !seqs.insert(b.seq_id).second) {
        return absl::InternalError(absl::StrCat("sequence ", b.seq_id, " is in two branches"));
      }
    }
  }
  if (seen.size() != requests_.size()) {
    return absl::InternalError(absl::StrCat(requests_.size(), " requests, ", seen.size(),
                                            " of them waiting or running"));
  }
  for (const auto* freed : {&pending_frees, &pending_swap_outs}) {
    for (SeqId s : *freed) {
      if (seqs.contains(s.value)) {
        return absl::InternalError(
            absl::StrCat("sequence ", s.value, " is freed but still held"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace folio::scheduler
