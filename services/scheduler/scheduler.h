// Scheduler: the request state and step loop of one model replica.
//
// Every iteration decides {sequence: num_tokens} with no separate prefill or decode
// phase: running requests get their next token (or their next prefill chunk) first, in
// arrival order; then waiting requests are admitted in order, their prompts chunked to
// fit max_num_batched_tokens, up to max_num_seqs running. One batched RPC asks the cache
// manager for the slots (with the commits and frees the last step left behind); where a
// grant finds no room, the running request that arrived last is preempted (all its
// blocks freed, all or nothing), put back at the head of the waiting queue, and later
// recomputed from its prompt plus the tokens it had produced, so its stream neither
// repeats nor loses a token. Then the workers run the step and the sampled tokens are
// streamed, with stops checked.
//
// Threading: one loop thread owns all request state (Run(), or RunOnce() from a test
// that owns the thread). Submit() and Cancel() are thread-safe: they post to an inbox
// the loop drains. Sinks are called on the loop thread.
#ifndef FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_
#define FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
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
  // token ids outside the vocabulary, longer than max_model_len); ResourceExhausted when
  // the waiting queue is full. Returns a handle for Cancel().
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
  struct Granted {
    Request* request;
    int32_t num_tokens;
  };

  void DrainInbox();
  bool HasWork() const;
  // Sends commits and frees that are pending, if any.
  void Flush();
  void Step();
  // Grants the next tokens of every running request, preempting as needed.
  std::vector<Granted> ScheduleRunning(int32_t* budget, cachemgr::StepResponse* copies);
  std::vector<Granted> AdmitWaiting(int32_t* budget, cachemgr::StepResponse* copies);
  void Preempt(Request* victim);
  // Ends a request: frees its sequence (with the next cache RPC), sends `event` (which
  // carries the finish reason and possibly the last tokens) and forgets the request.
  void Finish(Request* request, RequestEvent event);
  void Finish(Request* request, FinishReason reason, absl::Status error = absl::OkStatus());
  // Fails every running request (a worker or the cache manager is gone).
  void FailRunning(const absl::Status& status, bool cache_lost);
  void ApplyTable(Request* request, const cachemgr::SeqResult& result);
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
  uint64_t next_seq_id_ = 1;
  uint64_t next_step_id_ = 1;
  bool cache_lost_ = false;
  SchedulerStats loop_stats_;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_
