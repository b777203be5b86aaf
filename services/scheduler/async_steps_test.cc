// Pipelined steps (--async_steps) against synchronous ones, on the real model
// (stories260K), the real cache manager and the real CPU runner, in process: the same
// requests give the same tokens and finish reasons, choice by choice, whatever each needs
// (greedy and seeded sampling, EOS and stop tokens, max_tokens, penalties, min_tokens,
// structured output, n > 1, beam search, log-probs), also when a starved pool preempts;
// steps are really planned ahead, late finishes leak no block, and a cancel mid-stream
// streams nothing after it.
#include <memory>
#include <string>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "common/structured/json_schema.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/scheduler/stories_fixture.h"

namespace folio::scheduler {
namespace {

using stories::Choices;

class AsyncStepsTest : public stories::StoriesSchedulerTest {
 protected:
  void SetUp() override {
    StoriesSchedulerTest::SetUp();
    if (IsSkipped()) return;
    LoadGrammars();
  }

  void MakeWith(bool async, int32_t num_blocks, int32_t max_num_seqs = 64) {
    SchedulerOptions options;
    options.async_steps = async;
    options.grammars = grammars_;
    options.max_num_seqs = max_num_seqs;
    Make(num_blocks, /*tp_size=*/1, options);
  }

  // Requests that between them take every path of the step loop.
  std::vector<RequestSpec> Mixed() {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 6; ++i) {  // greedy and seeded, some stopping on EOS early
      RequestSpec s = Spec(Prompt(3 + 5 * i), 20 + 7 * i, i % 2 == 0 ? 0.0f : 0.9f);
      s.sampling.seed = 100 + i;
      s.num_logprobs = i % 3;
      specs.push_back(s);
    }
    {  // stop tokens: the first few tokens greedy picks on a longer prompt
      RequestSpec s = Spec(Prompt(20), 60, 0.7f);
      s.stop_token_ids = {419, 426};
      specs.push_back(s);
    }
    {  // penalties and min_tokens: the history the workers get includes the pending token
      RequestSpec s = Spec(Prompt(9), 48, 0.8f);
      s.sampling.frequency_penalty = 0.8f;
      s.sampling.presence_penalty = 0.5f;
      s.sampling.repetition_penalty = 1.3f;
      s.min_tokens = 10;
      specs.push_back(s);
    }
    {  // n > 1: the fan-out is synchronous, then each choice pipelines
      RequestSpec s = Spec(Prompt(12), 30, 1.0f);
      s.n = 3;
      specs.push_back(s);
    }
    {  // beam search is never pipelined
      RequestSpec s = Spec(Prompt(7), 12, 0.0f);
      s.n = 2;
      s.beam_width = 2;
      specs.push_back(s);
    }
    {  // structured output: the mask needs the sampled token first
      RequestSpec s = Spec(Prompt(5), 80, 0.9f);
      s.grammar = *structured::JsonSchemaToGrammar(
          R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})",
          {});
      specs.push_back(s);
    }
    {  // max_tokens of 1 and 2: the length ends them, nothing is planned past it
      specs.push_back(Spec(Prompt(4), 1, 0.5f));
      specs.push_back(Spec(Prompt(6), 2, 0.5f));
    }
    return specs;
  }
};

TEST_F(AsyncStepsTest, SameStreamsAsSynchronousSteps) {
  const std::vector<RequestSpec> specs = Mixed();
  MakeWith(/*async=*/false, 256);
  const std::vector<Choices> sync = RunAll(specs);
  EXPECT_EQ(scheduler_->Stats().num_steps_planned_ahead, 0);
  ExpectPoolFull(256);

  MakeWith(/*async=*/true, 256);
  const std::vector<Choices> async = RunAll(specs);
  ExpectSame(sync, async);
  const SchedulerStats stats = scheduler_->Stats();
  EXPECT_GT(stats.num_steps_planned_ahead, stats.num_steps / 2) << stats.num_steps << " steps";
  ExpectPoolFull(256);
}

// Plain requests that stop on a sampled token: the pipelined step after the stop computed
// one more token for them, which is dropped, never streamed, and its blocks freed.
TEST_F(AsyncStepsTest, StopsOnASampledTokenDropTheExtraToken) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) {
    RequestSpec s = Spec(Prompt(4 + 3 * i), 80, 0.9f);
    s.sampling.seed = 7 + i;
    s.stop_token_ids = {419, 426};
    specs.push_back(s);
  }
  MakeWith(/*async=*/false, 128);
  const std::vector<Choices> sync = RunAll(specs);
  MakeWith(/*async=*/true, 128);
  const std::vector<Choices> async = RunAll(specs);
  ExpectSame(sync, async);
  for (const Choices& c : async) {
    ASSERT_EQ(c.finish.at(0), FinishReason::kStop);
    const int32_t last = c.tokens.at(0).back();
    EXPECT_TRUE(last == 419 || last == 426) << last;
  }
  EXPECT_EQ(scheduler_->Stats().num_samples_dropped, 4);
  ExpectPoolFull(128);
}

TEST_F(AsyncStepsTest, SameStreamsWhenAStarvedPoolPreempts) {
  const std::vector<RequestSpec> specs = Mixed();
  // Recomputing a preempted request's KV by prefill rather than decode may move a near
  // tie at temperature 1, so the reference is synchronous on the same starved pool.
  MakeWith(/*async=*/false, 24);
  const std::vector<Choices> reference = RunAll(specs);

  MakeWith(/*async=*/true, 24);
  const std::vector<Choices> starved = RunAll(specs);
  EXPECT_GT(scheduler_->Stats().num_preemptions, 0);
  EXPECT_GT(scheduler_->Stats().num_steps_planned_ahead, 0);
  ExpectSame(reference, starved);
  ExpectPoolFull(24);
}

TEST_F(AsyncStepsTest, CancelMidStreamStreamsNothingAfterIt) {
  MakeWith(/*async=*/true, 64);
  RequestSpec spec = Spec(Prompt(8), 200, 0.8f);
  spec.ignore_eos = true;
  Choices c;
  absl::StatusOr<uint64_t> handle = scheduler_->Submit(spec, c.Sink());
  ASSERT_TRUE(handle.ok());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(scheduler_->RunOnce());
  ASSERT_FALSE(c.tokens[0].empty());
  ASSERT_GT(scheduler_->Stats().num_steps_planned_ahead, 0);
  scheduler_->Cancel(*handle);
  const size_t streamed = c.tokens[0].size();
  RunUntilIdle();
  EXPECT_TRUE(c.done);
  EXPECT_EQ(c.tokens[0].size(), streamed);
  EXPECT_LT(static_cast<int32_t>(streamed), 200);
  ExpectPoolFull(64);
}

}  // namespace
}  // namespace folio::scheduler
