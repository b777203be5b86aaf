#include "services/worker/engine/logits_processor.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/engine/sampler.h"

namespace folio::worker {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The published definitions, written over the raw token sequences (repeats and all),
// token by token over the whole vocabulary, without the transform's sparse lists:
//  - min_tokens (vLLM): suppressed tokens get -inf;
//  - logit_bias (OpenAI): added to the logit;
//  - repetition_penalty (Keskar et al. 2019 as Hugging Face's
//    RepetitionPenaltyLogitsProcessor and vLLM apply it): for every token present in
//    prompt or output, a positive logit is divided by r, a negative one multiplied;
//  - frequency / presence penalty (OpenAI's API reference):
//    mu[j] -= c[j] * alpha_frequency + (c[j] > 0) * alpha_presence, c[j] counting the
//    generated tokens only.
std::vector<float> Reference(const std::vector<float>& logits, const SamplingParams& p,
                             const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& output,
                             const std::vector<int32_t>& suppressed) {
  std::vector<float> l = logits;
  const int32_t vocab = static_cast<int32_t>(l.size());
  for (int32_t t : suppressed) l[t] = -kInf;
  for (const LogitBias& b : p.logit_bias) l[b.token_id] += b.bias;
  for (int32_t t = 0; t < vocab; ++t) {
    bool seen = false;
    for (int32_t x : prompt) seen |= x == t;
    for (int32_t x : output) seen |= x == t;
    if (seen && p.repetition_penalty != 1.0f) {
      l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    }
  }
  for (int32_t t = 0; t < vocab; ++t) {
    int32_t c = 0;
    for (int32_t x : output) c += x == t;
    if (c > 0) l[t] -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
  }
  return l;
}

// What the scheduler ships, built here independently from the raw sequences.
TokenHistory HistoryOf(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                       const std::vector<int32_t>& suppressed, bool with_prompt) {
  TokenHistory h;
  if (with_prompt) {
    std::set<int32_t> ps(prompt.begin(), prompt.end());
    h.prompt_token_ids.assign(ps.begin(), ps.end());
  }
  std::map<int32_t, int32_t> counts;
  for (int32_t t : output) ++counts[t];
  for (auto [t, c] : counts) {
    h.output_token_ids.push_back(t);
    h.output_counts.push_back(c);
  }
  std::set<int32_t> ss(suppressed.begin(), suppressed.end());
  h.suppressed_token_ids.assign(ss.begin(), ss.end());
  return h;
}

void ExpectRowsEqual(const std::vector<float>& want, const std::vector<float>& got,
                     const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t t = 0; t < want.size(); ++t) {
    if (std::isinf(want[t])) {
      EXPECT_EQ(want[t], got[t]) << what << " token " << t;
    } else {
      EXPECT_FLOAT_EQ(want[t], got[t]) << what << " token " << t;
    }
  }
}

// Every parameter alone and every combination of them (2^5), with positive and negative
// values, over random logits (both signs, so both branches of the repetition penalty run)
// and random prompts and outputs with repeats.
TEST(LogitsProcessorTest, MatchesThePublishedFormulasForEveryCombination) {
  constexpr int32_t kVocab = 48;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> logit(-6.0f, 6.0f);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  int checked = 0;
  for (int mask = 0; mask < 32; ++mask) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> logits(kVocab);
      for (float& x : logits) x = logit(rng);
      std::vector<int32_t> prompt(1 + variant * 7), output(variant * 5), suppressed;
      for (int32_t& t : prompt) t = token(rng);
      for (int32_t& t : output) t = token(rng) % 12;  // repeats
      SamplingParams p;
      const bool neg = variant % 2 == 1;
      if (mask & 1) p.presence_penalty = neg ? -0.7f : 1.3f;
      if (mask & 2) p.frequency_penalty = neg ? -1.1f : 0.45f;
      if (mask & 4) p.repetition_penalty = neg ? 0.6f : 1.8f;
      if (mask & 8) {
        p.logit_bias = {{token(rng), neg ? -100.0f : 100.0f}, {3, 2.5f}};
        if (p.logit_bias[0].token_id == 3) p.logit_bias[0].token_id = 4;
      }
      if (mask & 16) suppressed = {2, token(rng), output.empty() ? 5 : output[0]};
      ASSERT_TRUE(ValidateLogitsParams(p, kVocab).ok());
      const TokenHistory h = HistoryOf(prompt, output, suppressed, p.repetition_penalty != 1.0f);
      ASSERT_TRUE(ValidateTokenHistory(h, kVocab).ok());
      std::vector<float> got = logits;
      ApplyLogitsTransform(p, h, absl::MakeSpan(got));
      const std::vector<float> want = Reference(logits, p, prompt, output, suppressed);
      ExpectRowsEqual(want, got, "mask " + std::to_string(mask) + " variant " +
                                     std::to_string(variant));
      const bool needed = (mask & 28) != 0 || ((mask & 3) != 0 && !output.empty());
      EXPECT_EQ(NeedsLogitsTransform(p, h), needed) << "mask " << mask << " variant " << variant;
      if (!needed) {
        EXPECT_EQ(want, logits) << "skipping the transform would be wrong";
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 128);
}

TEST(LogitsProcessorTest, WorkedExample) {
  // logits:        t0=2, t1=-1, t2=0.5, t3=3
  // prompt {0, 1}, output {1, 2, 2}; r=2, f=0.5, p=0.25, bias t3 -= 1, suppress none.
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{3, -1.0f}};
  TokenHistory h;
  h.prompt_token_ids = {0, 1};
  h.output_token_ids = {1, 2};
  h.output_counts = {1, 2};
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f};
  ApplyLogitsTransform(p, h, absl::MakeSpan(l));
  EXPECT_FLOAT_EQ(l[0], 1.0f);                 // 2 / 2 (prompt only: no count)
  EXPECT_FLOAT_EQ(l[1], -2.0f - 0.5f - 0.25f);  // -1 * 2, then 1 * f + p
  EXPECT_FLOAT_EQ(l[2], 0.25f - 1.0f - 0.25f);  // 0.5 / 2, then 2 * f + p
  EXPECT_FLOAT_EQ(l[3], 2.0f);                 // 3 - 1, in neither list
}

TEST(LogitsProcessorTest, RejectsBadParametersNamingTheField) {
  auto message = [](const SamplingParams& p) {
    return std::string(ValidateLogitsParams(p, 100).message());
  };
  SamplingParams p;
  EXPECT_TRUE(ValidateLogitsParams(p, 100).ok());
  p.presence_penalty = 2.5f;
  EXPECT_EQ(message(p).rfind("presence_penalty is 2.5", 0), 0u) << message(p);
  p = {};
  p.frequency_penalty = -2.01f;
  EXPECT_EQ(message(p).rfind("frequency_penalty", 0), 0u);
  p = {};
  p.frequency_penalty = std::nanf("");
  EXPECT_FALSE(ValidateLogitsParams(p, 100).ok());
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_EQ(message(p).rfind("repetition_penalty", 0), 0u);
  p.repetition_penalty = kInf;
  EXPECT_FALSE(ValidateLogitsParams(p, 100).ok());
  p = {};
  p.logit_bias = {{100, 1.0f}};
  EXPECT_EQ(message(p).rfind("logit_bias key 100 is not a token id", 0), 0u) << message(p);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(ValidateLogitsParams(p, 100).ok());
  p.logit_bias = {{5, 100.5f}};
  EXPECT_EQ(message(p).rfind("logit_bias value for token 5", 0), 0u) << message(p);
  p.logit_bias = {{5, 1.0f}, {5, 2.0f}};
  EXPECT_FALSE(ValidateLogitsParams(p, 100).ok());
  p.logit_bias.clear();
  for (int32_t t = 0; t < 301; ++t) p.logit_bias.push_back({t, 1.0f});
  EXPECT_EQ(message(p).rfind("logit_bias has 301 entries", 0), 0u) << message(p);
  EXPECT_FALSE(ValidateLogitsParams(p, 1000).ok());
  p.logit_bias.pop_back();
  EXPECT_TRUE(ValidateLogitsParams(p, 1000).ok());
}

TEST(LogitsProcessorTest, RejectsABadHistory) {
  TokenHistory h;
  EXPECT_TRUE(ValidateTokenHistory(h, 10).ok());
  h.output_token_ids = {1, 4};
  h.output_counts = {1};
  EXPECT_FALSE(ValidateTokenHistory(h, 10).ok());
  h.output_counts = {1, 0};
  EXPECT_FALSE(ValidateTokenHistory(h, 10).ok());
  h.output_counts = {1, 2};
  EXPECT_TRUE(ValidateTokenHistory(h, 10).ok());
  h.output_token_ids = {4, 1};
  EXPECT_FALSE(ValidateTokenHistory(h, 10).ok());
  h = {};
  h.prompt_token_ids = {3, 10};
  EXPECT_FALSE(ValidateTokenHistory(h, 10).ok());
  h = {};
  h.suppressed_token_ids = {-1};
  EXPECT_FALSE(ValidateTokenHistory(h, 10).ok());
}

// The sampler draws from the transformed row but reports log-probs of the raw one; a
// suppressed token is never drawn, at any temperature.
TEST(LogitsProcessorTest, SamplerDrawsTransformedAndReportsRaw) {
  const std::vector<float> logits = {0.0f, 3.0f, 2.9f, 1.0f, -1.0f, 0.5f};
  const double lse = Sampler::LogSumExp(logits);
  Sampler sampler;
  SequenceStep seq;
  seq.num_logprobs = 2;
  seq.sampling.temperature = 0.0f;
  seq.history.suppressed_token_ids = {1};  // the argmax
  SequenceOutput out;
  sampler.Process(logits, seq, 10, &out);
  ASSERT_EQ(out.samples.size(), 1u);
  EXPECT_EQ(out.samples[0].token_id, 2);
  EXPECT_FLOAT_EQ(out.samples[0].logprob, static_cast<float>(2.9 - lse));
  ASSERT_EQ(out.samples[0].top_logprobs.size(), 2u);
  EXPECT_EQ(out.samples[0].top_logprobs[0].token_id, 1);  // raw: still the most likely
  EXPECT_FLOAT_EQ(out.samples[0].top_logprobs[0].logprob, static_cast<float>(3.0 - lse));

  seq.sampling.temperature = 2.0f;
  seq.sampling.seed = 99;
  seq.history.suppressed_token_ids = {1, 2};
  seq.sampling.logit_bias = {{3, -100.0f}};
  std::set<int32_t> drawn;
  for (int pos = 0; pos < 3000; ++pos) {
    SequenceOutput o;
    sampler.Process(logits, seq, pos, &o);
    drawn.insert(o.samples[0].token_id);
  }
  EXPECT_EQ(drawn, (std::set<int32_t>{0, 4, 5}));
}

// The transform reads the prompt from the history, not from the step's tokens: a step
// that computes only the last prompt token (the rest came from the prefix cache) is
// penalised over the whole prompt.
TEST(LogitsProcessorTest, PromptTokensComeFromTheHistoryNotTheStep) {
  const std::vector<float> logits = {4.0f, 3.9f, 1.0f, 0.0f};
  Sampler sampler;
  SequenceStep seq;
  seq.token_ids = {2};  // the last prompt token; 0 and 1 were cached
  seq.start_pos = 2;
  seq.sampling.temperature = 0.0f;
  seq.sampling.repetition_penalty = 1.5f;
  SequenceOutput plain;
  sampler.Process(logits, seq, 3, &plain);
  EXPECT_EQ(plain.samples[0].token_id, 0);  // r applies to nothing without the history
  seq.history.prompt_token_ids = {0, 2};
  SequenceOutput penalised;
  sampler.Process(logits, seq, 3, &penalised);
  EXPECT_EQ(penalised.samples[0].token_id, 1);  // 4 / 1.5 < 3.9
}

}  // namespace
}  // namespace folio::worker
