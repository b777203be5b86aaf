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
// Pipelined steps (SchedulerOptions::async_steps): the loop sends a step
// (WorkerClient::Start) and, while the workers run it, plans the next one and gets its
// slots, then waits for the answer (WorkerClient::Finish), sends the next step at once and
// applies this one's outputs (tokens streamed, stops checked, forks made) while the next
// runs. No thread is added: the gRPC client's calls are asynchronous.
// A decoding sequence then grows in the plan by the token the step in flight is sampling
// (Branch::pending_samples): the cache manager grants its slot as pending
// (cachemgr::kPendingToken), the step carries the real id, filled in when it is sent, and
// a resolve tells the cache manager the id before any commit covers it. A sequence that
// stops on a sampled token (EOS, a stop token) so runs one step too far: that step's
// outputs for it are dropped, never streamed, and its blocks are freed as at any finish.
// Steps are planned ahead only when every sequence the step in flight samples is plain
// sampling (no grammar mask, no beam search, no fan-out of n first tokens) and its sample
// cannot end it by length; otherwise that step is followed synchronously. The loop names
// the step's requests by handle and branches by sequence id, so a cancel, a preemption or
// a loss before the answer drops the outputs it no longer has a branch for; a loss or a
// fence waits for the step in flight before recovery touches the processes.
//
// Speculative decoding (speculation.h): a decoding branch may carry proposals after its
// next input token; the workers answer with 1 .. k + 1 tokens, the branch keeps what they
// accepted and the cache manager cuts the rest back (a truncate with the commit). A step
// that verifies proposals is followed synchronously: the next plan needs its answer.
//
// Sharing (request.h): a request with n > 1 samples or with beam search runs as a group
// of sequences forked from one another in the cache manager. The forks of a step go to
// the cache manager in one RPC right after the step, so the pool and the mirrors agree
// between steps. A group is preempted and recomputed as a whole: its root alone
// prefills the prompt again, the other branches fork from it at the end of the prompt
// and recompute their own tokens, so a recomputed group shares its prompt blocks again.
//
// The pieces, each in its own file: RequestState (request_state.h) holds the requests,
// queues and pending cache operations and ends requests; StepPlanner (step_planner.h)
// decides each step and gets its slots; Sharing (sharing.h) applies the step's outputs,
// forks and beams; Recovery (recovery.h) heals the replica after a worker or the cache
// manager is lost; this class owns the inbox and the loop.
//
// Threading: one loop thread owns all request state (Run(), or RunOnce() from a test
// that owns the thread). Submit() and Cancel() are thread-safe: they post to an inbox
// the loop drains. Sinks are called on the loop thread.
#ifndef FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_
#define FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "services/scheduler/clients.h"
#include "services/scheduler/recovery.h"
#include "services/scheduler/request.h"
#include "services/scheduler/request_state.h"
#include "services/scheduler/scheduler_metrics.h"
#include "services/scheduler/scheduler_options.h"
#include "services/scheduler/sharing.h"
#include "services/scheduler/step_planner.h"

namespace folio::scheduler {

// The step loop's pulse, published at the end of every iteration.
struct LoopHealth {
  absl::Time last_iteration = absl::Now();  // when the loop last finished an iteration
  bool has_work = false;                    // it had requests to step (or to recover)
  bool recovering = false;                  // it waits for a lost process (recovery.h)
  bool fenced = false;  // a newer scheduler claimed the replica: this one steps no more
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
  // than max_num_seqs, a group whose blocks could outgrow the pool, or penalties, logit_bias
  // or min_tokens out of range or with beam search: token_history.h); ResourceExhausted
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

  // What liveness and readiness are judged by (stall_watchdog.h), as of the loop's last
  // iteration. Thread-safe.
  LoopHealth Health() const;

 private:
  void DrainInbox();
  bool HasWork() const;
  // Fenced (RequestState::fenced): ends every request UNAVAILABLE, resumable, and drops
  // whatever was meant for the replica. Returns whether there was anything to end.
  bool Fence();
  void Step();
  void Publish();

  // Pipelined steps: what the loop keeps of a step sent to the workers.
  struct InflightStep {
    struct Seq {
      uint64_t handle = 0;        // the request
      uint64_t seq_id = 0;        // its branch
      int32_t num_computed = 0;   // the branch's computed tokens once the step is done
      int32_t num_samples = 0;    // what the step asked for
      int32_t num_candidates = 0;
      bool pending = false;       // the step's sample counted in Branch::pending_samples
      int32_t num_draft = 0;      // proposals it verifies (speculation.h)
    };
    std::vector<Seq> seqs;        // as the step's input.seqs
    bool pipelined = true;        // every branch it samples can go on before its answer
    absl::Time start;
    uint64_t transfers_ticket = 0;  // PlannedStep's: confirmed once the step answers
    bool had_transfers = false;
  };
  // Nothing to step, but host-tier transfers wait (stores of a request that just ended):
  // a step of transfers alone runs them now, so the tier holds the blocks even if the
  // worker is lost before the next request.
  void SendTransfers();
  // A step the workers refused with DATA_LOSS (disk loads that failed): the blocks it
  // names go to the cache manager with the Reset, and the pool is lost (recomputed).
  void LoseToDiskLoads(const absl::Status& status);
  // Sends `plan` to the workers; `previous` (with its `output`), when given, is the step
  // whose samples the plan's pending tokens are.
  void Launch(PlannedStep plan, const InflightStep* previous,
              const worker::StepOutput* output);
  // A verification's answer for branch `b`: its computed tokens cut back to the accepted
  // ones (the cache manager's truncate queued with the commit), its k adapted, the
  // figures counted. Returns the branch's computed tokens.
  int32_t AcceptProposals(const InflightStep::Seq& seq, const worker::SequenceOutput& out,
                          Branch* b);
  // Applies a step's answer: the outputs of branches it still has, or the loss it means.
  void Complete(const InflightStep& step, absl::StatusOr<worker::StepOutput> output);
  // InternalError unless `output` has one output per sequence of `step`, each with the
  // samples it asked for and at most the candidates.
  static absl::Status CheckAnswer(const InflightStep& step, const worker::StepOutput& output);
  // Waits for the step in flight and drops its answer (a loss or a fence already reset
  // what it was for).
  void DropInflight();
  // Whether a branch of `r` sampling in a step being sent may grow by that sample in the
  // next plan, before the answer arrives: plain sampling, nothing the host must compute
  // from the sample first (a grammar mask, beam selection, the fan-out of n first tokens).
  bool Pipelinable(const Request& r) const;
  // Whether the sample of a step being sent is branch `b`'s last by length (max_tokens or
  // max_len), pending samples before it counted.
  static bool EndsByLength(const Request& r, const Branch& b);

  const SchedulerOptions options_;
  CacheClient* const cache_;
  WorkerClient* const workers_;
  std::unique_ptr<MetricsRegistry> own_registry_;  // when none was injected
  std::unique_ptr<SchedulerMetrics> metrics_;
  ProposerMetrics proposer_metrics_;  // --speculative's, when on

  // Inbox, shared with other threads.
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::vector<std::unique_ptr<Request>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancels_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int32_t num_queued_ ABSL_GUARDED_BY(mu_) = 0;  // inbox + waiting, for admission control
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);
  LoopHealth health_ ABSL_GUARDED_BY(mu_);

  // Loop-thread state.
  RequestState state_;
  StepPlanner planner_;
  Sharing sharing_;
  Recovery recovery_;
  std::optional<InflightStep> inflight_;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SCHEDULER_H_
