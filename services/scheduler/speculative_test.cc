// Speculative decoding (speculation.h) against plain decoding, on the real model
// (stories260K), the real cache manager and the real CPU runner, in process: the same
// requests give the same tokens and finish reasons with n-gram speculation as without
// (greedy and seeded sampling, EOS and stop tokens, max_tokens, log-probs, n > 1,
// penalties and min_tokens, and the requests speculation leaves alone: grammars, beams),
// across
// block boundaries, with prefix-cache hits, when a starved pool preempts, and at TP = 2;
// proposals are really accepted, rejected ones leak no block, and synthetic acceptance
// gives the asked mean length. The same with the workers' draft model proposing.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/structured/json_schema.h"
#include "gtest/gtest.h"
#include "services/scheduler/stories_fixture.h"
#include "services/worker/model/random_model.h"

namespace folio::scheduler {
namespace {

using stories::Choices;

class SpeculativeTest : public stories::StoriesSchedulerTest {
 protected:
  void SetUp() override {
    StoriesSchedulerTest::SetUp();
    if (IsSkipped()) return;
    LoadGrammars();
  }

  void MakeWith(SpeculativeMode mode, int32_t num_blocks, int32_t tp_size = 1,
                double synth_len = 0.0, bool async = true, int32_t max_batched_tokens = 512,
                int32_t host_blocks = 0) {
    SchedulerOptions options;
    options.max_num_batched_tokens = max_batched_tokens;
    options.async_steps = async;
    options.grammars = grammars_;
    options.speculative.mode = mode;
    options.speculative.num_tokens = 5;
    options.speculative.ngram_min = 1;
    options.speculative.synth_len = synth_len;
    options.speculative.max_batch = 64;
    Make(num_blocks, tp_size, options, host_blocks);
  }

  std::vector<RequestSpec> Mixed() {
    std::vector<RequestSpec> specs;
    for (int i = 0; i < 6; ++i) {  // greedy and seeded, long enough to cross blocks
      RequestSpec s = Spec(Prompt(3 + 5 * i), 40 + 9 * i, i % 2 == 0 ? 0.0f : 0.9f);
      s.sampling.seed = 100 + i;
      s.num_logprobs = i % 3;
      specs.push_back(s);
    }
    {  // the same prompt again: its prefix comes from the cache
      RequestSpec s = Spec(Prompt(23), 50, 0.0f);
      specs.push_back(s);
      specs.push_back(s);
    }
    {  // stop tokens
      RequestSpec s = Spec(Prompt(20), 60, 0.7f);
      s.stop_token_ids = {419, 426};
      specs.push_back(s);
    }
    {  // penalties (speculated, the history growing position by position) and min_tokens
       // (speculated once reached)
      RequestSpec s = Spec(Prompt(9), 48, 0.8f);
      s.sampling.frequency_penalty = 0.8f;
      s.sampling.repetition_penalty = 1.2f;
      s.min_tokens = 10;
      specs.push_back(s);
      RequestSpec g = Spec(Prompt(15), 60, 0.0f);
      g.sampling.presence_penalty = 0.3f;
      g.sampling.frequency_penalty = 0.2f;
      specs.push_back(g);
    }
    {  // n > 1: each choice speculates on its own after the fan-out
      RequestSpec s = Spec(Prompt(12), 30, 1.0f);
      s.n = 3;
      specs.push_back(s);
    }
    {  // beam search
      RequestSpec s = Spec(Prompt(7), 12, 0.0f);
      s.n = 2;
      s.beam_width = 2;
      specs.push_back(s);
    }
    {  // structured output
      RequestSpec s = Spec(Prompt(5), 80, 0.9f);
      s.grammar = *structured::JsonSchemaToGrammar(
          R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})",
          {});
      specs.push_back(s);
    }
    {  // max_tokens 1 and 2; a request that opts out
      specs.push_back(Spec(Prompt(4), 1, 0.5f));
      specs.push_back(Spec(Prompt(6), 2, 0.0f));
      RequestSpec s = Spec(Prompt(8), 30, 0.0f);
      s.num_speculative_tokens = 0;
      specs.push_back(s);
    }
    return specs;
  }
};

TEST_F(SpeculativeTest, SameStreamsAsPlainDecoding) {
  const std::vector<RequestSpec> specs = Mixed();
  for (bool one_by_one : {true, false}) {
    SCOPED_TRACE(one_by_one ? "one request at a time" : "all at once");
    MakeWith(SpeculativeMode::kOff, 256);
    const std::vector<Choices> plain = RunAll(specs, one_by_one);
    EXPECT_EQ(scheduler_->Stats().num_spec_verifications, 0);
    ExpectPoolFull(256);

    MakeWith(SpeculativeMode::kNgram, 256);
    const std::vector<Choices> spec = RunAll(specs, one_by_one);
    ExpectSame(plain, spec);
    const SchedulerStats stats = scheduler_->Stats();
    EXPECT_GT(stats.num_spec_verifications, 20);
    EXPECT_GT(stats.num_spec_accepted, 10) << stats.num_spec_proposed << " proposed";
    EXPECT_LT(stats.num_spec_accepted, stats.num_spec_proposed);  // some were rejected
    if (one_by_one) {
      EXPECT_GT(stats.prefix_cache_hit_tokens, 0);
    }
    ExpectPoolFull(256);
  }
}

// Penalties are verified with the proposals before each position counted as generated:
// the steps really carry proposals with a history, and give plain decoding's tokens.
TEST_F(SpeculativeTest, PenaltiesSeeTheProposalsBeforeEachPosition) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) {
    RequestSpec s = Spec(Prompt(6 + 4 * i), 80, i == 0 ? 0.0f : 0.8f);
    s.sampling.frequency_penalty = 0.05f + 0.1f * i;
    s.sampling.presence_penalty = 0.05f;
    s.sampling.repetition_penalty = 1.02f;
    specs.push_back(s);
  }
  MakeWith(SpeculativeMode::kOff, 128);
  const std::vector<Choices> plain = RunAll(specs, /*one_by_one=*/true);
  MakeWith(SpeculativeMode::kNgram, 128);
  const std::vector<Choices> spec = RunAll(specs, /*one_by_one=*/true);
  ExpectSame(plain, spec);
  int with_history = 0;
  for (const worker::SequenceStep& s : worker_->sampled) {
    if (s.num_draft_tokens > 0 && !s.history.output_token_ids.empty()) ++with_history;
  }
  EXPECT_GT(with_history, 10);
  EXPECT_GT(scheduler_->Stats().num_spec_accepted, 0);
  ExpectPoolFull(128);
}

// A group recomputed from its prompt (a continuation, as after a lost scheduler, or a
// preemption): its root stops at the prompt's end until the other choices fork from it,
// and must not speculate past it, even when one prompt token is all that is left (17
// tokens in chunks of 8). The choices continue with plain decoding's tokens.
TEST_F(SpeculativeTest, ARecomputedGroupStillForksAtTheEndOfItsPrompt) {
  RequestSpec spec = Spec(Prompt(17), 30, 0.9f);
  spec.n = 3;
  spec.sampling.seed = 5;
  MakeWith(SpeculativeMode::kOff, 128, 1, 0.0, true, /*max_batched_tokens=*/8);
  const Choices plain = RunAll({spec}).at(0);
  RequestSpec cont = spec;
  for (int32_t k = 0; k < 3; ++k) {
    const std::vector<int32_t>& all = plain.tokens.at(k);
    ASSERT_GT(all.size(), 5u);
    cont.continuation.push_back({.index = k, .tokens = {all.begin(), all.begin() + 5}});
  }
  for (const double synth : {0.0, 3.0}) {  // synthetic: proposals every step, for sure
    SCOPED_TRACE(synth > 0 ? "synthetic acceptance" : "n-gram");
    MakeWith(SpeculativeMode::kNgram, 128, 1, synth, true, /*max_batched_tokens=*/8);
    const Choices got = RunAll({cont}).at(0);
    ASSERT_TRUE(got.done);
    for (int32_t k = 0; k < 3; ++k) {
      ASSERT_TRUE(got.finish.count(k)) << "choice " << k << " never finished";
      if (synth > 0) continue;  // the text is not the model's then
      std::vector<int32_t> whole(plain.tokens.at(k).begin(), plain.tokens.at(k).begin() + 5);
      whole.insert(whole.end(), got.tokens.at(k).begin(), got.tokens.at(k).end());
      EXPECT_EQ(whole, plain.tokens.at(k)) << "choice " << k;
    }
    ExpectPoolFull(128);
  }
}

TEST_F(SpeculativeTest, SameStreamsWhenAStarvedPoolPreempts) {
  const std::vector<RequestSpec> specs = Mixed();
  MakeWith(SpeculativeMode::kOff, 24);
  const std::vector<Choices> reference = RunAll(specs);
  MakeWith(SpeculativeMode::kNgram, 24);
  const std::vector<Choices> starved = RunAll(specs);
  EXPECT_GT(scheduler_->Stats().num_preemptions, 0);
  EXPECT_GT(scheduler_->Stats().num_spec_accepted, 0);
  ExpectSame(reference, starved);
  ExpectPoolFull(24);
}

TEST_F(SpeculativeTest, SameStreamsAtTensorParallelTwo) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) specs.push_back(Spec(Prompt(5 + 7 * i), 60, i == 1 ? 0.8f : 0.0f));
  MakeWith(SpeculativeMode::kOff, 128, /*tp_size=*/2);
  const std::vector<Choices> plain = RunAll(specs);
  MakeWith(SpeculativeMode::kNgram, 128, /*tp_size=*/2);
  const std::vector<Choices> spec = RunAll(specs);
  ExpectSame(plain, spec);
  EXPECT_GT(scheduler_->Stats().num_spec_accepted, 0);
  ExpectPoolFull(128);
}

// Benchmarks' synthetic acceptance: proposals accepted at the asked mean length whatever
// they are (the text is not the model's), rollback and pool as ever.
TEST_F(SpeculativeTest, SyntheticAcceptanceGivesTheAskedMeanLength) {
  MakeWith(SpeculativeMode::kNgram, 256, 1, /*synth_len=*/3.0);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) {
    RequestSpec s = Spec(Prompt(6 + i), 250, 0.0f);
    s.ignore_eos = true;
    specs.push_back(s);
  }
  const std::vector<Choices> out = RunAll(specs);
  for (const Choices& c : out) EXPECT_EQ(c.tokens.at(0).size(), 250u);
  const SchedulerStats stats = scheduler_->Stats();
  ASSERT_GT(stats.num_spec_verifications, 100);
  const double mean = 1.0 + static_cast<double>(stats.num_spec_accepted) /
                                static_cast<double>(stats.num_spec_verifications);
  // k is 5 but the length limit shortens the last proposals of each request a little.
  EXPECT_NEAR(mean, 3.0, 0.3);
  ExpectPoolFull(256);
}

// The workers' draft model proposes (--speculative=draft, worker::DraftingRunner):
// stories260K drafting for itself, whose greedy picks are the model's, and a random model
// of its vocabulary, whose picks mostly are not. Either way the streams are plain
// decoding's; the draft decides only how many tokens a verification gains.
class DraftModelTest : public SpeculativeTest {
 protected:
  void SetUp() override {
    SpeculativeTest::SetUp();
    if (IsSkipped()) return;
    const std::string path = *dir_ + "/stories260K/stories260K.gguf";
    self_ = worker::testing::LoadOrDie(path);
    worker::RandomModelOptions o;
    o.vocab_from = path;
    o.context_length = weights_->config.max_seq_len;
    o.seed = 7;
    random_path_ = ::testing::TempDir() + "/folio-draft-" + std::to_string(getpid()) + ".gguf";
    ASSERT_TRUE(worker::WriteRandomModel(o, random_path_).ok());
    random_ = worker::testing::LoadOrDie(random_path_);
    ASSERT_TRUE(worker::CheckDraftVocabulary(*weights_, *random_).ok())
        << worker::CheckDraftVocabulary(*weights_, *random_);
  }
  void TearDown() override {
    SpeculativeTest::TearDown();
    if (!random_path_.empty()) std::remove(random_path_.c_str());
  }
  std::unique_ptr<worker::ModelWeights> self_, random_;
  std::string random_path_;
};

TEST_F(DraftModelTest, SameStreamsAsPlainDecoding) {
  const std::vector<RequestSpec> specs = Mixed();
  MakeWith(SpeculativeMode::kOff, 256);
  const std::vector<Choices> plain = RunAll(specs);
  int64_t self_accepted = 0;
  for (const worker::ModelWeights* draft : {self_.get(), random_.get()}) {
    const bool self = draft == self_.get();
    SCOPED_TRACE(self ? "the model drafting for itself" : "a random model drafting");
    draft_weights_ = draft;
    MakeWith(SpeculativeMode::kDraft, 256);
    ExpectSame(plain, RunAll(specs));
    const SchedulerStats stats = scheduler_->Stats();
    EXPECT_GT(stats.num_spec_verifications, 20);
    // The steps said the worker was to draft (the placeholders never reach the model).
    int drafted = 0;
    for (const worker::SequenceStep& s : worker_->sampled) drafted += s.draft_by_model ? 1 : 0;
    EXPECT_GT(drafted, 20);
    if (self) {
      // Its own greedy pick is the greedy requests' next token: most proposals stand.
      self_accepted = stats.num_spec_accepted;
      EXPECT_GT(stats.num_spec_accepted, stats.num_spec_proposed / 3)
          << stats.num_spec_accepted << " of " << stats.num_spec_proposed;
    } else {
      EXPECT_LT(stats.num_spec_accepted, self_accepted);
    }
    ExpectPoolFull(256);
  }
}

// A draft that is never right: its branches sit out longer and longer pauses, and the
// steps of a pause go back to back (pipelined) as without speculation, with the same
// streams. Without the pauses' pipelining every step here would wait for the one before.
TEST_F(DraftModelTest, BranchesSittingOutAPauseArePipelined) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 4; ++i) {
    RequestSpec s = Spec(Prompt(4 + 3 * i), 90, i % 2 == 0 ? 0.0f : 0.8f);
    s.sampling.seed = 7 + i;
    s.ignore_eos = true;
    specs.push_back(s);
  }
  MakeWith(SpeculativeMode::kOff, 256);
  const std::vector<Choices> plain = RunAll(specs);
  draft_weights_ = random_.get();
  MakeWith(SpeculativeMode::kDraft, 256);
  ExpectSame(plain, RunAll(specs));
  const SchedulerStats stats = scheduler_->Stats();
  EXPECT_GT(stats.num_spec_verifications, 4);
  EXPECT_LT(stats.num_spec_accepted, stats.num_spec_proposed / 4);
  EXPECT_GT(stats.num_steps_planned_ahead, stats.num_steps / 2)
      << stats.num_steps_planned_ahead << " of " << stats.num_steps << " steps planned ahead";
  ExpectPoolFull(256);
}

// A host slot holds the draft's KV of the block after the model's: a conversation whose
// history comes back from the host tier into a fresh worker (both pools empty) drafts as
// well as one that computed its history, instead of drafting over blocks the draft never
// wrote.
TEST_F(DraftModelTest, BlocksLoadedFromTheHostTierComeBackWithTheDraftsKv) {
  draft_weights_ = self_.get();
  RequestSpec first = Spec(Prompt(100), 40, 0.0f);
  first.ignore_eos = true;
  MakeWith(SpeculativeMode::kDraft, 64);
  const Choices answer = Run(first);
  std::vector<int32_t> history = first.prompt;
  history.insert(history.end(), answer.tokens.at(0).begin(), answer.tokens.at(0).end());
  RequestSpec second = Spec(history, 40, 0.0f);
  second.ignore_eos = true;
  // The second turn computed from its tokens: what drafting over a right KV accepts.
  MakeWith(SpeculativeMode::kDraft, 64);
  const Choices computed = Run(second);
  const int64_t computed_accepted = scheduler_->Stats().num_spec_accepted;
  ASSERT_GT(computed_accepted, 20);

  // With the tier: the first turn stores its blocks; a fresh worker loads them.
  MakeWith(SpeculativeMode::kDraft, 64, 1, 0.0, true, 512, /*host_blocks=*/32);
  Run(first);
  MakeWith(SpeculativeMode::kDraft, 64, 1, 0.0, true, 512, /*host_blocks=*/32);
  const Choices loaded = Run(second);
  EXPECT_EQ(loaded.tokens, computed.tokens);
  EXPECT_GE(loaded.cached_prompt_tokens, 128) << "the history came back from the host tier";
  EXPECT_GE(scheduler_->Stats().num_spec_accepted, computed_accepted * 9 / 10)
      << "the loaded blocks' draft KV is the draft's own";
  ExpectPoolFull(64);
}

TEST_F(DraftModelTest, SameStreamsWhenAStarvedPoolPreempts) {
  const std::vector<RequestSpec> specs = Mixed();
  MakeWith(SpeculativeMode::kOff, 24);
  const std::vector<Choices> reference = RunAll(specs);
  draft_weights_ = self_.get();
  MakeWith(SpeculativeMode::kDraft, 24);
  ExpectSame(reference, RunAll(specs));
  EXPECT_GT(scheduler_->Stats().num_preemptions, 0);
  EXPECT_GT(scheduler_->Stats().num_spec_accepted, 0);
  ExpectPoolFull(24);
}

// The drafted proposals reach the cache manager as pending tokens, resolved when accepted:
// the blocks of a generated answer enter the prefix cache under its real tokens, so the
// next turn of the conversation (the prompt and the answer as its prompt) finds them.
TEST_F(DraftModelTest, GeneratedBlocksEnterThePrefixCacheUnderTheirRealTokens) {
  for (SpeculativeMode mode : {SpeculativeMode::kOff, SpeculativeMode::kDraft}) {
    SCOPED_TRACE(mode == SpeculativeMode::kOff ? "off" : "draft");
    draft_weights_ = self_.get();
    MakeWith(mode, 256);
    RequestSpec first = Spec(Prompt(20), 60, 0.0f);
    first.ignore_eos = true;
    const Choices answer = Run(first);
    ASSERT_EQ(answer.tokens.at(0).size(), 60u);
    std::vector<int32_t> history = first.prompt;
    history.insert(history.end(), answer.tokens.at(0).begin(), answer.tokens.at(0).end());
    const Choices next = Run(Spec(history, 4, 0.0f));
    // 80 tokens of history: the full blocks of its first 79 (the last token is computed).
    EXPECT_EQ(next.cached_prompt_tokens, 64);
    if (mode == SpeculativeMode::kDraft) {
      EXPECT_GT(scheduler_->Stats().num_spec_accepted, 20);
    }
    ExpectPoolFull(256);
  }
}

TEST_F(DraftModelTest, SyntheticAcceptanceGivesTheAskedMeanLength) {
  draft_weights_ = random_.get();
  MakeWith(SpeculativeMode::kDraft, 256, 1, /*synth_len=*/3.0);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) {
    RequestSpec s = Spec(Prompt(6 + i), 200, 0.0f);
    s.ignore_eos = true;
    specs.push_back(s);
  }
  for (const Choices& c : RunAll(specs)) EXPECT_EQ(c.tokens.at(0).size(), 200u);
  const SchedulerStats stats = scheduler_->Stats();
  ASSERT_GT(stats.num_spec_verifications, 80);
  EXPECT_NEAR(1.0 + static_cast<double>(stats.num_spec_accepted) /
                        static_cast<double>(stats.num_spec_verifications),
              3.0, 0.3);
  ExpectPoolFull(256);
}

}  // namespace
}  // namespace folio::scheduler
