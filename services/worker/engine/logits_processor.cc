#include "services/worker/engine/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace folio::worker {
namespace {

// Written so that NaN fails: comparisons with NaN are false.
bool InClosedRange(float value, float lo, float hi) { return value >= lo && value <= hi; }

absl::Status CheckAscendingIds(const std::vector<int32_t>& ids, int32_t vocab_size,
                               const char* field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] is ", ids[i],
                                                     ", outside the vocabulary of ", vocab_size));
    }
    if (i > 0 && ids[i] <= ids[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " must be strictly ascending; entry ", i, " is ", ids[i]));
    }
  }
  return absl::OkStatus();
}

float RepetitionPenalized(float logit, float r) { return logit > 0 ? logit / r : logit * r; }

}  // namespace

void ApplyTokenMask(const TokenHistory& h, absl::Span<float> logits) {
  const auto& mask = h.allowed_token_bitmask;
  if (mask.empty()) return;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  // Word by word: a full word leaves its 32 logits alone, an empty one (most words in a
  // structural state) fills them, only mixed words go bit by bit.
  for (size_t w = 0; w < mask.size(); ++w) {
    const uint32_t bits = mask[w];
    if (bits == 0xFFFFFFFFu) continue;
    const size_t base = w * 32;
    const size_t end = std::min(n, base + 32);
    if (bits == 0) {
      std::fill(logits.begin() + base, logits.begin() + end, neg_inf);
      continue;
    }
    for (size_t id = base; id < end; ++id) {
      if (!((bits >> (id - base)) & 1u)) logits[id] = neg_inf;
    }
  }
}

bool NeedsLogitsTransform(const SamplingParams& p, const TokenHistory& h) {
  return !h.allowed_token_bitmask.empty() || NeedsLogitsTransformBesidesMask(p, h);
}

bool NeedsLogitsTransformBesidesMask(const SamplingParams& p, const TokenHistory& h) {
  return !h.suppressed_token_ids.empty() || !p.logit_bias.empty() ||
         p.repetition_penalty != 1.0f ||
         ((p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) &&
          !h.output_token_ids.empty());
}

absl::Status ValidateLogitsParams(const SamplingParams& p, int32_t vocab_size) {
  if (!InClosedRange(p.presence_penalty, -2.0f, 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty is ", p.presence_penalty, "; it must be in [-2, 2]"));
  }
  if (!InClosedRange(p.frequency_penalty, -2.0f, 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty is ", p.frequency_penalty, "; it must be in [-2, 2]"));
  }
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition_penalty is ", p.repetition_penalty, "; it must be > 0 (1 turns it off)"));
  }
  if (static_cast<int64_t>(p.logit_bias.size()) > kMaxLogitBiasEntries) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias has ", p.logit_bias.size(),
                                                   " entries; at most ", kMaxLogitBiasEntries,
                                                   " are allowed"));
  }
  absl::flat_hash_set<int32_t> seen;
  for (const LogitBias& b : p.logit_bias) {
    if (b.token_id < 0 || b.token_id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias key ", b.token_id, " is not a token id; token ids are in [0, ",
                       vocab_size, ")"));
    }
    if (!InClosedRange(b.bias, -100.0f, 100.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias value for token ", b.token_id,
                                                     " is ", b.bias, "; it must be in [-100, 100]"));
    }
    if (!seen.insert(b.token_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias has token ", b.token_id, " more than once"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTokenHistory(const TokenHistory& h, int32_t vocab_size) {
  if (absl::Status s = CheckAscendingIds(h.prompt_token_ids, vocab_size, "history.prompt_token_ids");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckAscendingIds(h.output_token_ids, vocab_size, "history.output_token_ids");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckAscendingIds(h.suppressed_token_ids, vocab_size, "history.suppressed_token_ids");
      !s.ok()) {
    return s;
  }
  if (!h.allowed_token_bitmask.empty()) {
    const size_t words = (static_cast<size_t>(vocab_size) + 31) / 32;
    if (h.allowed_token_bitmask.size() != words) {
      return absl::InvalidArgumentError(absl::StrCat(
          "history.allowed_token_bitmask has ", h.allowed_token_bitmask.size(),
          " words; the vocabulary of ", vocab_size, " tokens needs ", words));
    }
    bool any = false;
    for (size_t w = 0; w < words; ++w) {
      uint32_t bits = h.allowed_token_bitmask[w];
      if (w + 1 == words && vocab_size % 32 != 0) bits &= (1u << (vocab_size % 32)) - 1;
      any = any || bits != 0;
    }
    if (!any) {
      return absl::InvalidArgumentError("history.allowed_token_bitmask allows no token");
    }
  }
  if (h.output_counts.size() != h.output_token_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "history has ", h.output_token_ids.size(), " output token ids but ",
        h.output_counts.size(), " counts"));
  }
  for (size_t i = 0; i < h.output_counts.size(); ++i) {
    if (h.output_counts[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("history.output_counts[", i, "] is ", h.output_counts[i], "; it must be >= 1"));
    }
  }
  return absl::OkStatus();
}

void ApplyLogitsTransform(const SamplingParams& p, const TokenHistory& h,
                          absl::Span<float> logits) {
  ApplyTokenMask(h, logits);
  for (int32_t id : h.suppressed_token_ids) {
    logits[id] = -std::numeric_limits<float>::infinity();
  }
  for (const LogitBias& b : p.logit_bias) logits[b.token_id] += b.bias;
  const float r = p.repetition_penalty;
  if (r != 1.0f) {
    // Every token of prompt or output once: walk the two ascending lists as a merge.
    size_t i = 0, j = 0;
    const auto& a = h.prompt_token_ids;
    const auto& b = h.output_token_ids;
    while (i < a.size() || j < b.size()) {
      int32_t id;
      if (j == b.size() || (i < a.size() && a[i] < b[j])) {
        id = a[i++];
      } else if (i == a.size() || b[j] < a[i]) {
        id = b[j++];
      } else {
        id = a[i];
        ++i;
        ++j;
      }
      logits[id] = RepetitionPenalized(logits[id], r);
    }
  }
  const float f = p.frequency_penalty;
  const float pr = p.presence_penalty;
  if (f != 0.0f || pr != 0.0f) {
    for (size_t k = 0; k < h.output_token_ids.size(); ++k) {
      logits[h.output_token_ids[k]] -= f * static_cast<float>(h.output_counts[k]) + pr;
    }
  }
}

}  // namespace folio::worker
