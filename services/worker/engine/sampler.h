// Sampling of next tokens from logits, and the log-probs reported with them.
//
// Randomness is counter-based: every draw is a pure function of (request seed, sample
// index, position), a SplitMix64 hash of the three, so a request samples the same
// tokens whatever batch it runs in, after preemption and recompute, and on any rank.
//
// Sampling order: the logits transform (logits_processor.h: min_tokens, logit_bias,
// repetition, frequency and presence penalties) on a copy of the row, then temperature
// scaling, then top-k, then top-p over what top-k kept, then min-p (relative to the most
// likely token); the draw is made from the renormalised survivors. Temperature 0 is greedy: the most likely token, the lowest id
// on a tie. Log-probs are always the log-softmax of the raw logits, before temperature
// and truncation and before the logits transform, so they describe the model, not the
// sampler (a token the transform suppressed still has its raw log-prob).
//
// Structured output: when the token mask (history.allowed_token_bitmask) is the only
// transform and it allows at most a quarter of the vocabulary, the draw is made from the
// allowed tokens' logits alone (gathered in id order) instead of from a masked copy of
// the whole row: the same token, bit for bit (masked tokens weigh exactly 0 in every sum
// and sort after every allowed one; the truncation choice is made as for the whole
// vocabulary), without copying and filling 128K floats per sequence and step.
//
// Sampler holds scratch buffers: thread-compatible (one per step thread).
#ifndef FOLIO_SERVICES_WORKER_ENGINE_SAMPLER_H_
#define FOLIO_SERVICES_WORKER_ENGINE_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/counter_random.h"
#include "services/worker/engine/step.h"

namespace folio::worker {

// A uniform double in [0, 1) keyed by (seed, sample_index, position).
using ::folio::CounterUniform;

// InvalidArgument (naming the field) unless temperature >= 0, top_k >= 0,
// 0 < top_p <= 1 and 0 <= min_p <= 1, all finite.
absl::Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  // Draws one token for sample `sample_index` at `position` (the position the new token
  // will take). logits: [vocab_size].
  int32_t Sample(absl::Span<const float> logits, const SamplingParams& params,
                 uint32_t sample_index, int64_t position);

  // log(sum(exp(logits))), computed stably.
  static double LogSumExp(absl::Span<const float> logits);

  // The k most likely tokens with their log-probs (log-softmax of logits), most likely
  // first, lower id first on a tie. k is clamped to the vocabulary size.
  std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits, int32_t k);
  std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits, double log_sum_exp,
                                        int32_t k);

  // Fills `out` for one sequence from its logits row: num_samples samples (each with
  // its log-prob and num_logprobs alternatives), num_candidates candidates, and the
  // logits themselves if asked. `position` is where the sampled token will go.
  void Process(absl::Span<const float> logits, const SequenceStep& seq, int64_t position,
               SequenceOutput* out);
  // The same, with log(sum(exp(logits))) already computed (a GPU backend reduces it on
  // the device, where a large vocabulary costs microseconds rather than milliseconds).
  void Process(absl::Span<const float> logits, double log_sum_exp, const SequenceStep& seq,
               int64_t position, SequenceOutput* out);
  // Speculative verification (SequenceStep::num_draft_tokens): `rows` holds the logits
  // of the last num_draft_tokens + 1 positions, [rows][vocab]; fills out->samples with the
  // accepted proposals and the token after them.
  void Verify(absl::Span<const float> rows, const SequenceStep& seq, SequenceOutput* out);

 private:
  // Token ids sorted by logit, descending (lower id first on ties); at least the first
  // `k` are sorted, the rest are in no particular order.
  void SortIds(absl::Span<const float> logits, int32_t k);
  // Sample over `logits`, deciding whether to truncate as for a row of `vocab_size`
  // tokens (the whole vocabulary when `logits` are the allowed tokens alone).
  int32_t SampleRow(absl::Span<const float> logits, const SamplingParams& params,
                    uint32_t sample_index, int64_t position, int32_t vocab_size);
  // The ids `mask` allows (ascending) into allowed_, if at most max_allowed of them.
  bool AllowedIds(const std::vector<uint32_t>& mask, int32_t vocab_size, int32_t max_allowed);

  std::vector<int32_t> ids_;
  std::vector<double> weights_;
  std::vector<float> transformed_;  // the row after the logits transform
  std::vector<float> masked_;       // beam search: the raw row under the grammar mask
  std::vector<int32_t> allowed_;    // the mask's allowed ids, when few
  std::vector<float> allowed_logits_;  // their logits, in the same order
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_SAMPLER_H_
