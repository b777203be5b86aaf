// Scheduler: the request state and step loop of one model replica.
//
// Every iteration decides {sequence: num_tokens} with no separate prefill or decode
// phase: running requests get their next token (or their next prefill chunk) first, in
// arrival order; then waiting requests are admitted in order, their prompts chunked to
// fit max_num_batched_tokens, up to max_num_seqs sequences running. One batched RPC asks
// the cache manager for the slots (with the commits and frees the last step left behind);
// where a grant finds no room, the running request that arrived last is preempted (all
// its blocks freed, all or nothing), put back at the head of the waiting queue, and later
// recomputed from its prompt plus the tokens it had produced, so its stream neither
// repeats nor loses a token. Then the workers run the step and the sampled tokens are
// streamed, with stops checked.
//
// Sharing (request.h): a request with n > 1 samples or with beam search runs as a group
// of sequences forked from one another in the cache manager. The forks of a step go to
// the cache manager in one RPC right after the step, so the pool and the mirrors agree
// between steps. A group is preempted and recomputed as a whole: its root alone
// prefills the prompt again, the other branches fork from it at the end of the prompt
// and recompute their own tokens, so a recomputed group shares its prompt blocks again.
//
// Threading: one loop thread owns all request state (Run(), or RunOnce() from a test
// that owns the thread). Submit() and Cancel() are thread-safe: they post to an inbox
// the loop drains. Sinks are called on the loop thread.
#ifndef FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_
#define FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "services/scheduler/clients.h"
#include "services/scheduler/request.h"

namespace folio::scheduler {

struct SchedulerOptions {
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 512;  // tokens computed per step, all sequences
  int32_t max_num_seqs = 64;             // sequences running at once
  int32_t max_waiting_requests = 1024;   // past this, Submit answers ResourceExhausted
  int32_t max_model_len = 0;             // prompt + output cap, tokens
  int32_t vocab_size = 0;
  int32_t eos_id = 2;
  // Further tokens that end generation like eos_id (end of turn, ...); may include it.
  std::vector<int32_t> eog_ids;
  int32_t num_blocks = 0;                // the pool's size; 0: unknown (no size check)
  int32_t max_n = 16;                    // choices per request, at most
  int32_t max_beam_width = 8;            // beam width, at most
  // Each sequence asks the cache manager for max_model_len tokens rather than its prompt
  // plus max_tokens: what a reservation system that cannot know the output length must
  // reserve (the article's Orca (Max) baseline, with the contiguous policy).
  bool reserve_max_model_len = false;
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
};

class Scheduler {
 public:
  // `cache` and `workers` must outlive the scheduler; `registry` may be null (no metrics).
  Scheduler(const SchedulerOptions& options, CacheClient* cache, WorkerClient* workers,
            MetricsRegistry* registry);
  ~Scheduler();

  // Queues a request. InvalidArgument for a request that can never run (empty prompt,
  // token ids outside the vocabulary, longer than max_model_len, n outside [1, max_n],
  // beam_width outside [0, max_beam_width], n > beam_width in beam search, more sequences
  // than max_num_seqs, or a group whose blocks could outgrow the pool); ResourceExhausted
  // when the waiting queue is full. Returns a handle for Cancel().
  absl::StatusOr<uint64_t> Submit(RequestSpec spec, EventSink sink);

  // Aborts a request: its blocks are freed at once and its sink gets kCancelled.
  // Unknown or finished handles are ignored.
  void Cancel(uint64_t handle);

  // The loop: runs steps while there is work, sleeps otherwise, until Stop().
  void Run();
  void Stop();

  // One iteration on the calling thread: drains the inbox and runs a step if there is
  // work. Returns false when there was nothing to do. Not to be mixed with Run().
  bool RunOnce();

  SchedulerStats Stats() const;

 private:
  struct Metrics;
  // Tokens of one branch computed in this step.
  struct Granted {
    Request* request;
    int32_t branch;  // index into request->branches
    int32_t num_tokens;
  };
  struct PendingFork {
    Request* request;
    uint64_t parent;
    uint64_t child;
  };

  void DrainInbox();
  bool HasWork() const;
  // Whether `token` is eos_id or one of eog_ids.
  bool IsEndOfGeneration(int32_t token) const;
  // Sends commits and frees that are pending, if any.
  void Flush();
  void Step();
  // Grants the next tokens of every running request, preempting as needed.
  std::vector<Granted> ScheduleRunning(int32_t* budget, cachemgr::StepResponse* copies);
  std::vector<Granted> AdmitWaiting(int32_t* budget, cachemgr::StepResponse* copies);
  // How many tokens branch `i` of `r` computes next (before the budget): up to its end,
  // or up to the end of the prompt while other branches wait to fork from the root.
  int32_t Wanted(const Request& r, size_t i) const;
  worker::SequenceStep MakeStep(const Request& r, const Granted& g) const;
  // Turns one step's outputs for `r` into tokens, events, forks and frees. May finish r.
  void Advance(Request* r, const std::vector<std::pair<int32_t, const worker::SequenceOutput*>>& outs);
  void AdvanceSamples(Request* r,
                      const std::vector<std::pair<int32_t, const worker::SequenceOutput*>>& outs);
  void AdvanceBeams(Request* r,
                    const std::vector<std::pair<int32_t, const worker::SequenceOutput*>>& outs);
  // Forks every branch of `r` that holds no sequence from the root, once the root has
  // computed the whole prompt.
  void ForkFromRoot(Request* r);
  // Queues a fork of `child` (a new sequence id) from `parent` for ApplyForks().
  void QueueFork(Request* r, uint64_t parent, uint64_t child);
  // Sends the queued forks (with pending commits and frees) in one cache RPC.
  void ApplyForks();
  // Gives a branch's sequence back: dropped from the queued forks if it is one of them,
  // freed with the next cache RPC otherwise.
  void ReleaseSeq(uint64_t seq_id);
  int32_t RunningSeqs() const;
  void Preempt(Request* victim);
  // Ends a request: frees its sequences (with the next cache RPC), sends `event` (which
  // carries the finish reason and possibly the last tokens) with request_done set and
  // forgets the request.
  void Finish(Request* request, RequestEvent event);
  void Finish(Request* request, FinishReason reason, absl::Status error = absl::OkStatus());
  // Fails every running request (a worker or the cache manager is gone).
  void FailRunning(const absl::Status& status, bool cache_lost);
  void ApplyTable(Branch* branch, const cachemgr::SeqResult& result);
  absl::StatusOr<cachemgr::StepResponse> CacheStep(cachemgr::StepRequest request);
  void Publish();

  const SchedulerOptions options_;
  CacheClient* const cache_;
  WorkerClient* const workers_;
  std::unique_ptr<Metrics> metrics_;

  // Inbox, shared with other threads.
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::vector<std::unique_ptr<Request>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancels_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int32_t num_queued_ ABSL_GUARDED_BY(mu_) = 0;  // inbox + waiting, for admission control
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);

  // Loop-thread state.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_;  // by handle (arrival)
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in arrival order
  std::vector<cachemgr::CommitOp> pending_commits_;
  std::vector<cachemgr::SeqId> pending_frees_;
  std::vector<PendingFork> pending_forks_;         // applied at the end of the step
  std::vector<worker::BlockCopy> pending_copies_;  // from forks, run with the next step
  uint64_t next_seq_id_ = 1;
  uint64_t next_step_id_ = 1;
  bool cache_lost_ = false;
  SchedulerStats loop_stats_;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_
