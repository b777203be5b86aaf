#include "services/worker/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "services/worker/engine/logits_processor.h"

namespace folio::worker {
namespace {

int32_t Argmax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0 && p.min_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  return absl::OkStatus();
}

double Sampler::LogSumExp(absl::Span<const float> logits) {
  const float max = logits[Argmax(logits)];
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  return max + std::log(sum);
}

void Sampler::SortIds(absl::Span<const float> logits, int32_t k) {
  const int32_t n = static_cast<int32_t>(logits.size());
  ids_.resize(n);
  std::iota(ids_.begin(), ids_.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k > 0 && k < n) {
    std::partial_sort(ids_.begin(), ids_.begin() + k, ids_.end(), before);
  } else {
    std::sort(ids_.begin(), ids_.end(), before);
  }
}

int32_t Sampler::Sample(absl::Span<const float> logits, const SamplingParams& params,
                        uint32_t sample_index, int64_t position) {
  return SampleRow(logits, params, sample_index, position, static_cast<int32_t>(logits.size()));
}

int32_t Sampler::SampleRow(absl::Span<const float> logits, const SamplingParams& params,
                           uint32_t sample_index, int64_t position, int32_t vocab_size) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (params.temperature == 0.0f || params.top_k == 1) return Argmax(logits);
  const double u = CounterUniform(params.seed, sample_index, position);
  const double inv_t = 1.0 / params.temperature;
  const float max = logits[Argmax(logits)];
  // Unnormalised probabilities; the most likely token has weight 1.
  auto weight = [&](int32_t id) { return std::exp((static_cast<double>(logits[id]) - max) * inv_t); };

  const bool truncate = (params.top_k > 0 && params.top_k < vocab_size) || params.top_p < 1.0f ||
                        params.min_p > 0.0f;
  if (!truncate) {
    weights_.resize(vocab);
    double total = 0;
    for (int32_t i = 0; i < vocab; ++i) total += (weights_[i] = weight(i));
    double target = u * total;
    int32_t last = 0;  // the last token that can be drawn
    for (int32_t i = 0; i < vocab; ++i) {
      if (weights_[i] > 0) last = i;
      if ((target -= weights_[i]) < 0) return i;
    }
    // Rounding left a sliver of mass past the end: never a token of weight 0 (one the
    // logits transform suppressed).
    return last;
  }

  const int32_t k = (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;
  SortIds(logits, k);
  weights_.resize(k);
  double total = 0;
  for (int32_t i = 0; i < k; ++i) total += (weights_[i] = weight(ids_[i]));
  int32_t kept = k;
  if (params.top_p < 1.0f) {
    const double need = params.top_p * total;
    double cum = 0;
    for (int32_t i = 0; i < k; ++i) {
      cum += weights_[i];
      if (cum >= need) {
        kept = i + 1;
        break;
      }
    }
  }
  if (params.min_p > 0.0f) {
    // weights_[0] is the top token's weight, 1.
    int32_t i = 1;
    while (i < kept && weights_[i] >= params.min_p * weights_[0]) ++i;
    kept = i;
  }
  total = 0;
  for (int32_t i = 0; i < kept; ++i) total += weights_[i];
  double target = u * total;
  for (int32_t i = 0; i < kept; ++i) {
    if ((target -= weights_[i]) < 0) return ids_[i];
  }
  // Weights are sorted descending: the last one above 0 (the first always is).
  while (kept > 1 && !(weights_[kept - 1] > 0)) --kept;
  return ids_[kept - 1];
}

bool Sampler::AllowedIds(const std::vector<uint32_t>& mask, int32_t vocab_size,
                         int32_t max_allowed) {
  // Validated: mask.size() == ceil(vocab_size / 32), at least one bit set below vocab_size.
  int64_t count = 0;
  for (uint32_t w : mask) count += __builtin_popcount(w);
  if (count > max_allowed) return false;
  allowed_.clear();
  for (size_t w = 0; w < mask.size(); ++w) {
    for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
      const int32_t id = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
      if (id < vocab_size) allowed_.push_back(id);
    }
  }
  return !allowed_.empty();
}

std::vector<TokenLogprob> Sampler::TopLogprobs(absl::Span<const float> logits, int32_t k) {
  return TopLogprobs(logits, LogSumExp(logits), k);
}

std::vector<TokenLogprob> Sampler::TopLogprobs(absl::Span<const float> logits, double lse,
                                               int32_t k) {
  k = std::min<int32_t>(k, static_cast<int32_t>(logits.size()));
  std::vector<TokenLogprob> out;
  if (k <= 0) return out;
  SortIds(logits, k);
  out.reserve(k);
  for (int32_t i = 0; i < k; ++i) {
    out.push_back({ids_[i], static_cast<float>(logits[ids_[i]] - lse)});
  }
  return out;
}

void Sampler::Process(absl::Span<const float> logits, const SequenceStep& seq, int64_t position,
                      SequenceOutput* out) {
  Process(logits, LogSumExp(logits), seq, position, out);
}

void Sampler::Process(absl::Span<const float> logits, double lse, const SequenceStep& seq,
                      int64_t position, SequenceOutput* out) {
  out->seq_id = seq.seq_id;
  std::vector<TokenLogprob> top;
  const int32_t num_top = std::max(seq.num_logprobs, seq.num_candidates);
  if (num_top > 0) top = TopLogprobs(logits, lse, num_top);
  // Samples come from the transformed row, log-probs from the raw one. A mask alone that
  // allows few tokens: from those tokens' logits (sampler.h).
  const int32_t vocab = static_cast<int32_t>(logits.size());
  absl::Span<const float> sample_logits = logits;
  bool sparse = false;
  if (seq.num_samples > 0 && !seq.history.allowed_token_bitmask.empty() &&
      !NeedsLogitsTransformBesidesMask(seq.sampling, seq.history) &&
      AllowedIds(seq.history.allowed_token_bitmask, vocab, vocab / 4)) {
    allowed_logits_.resize(allowed_.size());
    for (size_t i = 0; i < allowed_.size(); ++i) allowed_logits_[i] = logits[allowed_[i]];
    sample_logits = allowed_logits_;
    sparse = true;
  } else if (seq.num_samples > 0 && NeedsLogitsTransform(seq.sampling, seq.history)) {
    transformed_.assign(logits.begin(), logits.end());
    ApplyLogitsTransform(seq.sampling, seq.history, absl::MakeSpan(transformed_));
    sample_logits = transformed_;
  }
  for (int32_t s = 0; s < seq.num_samples; ++s) {
    SampledToken t;
    t.token_id = SampleRow(sample_logits, seq.sampling,
                           static_cast<uint32_t>(seq.first_sample_index + s), position, vocab);
    if (sparse) t.token_id = allowed_[t.token_id];
    t.logprob = static_cast<float>(logits[t.token_id] - lse);
    t.top_logprobs.assign(top.begin(), top.begin() + std::min<size_t>(top.size(), seq.num_logprobs));
    out->samples.push_back(std::move(t));
  }
  out->candidates.assign(top.begin(), top.begin() + std::min<size_t>(top.size(), seq.num_candidates));
  if (seq.num_candidates > 0 && !seq.history.allowed_token_bitmask.empty()) {
    // Beam search under a grammar: the candidates are the most likely allowed tokens,
    // with the raw row's log-probs.
    masked_.assign(logits.begin(), logits.end());
    ApplyTokenMask(seq.history, absl::MakeSpan(masked_));
    out->candidates = TopLogprobs(masked_, lse, seq.num_candidates);
    while (!out->candidates.empty() && std::isinf(out->candidates.back().logprob)) {
      out->candidates.pop_back();
    }
  }
  if (seq.return_logits) out->logits.assign(logits.begin(), logits.end());
}

void Sampler::Verify(absl::Span<const float> rows, const SequenceStep& seq,
                     SequenceOutput* out) {
  const int32_t k = seq.num_draft_tokens;
  const size_t vocab = rows.size() / static_cast<size_t>(k + 1);
  const int32_t first = static_cast<int32_t>(seq.token_ids.size()) - k;  // first proposal
  // Penalties at position j count the proposals before it as generated: the history grows
  // by each accepted proposal, as it would have step by step.
  const SamplingParams& p = seq.sampling;
  const bool penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
                         p.repetition_penalty != 1.0f;
  SequenceStep grown;
  if (penalties && k > 0) grown = seq;
  for (int32_t j = 0; j <= k; ++j) {
    const absl::Span<const float> logits = rows.subspan(j * vocab, vocab);
    if (penalties && j > 0) {
      std::vector<int32_t>& ids = grown.history.output_token_ids;
      std::vector<int32_t>& counts = grown.history.output_counts;
      const int32_t token = seq.token_ids[first + j - 1];
      auto it = std::lower_bound(ids.begin(), ids.end(), token);
      const size_t at = static_cast<size_t>(it - ids.begin());
      if (it != ids.end() && *it == token) {
        ++counts[at];
      } else {
        ids.insert(it, token);
        counts.insert(counts.begin() + static_cast<std::ptrdiff_t>(at), 1);
      }
    }
    Process(logits, penalties && j > 0 ? grown : seq, int64_t{seq.start_pos} + first + j, out);
    if (j == k) break;
    const int32_t proposal = seq.token_ids[first + j];
    SampledToken& t = out->samples.back();
    if (seq.synthetic_accepts >= 0) {
      if (j >= seq.synthetic_accepts) break;
      t.token_id = proposal;
      t.logprob = static_cast<float>(logits[proposal] - LogSumExp(logits));
    } else if (t.token_id != proposal) {
      break;
    }
  }
}

}  // namespace folio::worker
