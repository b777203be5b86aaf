// RequestState: every request the scheduler's loop holds, and the cache-manager
// operations they have left pending. Owned by the scheduler's loop thread;
// thread-compatible (the planner, the sharing logic and the loop itself all run there).
//
// Invariants, kept here and checked by CheckInvariants():
//  * every request is in exactly one of `waiting` (queued or preempted, in the order it
//    will be admitted) and `running` (holding sequences, in arrival order);
//  * a waiting request's branches hold no sequence and no block-table mirror;
//  * a sequence id appears in at most one branch, and a pending free or fork names a
//    sequence no live branch holds (free) or the branch that will hold it (fork).
//
// Requests end through Finish() only: it gives their sequences back (freed with the next
// cache RPC), sends the last event with request_done and forgets them.
#ifndef FOLIO_SERVICES_SCHEDULER_REQUEST_STATE_H_
#define FOLIO_SERVICES_SCHEDULER_REQUEST_STATE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/cachemgr/step_types.h"
#include "services/scheduler/clients.h"
#include "services/scheduler/request.h"
#include "services/scheduler/scheduler_metrics.h"
#include "services/scheduler/scheduler_options.h"

namespace folio::scheduler {

// InvalidArgument, naming what is wrong, for a request that can never run under
// `options` (Scheduler::Submit lists the cases); OK otherwise.
absl::Status ValidateRequest(const RequestSpec& spec, const SchedulerOptions& options);
// The continuation part of ValidateRequest: no beam search, choice indexes ascending in
// [0, n), each with fewer than max_tokens tokens (and room left in the context), every
// token in the vocabulary.
absl::Status ValidateContinuation(const RequestSpec& spec, const SchedulerOptions& options);

// Which process a failed call lost.
enum class LostService { kWorker, kCache };
const char* LostServiceName(LostService service);

// A failed call to a worker or the cache manager: what recovery (recovery.h) repairs.
struct Loss {
  LostService service;
  absl::Status cause;
};

// A fork queued during a step, sent to the cache manager when the step ends.
struct PendingFork {
  Request* request;
  uint64_t parent;
  uint64_t child;
};

const char* FinishReasonName(FinishReason reason);

class RequestState {
 public:
  // `cache` and `metrics` must outlive the state.
  RequestState(const SchedulerOptions& options, CacheClient* cache, SchedulerMetrics* metrics);

  const SchedulerOptions& options() const { return options_; }
  SchedulerMetrics& metrics() { return *metrics_; }

  // Takes a new request and queues it at the back of `waiting`.
  void Queue(std::unique_ptr<Request> request);
  // The live request with this handle, or null.
  Request* Find(uint64_t handle);
  bool empty() const { return requests_.empty(); }
  // A fresh cache-manager sequence id.
  uint64_t NewSeqId() { return next_seq_id_++; }

  // One cache RPC, carrying the pending commits and frees along with `request`.
  absl::StatusOr<cachemgr::StepResponse> CacheStep(cachemgr::StepRequest request);
  // Sends the pending commits and frees, if any. A failure is a loss of the cache (Lose).
  void Flush();
  bool HasPendingCacheOps() const {
    return !pending_commits.empty() || !pending_frees.empty() || !pending_resolves.empty() ||
           !pending_truncates.empty() || !pending_swap_outs.empty();
  }
  // Queues the commit of a sequence's first `num_computed` tokens; a later commit of the
  // same sequence before the next cache RPC replaces it (pipelined steps can apply two
  // steps' outputs between RPCs).
  void QueueCommit(uint64_t seq_id, int32_t num_computed);

  // Gives a branch's sequence back: dropped from the queued forks if it is one of them,
  // freed with the next cache RPC otherwise. 0 is ignored.
  void ReleaseSeq(uint64_t seq_id);
  // Sequences the running requests may hold at once.
  int32_t RunningSeqs() const;
  // Moves `r` from `waiting` into `running`, in arrival order.
  void MarkRunning(Request* r);
  // Frees every sequence of `victim` and puts it at the head of `waiting` to be
  // recomputed from its prompt and the tokens it has produced. With --preemption=swap a
  // request of one live sequence is swapped out instead (its KV kept in the host tier, loaded
  // back by the prefix lookup when it is admitted again). `may_swap` false: freed in any
  // case (a grant of this plan copied its last block, and that copy is dropped with it).
  void Preempt(Request* victim, bool may_swap = true);

  // Ends a request: frees its sequences (with the next cache RPC), sends `event` (which
  // carries the finish reason and possibly the last tokens) with request_done set and
  // forgets the request.
  void Finish(Request* request, RequestEvent event);
  void Finish(Request* request, FinishReason reason, absl::Status error = absl::OkStatus());
  // Fails every running request with `status` (a step the workers refused as malformed:
  // a scheduler bug, not a lost process).
  void FailRunning(const absl::Status& status);

  // A call to a worker or the cache manager failed: the KV cache and the pool are
  // rebuilt from scratch, so every running request goes back to the front of the waiting
  // queue, in arrival order, with its tokens kept, to be recomputed (as a preemption
  // would, but it frees nothing: the pool's state is unknown), and every pending cache
  // operation is dropped. Records the loss for recovery; a second loss before recovery
  // began keeps the first as the cause.
  void Lose(LostService service, const absl::Status& cause);

  // Replaces the mirror of a branch's block table from the cache manager's answer.
  static void ApplyTable(Branch* branch, const cachemgr::SeqResult& result);

  // OK, or the first broken invariant of the header comment.
  absl::Status CheckInvariants() const;

  // The queues and pending operations, read and written by the planner, the sharing
  // logic and the loop (all on the loop thread).
  std::deque<Request*> waiting;
  std::vector<Request*> running;  // in arrival order
  std::vector<cachemgr::ResolveOp> pending_resolves;  // pipelined steps' sampled tokens
  std::vector<cachemgr::CommitOp> pending_commits;
  std::vector<cachemgr::TruncateOp> pending_truncates;  // rejected proposals, cut back
  std::vector<cachemgr::SeqId> pending_frees;
  std::vector<cachemgr::SeqId> pending_swap_outs;  // preempted with --preemption=swap
  std::vector<PendingFork> pending_forks;         // applied at the end of the step
  std::vector<worker::BlockCopy> pending_copies;  // from forks, run with the next step
  // The host KV tier (services/cachemgr/host_tier.h): stores and loads the cache manager
  // decided, in its order, for the next step sent to the workers; the newest store ticket
  // among them; and the newest ticket a step the workers answered carried (reported with
  // every cache RPC, so the cache manager knows which stores are really written).
  std::vector<worker::HostTransfer> pending_transfers;
  uint64_t pending_transfers_ticket = 0;
  uint64_t transfers_done = 0;
  // Set by Lose(), cleared by recovery once the processes are set up again: no step runs
  // meanwhile.
  std::optional<Loss> loss;
  // Set by Lose() when the call was refused because a newer scheduler claimed the replica
  // (common/scheduler_epoch.h): this one must never step again (Scheduler::Fence).
  std::optional<absl::Status> fenced;
  SchedulerStats stats;

 private:
  const SchedulerOptions options_;
  CacheClient* const cache_;
  SchedulerMetrics* const metrics_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_;  // by handle (arrival)
  uint64_t next_seq_id_ = 1;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_REQUEST_STATE_H_
