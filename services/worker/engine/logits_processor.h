// The logits transform: what changes a sequence's next-token distribution before the
// sampler draws from it. Structured output joins as a token mask (step 0).
//
// For a logits row l over the vocabulary, in this order (vLLM V1's):
//   0. structured output: tokens the grammar's mask leaves out: l[t] = -inf
//   1. suppressed tokens (min_tokens not reached):        l[t] = -inf
//   2. logit_bias:                                         l[t] += bias[t]
//   3. repetition_penalty r, over every token t in prompt or output (Hugging Face's
//      RepetitionPenaltyLogitsProcessor, vLLM's definition):
//                                                          l[t] = l[t] > 0 ? l[t] / r : l[t] * r
//   4. frequency_penalty f and presence_penalty p, over output tokens only (OpenAI's):
//                                                          l[t] -= f * count[t] + p * (count[t] > 0)
// where count[t] is how many times t was generated so far in this sequence. Temperature
// and truncation (sampler.h) come after. Log-probs are not computed from the transformed
// row: they describe the model's raw distribution (as vLLM V1 reports them by default).
//
// Free functions and a stateless check; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_LOGITS_PROCESSOR_H_
#define FOLIO_SERVICES_WORKER_ENGINE_LOGITS_PROCESSOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "services/worker/engine/step.h"

namespace folio::worker {

// At most this many logit_bias entries per request (OpenAI's limit).
inline constexpr int32_t kMaxLogitBiasEntries = 300;

// Whether any step of the transform would change a row for `seq`.
bool NeedsLogitsTransform(const SamplingParams& params, const TokenHistory& history);
// Whether any step but the token mask would (the sampler draws from the allowed tokens
// alone when the mask is all there is, see sampler.h).
bool NeedsLogitsTransformBesidesMask(const SamplingParams& params, const TokenHistory& history);

// InvalidArgument naming the field unless: presence and frequency penalties are in
// [-2, 2], repetition_penalty is finite and > 0, logit_bias has at most 300 entries with
// distinct token ids in [0, vocab_size) and finite biases in [-100, 100].
absl::Status ValidateLogitsParams(const SamplingParams& params, int32_t vocab_size);

// InvalidArgument unless every id of `history` is in [0, vocab_size), the id lists are
// strictly ascending, output_counts matches output_token_ids with counts >= 1.
absl::Status ValidateTokenHistory(const TokenHistory& history, int32_t vocab_size);

// Sets every token the history's allowed_token_bitmask leaves out to -inf (nothing when
// the mask is empty). The first step of ApplyLogitsTransform; beam candidates use it alone.
void ApplyTokenMask(const TokenHistory& history, absl::Span<float> logits);

// Applies the transform above to `logits` ([vocab_size]) in place. The ids must have
// passed the checks above.
void ApplyLogitsTransform(const SamplingParams& params, const TokenHistory& history,
                          absl::Span<float> logits);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_LOGITS_PROCESSOR_H_
