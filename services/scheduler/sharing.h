// Sharing: turns one step's worker outputs into tokens, events, forks and frees, for
// plain sampling, parallel sampling (n > 1) and beam search (request.h describes the
// branch layouts).
//
// Forks made while a step's outputs are applied are queued and sent to the cache manager
// in one RPC by ApplyForks(), right after the step, so the pool and the scheduler's
// block-table mirrors agree between steps. A group is preempted and recomputed as a
// whole: its root alone prefills the prompt again, the other branches fork from it at
// the end of the prompt (ForkFromRoot) and recompute their own tokens.
//
// Owned by the scheduler's loop thread; thread-compatible. Sinks are called from Advance.
#ifndef FOLIO_SERVICES_SCHEDULER_SHARING_H_
#define FOLIO_SERVICES_SCHEDULER_SHARING_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "services/scheduler/request_state.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

// One branch's output of a step: (index into request->branches, its output).
using BranchOutputs = std::vector<std::pair<int32_t, const worker::SequenceOutput*>>;

class Sharing {
 public:
  // `state` must outlive this object.
  explicit Sharing(RequestState* state) : state_(state) {}

  // Applies `outs` (whose KV the caller has already counted as computed) to `r`: appends
  // tokens, checks stops, streams events, queues forks and frees. May finish `r`.
  void Advance(Request* r, const BranchOutputs& outs);

  // Sends the queued forks (with pending commits and frees) in one cache RPC. A refused
  // fork (baseline policy only) preempts its group; a failed RPC is a loss of the cache
  // (RequestState::Lose).
  void ApplyForks();

 private:
  void AdvanceSamples(Request* r, const BranchOutputs& outs);
  void AdvanceBeams(Request* r, const BranchOutputs& outs);
  // Forks every branch of `r` that holds no sequence from the root, once the root has
  // computed the whole prompt.
  void ForkFromRoot(Request* r);
  // Queues a fork of `child` (a new sequence id) from `parent` for ApplyForks().
  void QueueFork(Request* r, uint64_t parent, uint64_t child);
  // Structured output: advances b's matcher by `token` and refreshes b's mask. A lazy
  // grammar's branch first watches for its triggers and starts its matcher when one fires
  // (fed the trigger and the rest of the output after it).
  enum class GrammarVerdict {
    kNone,     // no grammar
    kOpen,     // the structure goes on
    kClosed,   // complete and nothing can follow: the choice ends with "stop"
    kDeadEnd,  // the token was outside the mask, or no token continues: ends it
    kError,    // the grammar went over an ambiguity bound (*error): fails the request
  };
  GrammarVerdict AdvanceGrammar(const Request& r, Branch* b, int32_t token, absl::Status* error);

  RequestState* const state_;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SHARING_H_
