// The scheduler's record of one request, and the events it streams back. Owned by the
// Scheduler's loop thread. Thread-compatible.
//
// A request runs as one or more branches, each a sequence of the cache manager:
//  * plain sampling (n = 1): one branch;
//  * parallel sampling (n > 1): the root branch prefills the prompt once and draws n first
//    tokens from its last position; n - 1 children fork from it (sharing every prompt
//    block) and each then decodes on its own, sample k drawing with rng key k;
//  * beam search (beam_width k): the root prefills, then every step each live beam asks
//    for its top 2k next tokens; the k best continuations survive, forking from their
//    parents (beam_search.h has the selection and stopping rules).
#ifndef FOLIO_SERVICES_SCHEDULER_REQUEST_H_
#define FOLIO_SERVICES_SCHEDULER_REQUEST_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/structured/grammar_matcher.h"
#include "common/structured/grammar_trigger.h"
#include "services/scheduler/beam_search.h"
#include "services/scheduler/speculation.h"
#include "services/cachemgr/step_types.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

enum class FinishReason { kNone, kLength, kStop, kCancelled, kError };

// What a client asks for, in token ids (the frontend tokenizes).
struct RequestSpec {
  std::string request_id;
  std::vector<int32_t> prompt;
  worker::SamplingParams sampling;
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t num_logprobs = 0;
  // Choices to return: parallel samples, or (with beam_width > 0) the best finished beams.
  int32_t n = 1;
  int32_t beam_width = 0;       // 0: sampling; k > 0: beam search with k beams
  float length_penalty = 1.0f;  // beam search: a beam scores cum_logprob / length^penalty
  // EOS (unless ignore_eos) and stop_token_ids are not sampled before a choice has this
  // many tokens (token_history.h).
  int32_t min_tokens = 0;
  // A continuation (a frontend resuming the request after its scheduler was lost): the
  // unfinished choices by index, ascending, with the tokens the client already has. Empty
  // for a new request. The request then starts as a preempted one would be recomputed
  // (Scheduler::Submit), and only new tokens stream.
  struct ContinuedChoice {
    int32_t index = 0;
    std::vector<int32_t> tokens;
  };
  std::vector<ContinuedChoice> continuation;
  // Speculative decoding: proposals per step at most; -1: the scheduler's
  // --num_speculative_tokens, 0: this request never speculates (speculation.h).
  int32_t num_speculative_tokens = -1;
  // Structured output: GBNF text (common/structured/grammar.h); empty: unconstrained.
  std::string grammar;
  // With triggers the grammar is lazy (common/structured/grammar_trigger.h): a choice is
  // free until one fires in its output, then the grammar constrains the rest of it from
  // the trigger's first byte on (tool_choice "auto").
  std::vector<structured::GrammarTrigger> grammar_triggers;
  // The caller's deadline (its gRPC call's). Past it the call ends with DEADLINE_EXCEEDED
  // on its own; during a recovery the scheduler ends the request just before it, with
  // UNAVAILABLE saying the replica is recovering (recovery.h).
  absl::Time deadline = absl::InfiniteFuture();
};

struct GeneratedToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<worker::TokenLogprob> top_logprobs;
};

// One message to the client about choice `index`: new tokens and, on that choice's last
// message, its finish reason. The request's very last event has request_done set (for
// kCancelled and kError it is the only one that carries the reason, with index 0).
// Beam search sends nothing until it is done, then one event per returned beam, best
// first, each with all its tokens and its cumulative log-prob.
struct RequestEvent {
  int32_t index = 0;
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::kNone;
  bool request_done = false;
  absl::Status error;
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;
  double cumulative_logprob = 0.0;  // beam search: sum of the beam's token log-probs
};

// Receives a request's events on the loop thread; must not block. After an event with
// request_done no more events come.
using EventSink = std::function<void(const RequestEvent&)>;

// One sequence of a request: a sample or a beam.
struct Branch {
  int32_t index = 0;         // parallel sampling: the sample index (stream index, rng key)
  // Live while running: the cache manager's sequence (0 while it holds no blocks), its
  // block table mirror (and its window layer groups' tables, cachemgr paged_policy.h)
  // and the number of its tokens whose KV is computed.
  uint64_t seq_id = 0;
  std::vector<int32_t> block_table;
  std::vector<worker::WindowBlockTable> window_tables;
  int32_t num_computed = 0;
  std::vector<int32_t> output;   // generated tokens
  std::vector<float> logprobs;   // beam search: the log-prob of each output token
  double cum_logprob = 0.0;      // beam search
  // Beam search: the next-token candidates at this beam's end, kept until every live
  // beam has its own and the beam step runs.
  std::vector<worker::TokenLogprob> candidates;
  // Structured output: the grammar's state after `output` (a function of it alone, so it
  // stays valid through preemption, recompute and recovery; forks copy it) and the tokens
  // it allows next, which the next sampling step carries to the workers.
  std::optional<structured::GrammarMatcher> matcher;
  std::vector<uint32_t> mask;
  // A lazy grammar: the watch for its triggers over `output`; `matcher` stays empty (and
  // the branch unconstrained) until it fires.
  std::optional<structured::TriggerWatch> watch;

  // Pipelined steps (scheduler.h): tokens sampled by steps sent to the workers whose
  // outputs are not applied yet, so the next step can already compute them. They count in
  // num_tokens() and read as cachemgr::kPendingToken; the step that computes one gets its
  // real id when it is sent. At most 1 while a step is planned (2 between sending a step
  // and applying the outputs of the one before it).
  int32_t pending_samples = 0;
  // Speculative decoding (speculation.h): the proposals the step being planned or run
  // verifies after the branch's known tokens (never with pending samples), and the
  // branch's adaptive proposal count and pause.
  std::vector<int32_t> draft;
  SpeculativeBranch spec;

  // Generated tokens, pending ones included.
  int32_t num_tokens(const std::vector<int32_t>& prompt) const {
    return static_cast<int32_t>(prompt.size() + output.size()) + pending_samples;
  }
  // Without the pending ones.
  int32_t num_known_tokens(const std::vector<int32_t>& prompt) const {
    return static_cast<int32_t>(prompt.size() + output.size());
  }
  int32_t TokenAt(const std::vector<int32_t>& prompt, int32_t pos) const {
    const int32_t p = static_cast<int32_t>(prompt.size());
    if (pos < p) return prompt[pos];
    if (pos - p < static_cast<int32_t>(output.size())) return output[pos - p];
    const size_t d = static_cast<size_t>(pos - p) - output.size();
    if (d < draft.size()) return draft[d];
    return cachemgr::kPendingToken;  // the pending sample
  }
};

struct Request {
  RequestSpec spec;
  EventSink sink;
  uint64_t arrival = 0;           // admission order; preemption takes the largest
  absl::Time arrival_time;
  // Live branches. branches[0] is the root: after a preemption it alone is recomputed up
  // to the end of the prompt, and the others fork from it there.
  std::vector<Branch> branches;
  bool fanned_out = false;        // the first tokens are drawn / the beams have started
  int32_t max_len = 0;            // prompt + max_tokens, capped by max_model_len
  int32_t num_cached_prompt_tokens = 0;
  bool first_admission = true;
  absl::Time last_token_time;
  int64_t num_generated = 0;      // tokens generated over all branches (logs)
  FinishedBeams finished_beams;   // beam search
  // Structured output: the request's compiled grammar (set at Submit when it has one).
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // The prompt's distinct tokens for repetition_penalty (token_history.h), set at Submit.
  std::vector<int32_t> prompt_token_set;

  bool beam() const { return spec.beam_width > 0; }
  // The most sequences it may run at once.
  int32_t width() const { return beam() ? spec.beam_width : spec.n; }
  int32_t prompt_len() const { return static_cast<int32_t>(spec.prompt.size()); }
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_REQUEST_H_
