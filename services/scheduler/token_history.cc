#include "services/scheduler/token_history.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/worker/engine/logits_processor.h"

namespace folio::scheduler {
namespace {

void SortUnique(std::vector<int32_t>* ids) {
  std::sort(ids->begin(), ids->end());
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
}

}  // namespace

absl::Status ValidateLogitsRequest(const RequestSpec& spec, int32_t vocab_size) {
  if (absl::Status s = worker::ValidateLogitsParams(spec.sampling, vocab_size); !s.ok()) return s;
  if (spec.min_tokens < 0 || spec.min_tokens > spec.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens is ", spec.min_tokens,
                                                   "; it must be in [0, max_tokens = ",
                                                   spec.max_tokens, "]"));
  }
  if (spec.beam_width > 0) {
    const worker::SamplingParams& p = spec.sampling;
    const char* field = p.presence_penalty != 0.0f    ? "presence_penalty"
                        : p.frequency_penalty != 0.0f ? "frequency_penalty"
                        : p.repetition_penalty != 1.0f ? "repetition_penalty"
                        : !p.logit_bias.empty()        ? "logit_bias"
                        : spec.min_tokens > 0          ? "min_tokens"
                                                       : nullptr;
    if (field != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is not supported with beam search (beams are ranked by the model's own "
                 "log-probs); leave it unset or use sampling"));
    }
  }
  return absl::OkStatus();
}

bool UsesTokenHistory(const RequestSpec& spec) {
  const worker::SamplingParams& p = spec.sampling;
  return spec.min_tokens > 0 || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
         p.repetition_penalty != 1.0f;
}

std::vector<int32_t> PromptTokenSet(const RequestSpec& spec) {
  if (spec.sampling.repetition_penalty == 1.0f) return {};
  std::vector<int32_t> ids = spec.prompt;
  SortUnique(&ids);
  return ids;
}

worker::TokenHistory MakeTokenHistory(const RequestSpec& spec,
                                      const std::vector<int32_t>& prompt_set,
                                      const std::vector<int32_t>& output, int32_t eos_id) {
  worker::TokenHistory h;
  h.prompt_token_ids = prompt_set;
  const worker::SamplingParams& p = spec.sampling;
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f) {
    std::vector<int32_t> sorted = output;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      h.output_token_ids.push_back(sorted[i]);
      h.output_counts.push_back(static_cast<int32_t>(j - i));
      i = j;
    }
  }
  if (static_cast<int64_t>(output.size()) < spec.min_tokens) {
    h.suppressed_token_ids = spec.stop_token_ids;
    if (!spec.ignore_eos) h.suppressed_token_ids.push_back(eos_id);
    SortUnique(&h.suppressed_token_ids);
  }
  return h;
}

}  // namespace folio::scheduler
