// The scheduler's side of the logits transform (worker/engine/logits_processor.h): the
// checks on a request's penalties, logit_bias and min_tokens, and the TokenHistory that
// every sampling step of such a request carries to the workers.
//
// The scheduler owns a sequence's history: its prompt (the worker never sees the part the
// prefix cache served) and each branch's output, which survive preemption, recompute and
// forks because they live in the Request and its Branches. The history is rebuilt whole
// from them on each sampling step (O(output) per sequence and step), so no delta protocol
// can drift and nothing is kept on the workers, any of which may restart.
//
// Free functions; thread-safe.
#ifndef FOLIO_SERVICES_SCHEDULER_TOKEN_HISTORY_H_
#define FOLIO_SERVICES_SCHEDULER_TOKEN_HISTORY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "services/scheduler/request.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

// InvalidArgument naming the field for out-of-range penalties or logit_bias entries
// (ValidateLogitsParams), min_tokens outside [0, max_tokens], or any of them set
// with beam search (whose candidates and scores are the model's raw log-probs: penalties
// there are refused, as vLLM does).
absl::Status ValidateLogitsRequest(const RequestSpec& spec, int32_t vocab_size);

// Whether steps of this request carry a history at all.
bool UsesTokenHistory(const RequestSpec& spec);

// The prompt's distinct token ids, ascending, when repetition_penalty is on; else empty.
// Computed once per request.
std::vector<int32_t> PromptTokenSet(const RequestSpec& spec);

// The history for a step that samples after `output` (one branch's generated tokens):
// prompt_set as given, the output's distinct tokens with their counts, and while output
// is shorter than min_tokens the tokens that would end the choice (eos_id unless
// ignore_eos, and stop_token_ids).
worker::TokenHistory MakeTokenHistory(const RequestSpec& spec,
                                      const std::vector<int32_t>& prompt_set,
                                      const std::vector<int32_t>& output, int32_t eos_id);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_TOKEN_HISTORY_H_
