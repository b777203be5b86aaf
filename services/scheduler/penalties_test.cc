// Penalties, logit_bias and min_tokens end to end through the scheduler, the real cache
// manager and the real CPU model (stories260K), in process: what the tokens do, that the
// history reaches the worker whole (prefix-cache hits, forks), and that preemption,
// recompute and tensor parallelism leave the streams unchanged.
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scheduler/stories_fixture.h"
#include "services/scheduler/token_history.h"

namespace folio::scheduler {
namespace {

using ::testing::HasSubstr;
using stories::Choices;
using stories::RecordingWorker;

int32_t MaxRepeat(const std::vector<int32_t>& tokens) {
  std::map<int32_t, int32_t> counts;
  int32_t most = 0;
  for (int32_t t : tokens) most = std::max(most, ++counts[t]);
  return most;
}

class PenaltiesTest : public stories::StoriesSchedulerTest {};

TEST_F(PenaltiesTest, FrequencyPenaltyChangesARepetitiveContinuation) {
  Make(64);
  // The tiny model repeats itself: greedy from BOS (the golden text), and sampled with a
  // fixed seed.
  for (float temperature : {0.0f, 0.8f}) {
    RequestSpec spec = Spec({weights_->vocab.bos_id}, 150, temperature);
    spec.ignore_eos = true;
    const std::vector<int32_t> plain = Run(spec).tokens[0];
    ASSERT_EQ(plain.size(), 150u);
    const size_t plain_distinct = std::set<int32_t>(plain.begin(), plain.end()).size();
    ASSERT_LT(plain_distinct, 110u) << "not a repetitive continuation";
    spec.sampling.frequency_penalty = 1.0f;
    const std::vector<int32_t> penalised = Run(spec).tokens[0];
    ASSERT_EQ(penalised.size(), 150u);
    EXPECT_NE(penalised, plain) << "temperature " << temperature;
    EXPECT_GT(std::set<int32_t>(penalised.begin(), penalised.end()).size(), plain_distinct)
        << "temperature " << temperature << ": the penalty should spread the tokens";
    EXPECT_LE(MaxRepeat(penalised), MaxRepeat(plain)) << "temperature " << temperature;
    // The same request again gives the same tokens (the seed and the history decide).
    EXPECT_EQ(Run(spec).tokens[0], penalised);
  }
}

TEST_F(PenaltiesTest, LogitBiasOfMinus100RemovesATokenFromEveryChoice) {
  Make(128);
  RequestSpec spec = Spec(Prompt(12), 60, 1.0f);
  spec.n = 4;
  spec.ignore_eos = true;
  Choices plain = Run(spec);
  // The token most choices use.
  std::map<int32_t, int32_t> in_choices;
  for (const auto& [i, tokens] : plain.tokens) {
    for (int32_t t : std::set<int32_t>(tokens.begin(), tokens.end())) ++in_choices[t];
  }
  const int32_t banned = std::max_element(in_choices.begin(), in_choices.end(),
                                          [](auto a, auto b) { return a.second < b.second; })
                             ->first;
  ASSERT_GE(in_choices[banned], 3);
  spec.sampling.logit_bias = {{banned, -100.0f}};
  Choices biased = Run(spec);
  ASSERT_EQ(biased.tokens.size(), 4u);
  for (const auto& [i, tokens] : biased.tokens) {
    EXPECT_EQ(tokens.size(), 60u);
    EXPECT_EQ(std::count(tokens.begin(), tokens.end(), banned), 0) << "choice " << i;
  }
  // +100 makes it the only token, in every choice.
  spec.sampling.logit_bias = {{banned, 100.0f}};
  for (const auto& [i, tokens] : Run(spec).tokens) {
    EXPECT_EQ(std::count(tokens.begin(), tokens.end(), banned), 60) << "choice " << i;
  }
}

TEST_F(PenaltiesTest, MinTokensKeepsEosAndStopTokensOut) {
  Make(64);
  const int32_t eos = weights_->vocab.eos_id;
  // The tiny model rarely ends a story with EOS (its stories end with BOS), so a bias
  // makes EOS the likely next token everywhere: the choice ends at once...
  RequestSpec eager = Spec(Prompt(10), 100, 1.0f);
  eager.n = 3;
  eager.sampling.logit_bias = {{eos, 100.0f}};
  for (const auto& [i, tokens] : Run(eager).tokens) {
    ASSERT_LE(tokens.size(), 1u) << "choice " << i << ": the bias should end it at once";
  }
  // ... until min_tokens holds it back; then it ends right after, in every choice.
  eager.min_tokens = 25;
  Choices held = Run(eager);
  ASSERT_EQ(held.tokens.size(), 3u);
  for (const auto& [i, tokens] : held.tokens) {
    ASSERT_GE(tokens.size(), 25u) << "choice " << i;
    EXPECT_LE(tokens.size(), 26u) << "choice " << i << ": EOS comes as soon as it may";
    EXPECT_EQ(std::count(tokens.begin(), tokens.begin() + 25, eos), 0) << "choice " << i;
    EXPECT_EQ(held.finish[i], FinishReason::kStop) << "choice " << i;
  }

  // A frequent token as a stop token id: not before min_tokens.
  RequestSpec spec = Spec(Prompt(10), 80, 1.0f);
  spec.ignore_eos = true;
  const std::vector<int32_t> plain = Run(spec).tokens[0];
  spec.stop_token_ids = {plain[3]};
  ASSERT_LT(Run(spec).tokens[0].size(), 5u);
  spec.min_tokens = 40;
  const std::vector<int32_t> later = Run(spec).tokens[0];
  ASSERT_GE(later.size(), 40u);
  EXPECT_EQ(std::count(later.begin(), later.begin() + 39, plain[3]), 0);
}

// Every parameter at once, n = 3, in a pool so small that the group is preempted and
// recomputed: the same streams as in a roomy pool, and as over two tensor-parallel ranks.
TEST_F(PenaltiesTest, PreemptionRecomputeForksAndTpKeepTheStreams) {
  RequestSpec spec = Spec(Prompt(40), 80, 0.9f);
  spec.n = 3;
  spec.sampling.presence_penalty = 0.5f;
  spec.sampling.frequency_penalty = 0.4f;
  spec.sampling.repetition_penalty = 1.3f;
  spec.sampling.logit_bias = {{13, -5.0f}, {300, 2.0f}};
  spec.min_tokens = 30;
  Make(256);
  const Choices calm = Run(spec);
  ASSERT_EQ(calm.tokens.size(), 3u);
  EXPECT_NE(calm.tokens.at(0), calm.tokens.at(1));

  Make(22);
  RequestSpec other = Spec(Prompt(20), 150, 1.0f);
  other.ignore_eos = true;
  Choices first, group;
  ASSERT_TRUE(scheduler_->Submit(other, first.Sink()).ok());
  ASSERT_TRUE(scheduler_->Submit(spec, group.Sink()).ok());
  RunUntilIdle();
  EXPECT_GT(scheduler_->Stats().num_preemptions, 0);
  ASSERT_TRUE(group.done);
  EXPECT_EQ(group.tokens, calm.tokens) << "a recomputed choice changed";

  // Over two tensor-parallel ranks (greedy: the ranks' partial sums may round the logits
  // differently in the last bit, which a random draw could amplify into another token).
  spec.sampling.temperature = 0.0f;
  Make(256);
  const Choices single = Run(spec);
  Make(256, /*tp_size=*/2);
  EXPECT_EQ(Run(spec).tokens, single.tokens) << "rank 0 samples with the same history";
}

// A prompt served from the prefix cache: the worker computes only its tail, yet the
// history carries the whole prompt, so the tokens equal a run without the cache.
TEST_F(PenaltiesTest, PromptTokensReachedThroughThePrefixCacheArePenalised) {
  RequestSpec spec = Spec(Prompt(50), 40, 0.0f);
  spec.sampling.repetition_penalty = 1.8f;
  spec.ignore_eos = true;
  Make(64);
  const Choices cold = Run(spec);
  worker_->sampled.clear();
  const Choices warm = Run(spec);
  EXPECT_GE(warm.cached_prompt_tokens, 48);
  EXPECT_EQ(warm.tokens, cold.tokens);
  ASSERT_FALSE(worker_->sampled.empty());
  const worker::SequenceStep& firststep = worker_->sampled.front();
  EXPECT_LE(firststep.token_ids.size(), 2u) << "the cache should have served the prompt";
  std::set<int32_t> prompt_set(spec.prompt.begin(), spec.prompt.end());
  EXPECT_EQ(firststep.history.prompt_token_ids,
            std::vector<int32_t>(prompt_set.begin(), prompt_set.end()));
  // And the penalty acts: without it the greedy text differs.
  spec.sampling.repetition_penalty = 1.0f;
  EXPECT_NE(Run(spec).tokens, cold.tokens);
}

TEST_F(PenaltiesTest, BadValuesAreRejectedAtSubmit) {
  Make(64);
  auto submit = [&](RequestSpec spec) {
    return scheduler_->Submit(std::move(spec), [](const RequestEvent&) {}).status();
  };
  RequestSpec spec = Spec(Prompt(5), 10);
  spec.sampling.presence_penalty = 3.0f;
  EXPECT_THAT(submit(spec).message(), HasSubstr("presence_penalty is 3"));
  spec = Spec(Prompt(5), 10);
  spec.sampling.logit_bias = {{weights_->config.vocab_size, 1.0f}};
  EXPECT_THAT(submit(spec).message(), HasSubstr("logit_bias key 512 is not a token id"));
  spec = Spec(Prompt(5), 10);
  spec.min_tokens = 11;
  EXPECT_THAT(submit(spec).message(), HasSubstr("min_tokens is 11"));
  spec = Spec(Prompt(5), 10);
  spec.beam_width = 2;
  spec.sampling.frequency_penalty = 0.5f;
  const absl::Status beam = submit(spec);
  EXPECT_EQ(beam.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beam.message(), HasSubstr("frequency_penalty is not supported with beam search"));
}

TEST(TokenHistoryTest, CountsOutputAndSuppressesUntilMinTokens) {
  RequestSpec spec;
  spec.prompt = {5, 3, 5, 9};
  spec.sampling.repetition_penalty = 1.2f;
  spec.stop_token_ids = {7, 2};
  spec.min_tokens = 3;
  const std::vector<int32_t> prompt_set = PromptTokenSet(spec);
  EXPECT_EQ(prompt_set, (std::vector<int32_t>{3, 5, 9}));
  worker::TokenHistory h = MakeTokenHistory(spec, prompt_set, {4, 1, 4}, /*eos_id=*/2);
  EXPECT_EQ(h.prompt_token_ids, prompt_set);
  EXPECT_EQ(h.output_token_ids, (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(h.output_counts, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(h.suppressed_token_ids.empty()) << "3 tokens reach min_tokens";
  h = MakeTokenHistory(spec, prompt_set, {4, 1}, 2);
  EXPECT_EQ(h.suppressed_token_ids, (std::vector<int32_t>{2, 7}));
  spec.ignore_eos = true;
  spec.stop_token_ids = {7};
  h = MakeTokenHistory(spec, prompt_set, {}, 2);
  EXPECT_EQ(h.suppressed_token_ids, (std::vector<int32_t>{7}));
  spec.sampling.repetition_penalty = 1.0f;
  EXPECT_TRUE(PromptTokenSet(spec).empty());
  EXPECT_TRUE(UsesTokenHistory(spec));  // min_tokens
  spec.min_tokens = 0;
  spec.sampling.logit_bias = {{1, 2.0f}};
  EXPECT_FALSE(UsesTokenHistory(spec)) << "logit_bias rides in the sampling params";
}

}  // namespace
}  // namespace folio::scheduler
