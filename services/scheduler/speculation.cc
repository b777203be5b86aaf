#include "services/scheduler/speculation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/counter_random.h"

namespace folio::scheduler {

absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(const std::string& name) {
  for (SpeculativeMode mode :
       {SpeculativeMode::kOff, SpeculativeMode::kNgram, SpeculativeMode::kDraft}) {
    if (name == SpeculativeModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative must be off, ngram or draft, got '", name, "'"));
}

const char* SpeculativeModeName(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::kNgram:
      return "ngram";
    case SpeculativeMode::kDraft:
      return "draft";
    case SpeculativeMode::kOff:
      break;
  }
  return "off";
}

absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& o) {
  if (o.num_tokens < 1 || o.num_tokens > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--num_speculative_tokens must be in [1, ",
                                                   kMaxSpeculativeTokens, "], got ",
                                                   o.num_tokens));
  }
  if (o.ngram_min < 1 || o.ngram_max < o.ngram_min || o.ngram_max > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n-gram sizes must satisfy 1 <= min <= max <= 64, got min ", o.ngram_min, ", max ",
        o.ngram_max));
  }
  if (o.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec_max_batch must be at least 1, got ", o.max_batch));
  }
  if (!(o.synth_len == 0.0 || (o.synth_len >= 1.0 && o.synth_len <= o.num_tokens + 1.0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--spec_synth_len must be 0 (off) or in [1, num_speculative_tokens + 1 = ",
        o.num_tokens + 1, "], got ", o.synth_len));
  }
  return absl::OkStatus();
}

std::vector<int32_t> ProposeNgram(absl::Span<const int32_t> prompt,
                                  absl::Span<const int32_t> output, int32_t k,
                                  int32_t ngram_min, int32_t ngram_max) {
  const int64_t p = static_cast<int64_t>(prompt.size());
  const int64_t len = p + static_cast<int64_t>(output.size());
  auto at = [&](int64_t i) { return i < p ? prompt[i] : output[i - p]; };
  std::vector<int32_t> out;
  if (k <= 0) return out;
  for (int64_t n = std::min<int64_t>(ngram_max, len - 1); n >= ngram_min; --n) {
    // The most recent earlier start i of the last n tokens (i + n <= len - 1, so at least
    // one token follows the occurrence).
    for (int64_t i = len - n - 1; i >= 0; --i) {
      int64_t j = 0;
      while (j < n && at(i + j) == at(len - n + j)) ++j;
      if (j < n) continue;
      for (int64_t t = i + n; t < len && static_cast<int32_t>(out.size()) < k; ++t) {
        out.push_back(at(t));
      }
      return out;
    }
  }
  return out;
}

double SyntheticRate(double mean_len, int32_t k) {
  auto expected = [k](double r) {
    double sum = 0.0, term = 1.0;
    for (int32_t i = 0; i <= k; ++i, term *= r) sum += term;
    return sum;
  };
  double lo = 0.0, hi = 1.0;
  if (mean_len <= 1.0) return 0.0;
  if (mean_len >= k + 1.0) return 1.0;
  for (int iter = 0; iter < 60; ++iter) {
    const double mid = 0.5 * (lo + hi);
    (expected(mid) < mean_len ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

int32_t SyntheticAccepts(double rate, int32_t k, uint64_t key) {
  int32_t accepted = 0;
  while (accepted < k && CounterUniform(key, 0, accepted) < rate) ++accepted;
  return accepted;
}

void AdaptSpeculation(int32_t proposed, int32_t accepted, int32_t max_k, SpeculativeBranch* s) {
  if (proposed <= 0) return;
  if (accepted > 0) s->backoff = 0;
  if (accepted == proposed) {
    s->k = std::min(max_k, s->k + 1);
  } else if (accepted == 0) {
    // Refused at k = 1 (not merely a short proposal, as an n-gram near its match or a
    // branch near max_tokens makes): sit out, longer each time in a row.
    if (s->k <= 1) {
      s->backoff = s->backoff == 0 ? kFirstSpeculativePause
                                   : std::min(kMaxSpeculativePause, 2 * s->backoff);
      s->pause = s->backoff;
    }
    s->k = std::max(1, s->k / 2);
  }
}

bool ProposesThisStep(SpeculativeBranch* s) {
  if (s->pause <= 0) return true;
  --s->pause;
  return false;
}

}  // namespace folio::scheduler
