// StepPlanner: decides one step, {branch: num_tokens}, and gets the slots for it.
//
// Running requests come first, in arrival order, each live branch asking for its next
// token (or its next prefill chunk; a decoding branch with speculation on, for its next
// token and the proposals that follow it, speculation.h); then waiting requests are
// admitted in order, their prompts chunked to fit max_num_batched_tokens, up to
// max_num_seqs sequences running.
// The grants go to the cache manager in batched RPCs; where a grant finds no room, the
// running request that arrived last is preempted (RequestState::Preempt) and the rest is
// asked again. A request admitted after a refusal waits again, so admission keeps
// arrival order.
//
// Owned by the scheduler's loop thread, like the RequestState it plans over;
// thread-compatible.
#ifndef FOLIO_SERVICES_SCHEDULER_STEP_PLANNER_H_
#define FOLIO_SERVICES_SCHEDULER_STEP_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "services/scheduler/request_state.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

// Tokens of one branch computed in this step.
struct Granted {
  Request* request;
  int32_t branch;  // index into request->branches
  int32_t num_tokens;
};

// One planned step: the branches it computes, in the order of `input.seqs`.
struct PlannedStep {
  std::vector<Granted> batch;
  worker::StepInput input;
  std::vector<std::string> request_ids;  // request_ids[i] names input.seqs[i]'s request
  int64_t num_tokens = 0;
  // Speculation is on and the step's decoding branches were few enough to carry
  // proposals (SpeculativeOptions::max_batch): the next step likely is too.
  bool speculative_batch = false;
  // The newest host-tier store ticket input.host_transfers carries (0: none).
  uint64_t transfers_ticket = 0;
};

class StepPlanner {
 public:
  // `state` must outlive the planner.
  explicit StepPlanner(RequestState* state) : state_(state) {}

  // Plans the next step and gets its slots. An empty batch when nothing can run; then
  // state->loss tells whether a cache RPC failed (RequestState::Lose has then put every
  // running request back in the queue). A non-empty batch carries the pending fork copies and
  // this step's copy-on-write copies in input.block_copies.
  PlannedStep Plan();

  // Moves the host-tier transfers the cache manager decided so far into `plan` (Plan does
  // it for every step it plans; a step of transfers alone carries them when nothing runs).
  void TakeTransfers(PlannedStep* plan);
  // A planned step that is not sent gives its transfers back, to go with the next one
  // (unless a loss dropped every pending operation).
  void ReturnTransfers(PlannedStep* plan);

  // How many tokens branch `i` of `r` computes next (before the budget): up to its end,
  // or up to the end of the prompt while other branches wait to fork from the root.
  static int32_t Wanted(const Request& r, size_t i);

  // Speculative decoding (speculation.h): whether the decoding branches of `r` carry
  // proposals (those without a pending sample, in a batch small enough).
  bool MaySpeculate(const Request& r) const;

 private:
  // Grants the next tokens of every running request, preempting as needed.
  // `speculative_batch`: whether the batch was small enough for proposals.
  std::vector<Granted> ScheduleRunning(int32_t* budget, cachemgr::StepResponse* copies,
                                       bool* speculative_batch);
  std::vector<Granted> AdmitWaiting(int32_t* budget, cachemgr::StepResponse* copies);
  worker::SequenceStep MakeStep(const Request& r, const Granted& g) const;
  // Speculative decoding: a decoding branch's proposals (into b->draft), at most `room`.
  void Propose(const Request& r, Branch* b, int32_t room) const;
  void FailCache(const absl::Status& status);

  RequestState* const state_;
  // The last admission refused its head while later candidates held blocks: the next one
  // tries the head alone (AdmitWaiting).
  bool admit_head_alone_ = false;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_STEP_PLANNER_H_
