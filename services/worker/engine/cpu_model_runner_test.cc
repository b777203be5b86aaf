// Model-level properties of the CPU runner: chunked prefill equals one-shot prefill,
// block copies preserve what a sequence sees, batching does not change a sequence's
// results, block size does not matter, and bad steps are rejected without writing.
// Runs on a random model always, and on stories260K when FOLIO_MODELS_DIR is set.
#include "services/worker/engine/cpu_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker {
namespace {

// Logits from different chunkings or batchings differ only by float rounding (GEMMs of
// other shapes, another summation order); this is far below any meaningful change.
constexpr float kLogitTolerance = 2e-4f;

std::vector<int32_t> Prompt(int n, int vocab, int salt) {
  std::vector<int32_t> ids = {1};  // BOS
  for (int i = 1; i < n; ++i) ids.push_back(3 + (i * 37 + salt * 11 + i * i * 5) % (vocab - 3));
  return ids;
}

void ExpectLogitsNear(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LE(worst, kLogitTolerance) << what;
}

class CpuModelRunnerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "random") {
      weights_ = testing::RandomModelOrDie(/*seed=*/11);
    } else {
      const std::optional<std::string> dir = testing::ModelsDir();
      if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
      weights_ = testing::LoadOrDie(*dir + "/stories260K/stories260K.bin");
    }
  }

  std::unique_ptr<CpuModelRunner> MakeRunner(int32_t block_size = 16,
                                             kernels::KvDType dtype = kernels::KvDType::kF32) {
    CpuModelRunnerOptions o;
    o.block_size = block_size;
    o.kv_dtype = dtype;
    o.kv_cache_bytes = 4 << 20;
    o.num_threads = 2;
    absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(*weights_, o);
    CHECK(r.ok()) << r.status();
    return *std::move(r);
  }

  int vocab() const { return weights_->config.vocab_size; }

  // Prefills `prompt` in chunks of the given sizes (cycled), returning the last logits.
  static std::vector<float> Prefill(CpuModelRunner& runner, const std::vector<int32_t>& prompt,
                                    const std::vector<int>& chunks,
                                    const std::vector<int32_t>& table, uint64_t seq_id = 1) {
    int pos = 0;
    std::vector<float> logits;
    for (size_t c = 0; pos < static_cast<int>(prompt.size()); ++c) {
      const int n = std::min<int>(chunks[c % chunks.size()], prompt.size() - pos);
      SequenceStep s;
      s.seq_id = seq_id;
      s.token_ids.assign(prompt.begin() + pos, prompt.begin() + pos + n);
      s.start_pos = pos;
      s.block_table = table;
      const bool last = pos + n == static_cast<int>(prompt.size());
      s.num_samples = last ? 1 : 0;
      s.return_logits = last;
      s.sampling.temperature = 0;
      StepInput step;
      step.seqs = {s};
      absl::StatusOr<StepOutput> out = runner.Execute(step);
      CHECK(out.ok()) << out.status();
      if (last) logits = out->seqs[0].logits;
      if (!last) CHECK(out->seqs[0].samples.empty());
      pos += n;
    }
    return logits;
  }

  // One decode step of `token` at `pos`; returns the logits.
  static std::vector<float> Decode(CpuModelRunner& runner, int32_t token, int pos,
                                   const std::vector<int32_t>& table,
                                   std::vector<BlockCopy> copies = {}) {
    SequenceStep s;
    s.seq_id = 1;
    s.token_ids = {token};
    s.start_pos = pos;
    s.block_table = table;
    s.return_logits = true;
    StepInput step;
    step.seqs = {s};
    step.block_copies = std::move(copies);
    absl::StatusOr<StepOutput> out = runner.Execute(step);
    CHECK(out.ok()) << out.status();
    return out->seqs[0].logits;
  }

  // One sequence's step alone; its samples.
  static std::vector<SampledToken> RunOne(CpuModelRunner& runner, const SequenceStep& seq) {
    StepInput step;
    step.seqs = {seq};
    absl::StatusOr<StepOutput> out = runner.Execute(step);
    CHECK(out.ok()) << out.status();
    return out->seqs[0].samples;
  }

  // `s` with the penalties' history of having generated `generated`.
  static SequenceStep WithHistory(SequenceStep s, std::vector<int32_t> generated) {
    std::sort(generated.begin(), generated.end());
    for (size_t i = 0; i < generated.size();) {
      size_t j = i;
      while (j < generated.size() && generated[j] == generated[i]) ++j;
      s.history.output_token_ids.push_back(generated[i]);
      s.history.output_counts.push_back(static_cast<int32_t>(j - i));
      i = j;
    }
    return s;
  }

  // Plain decoding on a fresh runner: `n` tokens after `prompt`, one step each, the
  // penalties' history grown token by token (it counts only where `base` has penalties).
  std::vector<int32_t> DecodePlainly(int32_t block_size, const SequenceStep& base,
                                     const std::vector<int32_t>& prompt, int n) {
    std::unique_ptr<CpuModelRunner> runner = MakeRunner(block_size);
    SequenceStep step = base;
    step.token_ids = prompt;
    std::vector<int32_t> s = {RunOne(*runner, step).at(0).token_id};
    while (static_cast<int>(s.size()) < n) {
      step = WithHistory(base, s);
      step.start_pos = static_cast<int32_t>(prompt.size() + s.size()) - 1;
      step.token_ids = {s.back()};
      s.push_back(RunOne(*runner, step).at(0).token_id);
    }
    return s;
  }

  std::unique_ptr<ModelWeights> weights_;
};

TEST_P(CpuModelRunnerTest, ChunkedPrefillMatchesOneShot) {
  const std::vector<int32_t> prompt = Prompt(45, vocab(), 1);
  const std::vector<int32_t> table = testing::ScatteredBlocks(4, 5);
  std::vector<float> one_shot, one_shot_next;
  {
    std::unique_ptr<CpuModelRunner> r = MakeRunner();
    one_shot = Prefill(*r, prompt, {1000}, table);
    one_shot_next = Decode(*r, 42, prompt.size(), table);
  }
  const std::vector<std::vector<int>> chunkings = {{1}, {2}, {16}, {7, 3, 11, 1, 16}, {44, 1}};
  for (const std::vector<int>& chunks : chunkings) {
    std::unique_ptr<CpuModelRunner> r = MakeRunner();
    const std::string what = "chunks starting " + std::to_string(chunks[0]);
    ExpectLogitsNear(Prefill(*r, prompt, chunks, table), one_shot, what);
    ExpectLogitsNear(Decode(*r, 42, prompt.size(), table), one_shot_next, what + ", then decode");
  }
}

TEST_P(CpuModelRunnerTest, BlockSizeAndKvDtypeDoNotChangeLogits) {
  const std::vector<int32_t> prompt = Prompt(40, vocab(), 2);
  std::unique_ptr<CpuModelRunner> base = MakeRunner(16);
  const std::vector<float> want = Prefill(*base, prompt, {9}, testing::ScatteredBlocks(3, 1));
  for (int32_t bs : {1, 8, 32}) {
    std::unique_ptr<CpuModelRunner> r = MakeRunner(bs);
    const int blocks = (40 + bs - 1) / bs;
    ExpectLogitsNear(Prefill(*r, prompt, {9}, testing::ScatteredBlocks(blocks, bs)), want,
                     "block size " + std::to_string(bs));
  }
  // An f16 cache rounds K/V: close, under a looser bound.
  std::unique_ptr<CpuModelRunner> half = MakeRunner(16, kernels::KvDType::kF16);
  const std::vector<float> got = Prefill(*half, prompt, {9}, testing::ScatteredBlocks(3, 1));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-2) << i;
  // An 8-bit cache: each K/V value within max|row| / 254 of the f32 one. Measured here
  // (printed): the logits move by 1.7% (random model) and 1.2% (stories260K) of
  // max|logit|; 3% bounds it, and the top tokens must agree with the f32 cache's where their
  // margin exceeds that (what greedy decoding sees).
  std::unique_ptr<CpuModelRunner> q8 = MakeRunner(16, kernels::KvDType::kQ8);
  const std::vector<float> got8 = Prefill(*q8, prompt, {9}, testing::ScatteredBlocks(3, 1));
  ASSERT_EQ(got8.size(), want.size());
  float worst = 0, max_logit = 0;
  for (size_t i = 0; i < got8.size(); ++i) {
    worst = std::max(worst, std::abs(got8[i] - want[i]));
    max_logit = std::max(max_logit, std::abs(want[i]));
  }
  std::printf("q8_0 KV: max |logit - f32 KV logit| = %.4f, max |logit| %.2f (%.2f%%)\n", worst,
              max_logit, 100 * worst / max_logit);
  EXPECT_LE(worst, 0.03f * max_logit);
  EXPECT_GT(worst, 0.0f) << "q8_0 should not be bit-identical to f32";
  const int64_t vocab_size = static_cast<int64_t>(want.size()) / 9;
  for (int64_t row = 0; row < 9; ++row) {
    auto argmax = [&](const std::vector<float>& l) {
      return std::max_element(l.begin() + row * vocab_size, l.begin() + (row + 1) * vocab_size) -
             l.begin();
    };
    std::vector<float> r(want.begin() + row * vocab_size, want.begin() + (row + 1) * vocab_size);
    std::nth_element(r.begin(), r.begin() + 1, r.end(), std::greater<float>());
    if (r[0] - r[1] > 2 * 0.03f * max_logit) {
      EXPECT_EQ(argmax(got8), argmax(want)) << "row " << row;
    }
  }
}

TEST_P(CpuModelRunnerTest, DecodeAfterBlockCopyMatchesDecodeWithout) {
  for (kernels::KvDType dtype : {kernels::KvDType::kF32, kernels::KvDType::kQ8}) {
    SCOPED_TRACE(kernels::KvDTypeName(dtype));
    // 20 tokens fill block 0 and 4 slots of block 1 (block size 16).
    const std::vector<int32_t> prompt = Prompt(20, vocab(), 3);
    std::unique_ptr<CpuModelRunner> plain = MakeRunner(16, dtype);
    Prefill(*plain, prompt, {20}, {2, 6});
    const std::vector<float> want = Decode(*plain, 9, 20, {2, 6});

    std::unique_ptr<CpuModelRunner> forked = MakeRunner(16, dtype);
    Prefill(*forked, prompt, {20}, {2, 6});
    // Copy-on-write of the shared last block 6 into 11, then decode through the copy.
    const std::vector<float> got = Decode(*forked, 9, 20, {2, 11}, {{6, 11}});
    ExpectLogitsNear(got, want, "after copy 6 -> 11");
    // The original block still holds the prefix: the parent decodes as before.
    ExpectLogitsNear(Decode(*forked, 9, 20, {2, 6}), want, "parent after the copy");
  }
}

TEST_P(CpuModelRunnerTest, BatchingDoesNotChangeGreedyTokens) {
  const std::vector<int32_t> prompt = Prompt(23, vocab(), 4);
  const int kNewTokens = 24;
  // Alone.
  std::vector<int32_t> alone;
  std::vector<std::vector<float>> alone_logits;
  {
    std::unique_ptr<CpuModelRunner> r = MakeRunner();
    const std::vector<int32_t> table = {0, 1, 2};
    std::vector<float> logits = Prefill(*r, prompt, {23}, table);
    for (int i = 0; i < kNewTokens; ++i) {
      alone_logits.push_back(logits);
      alone.push_back(std::max_element(logits.begin(), logits.end()) - logits.begin());
      logits = Decode(*r, alone.back(), prompt.size() + i, table);
    }
  }
  // In a batch: the sequence of interest (id 1) prefills in two chunks while another
  // decodes, then decodes beside two sequences still prefilling in chunks of 5.
  std::unique_ptr<CpuModelRunner> r = MakeRunner();
  struct Seq {
    uint64_t id;
    std::vector<int32_t> tokens;
    std::vector<int32_t> table;
    int pos = 0;
  };
  std::vector<Seq> seqs = {{1, prompt, {20, 3, 17}},
                           {2, Prompt(30, vocab(), 5), {4, 9, 13}},
                           {3, Prompt(60, vocab(), 6), {5, 0, 19, 7, 8}},
                           {4, Prompt(3, vocab(), 7), {11, 12, 1}}};
  std::vector<int32_t> batched;
  std::vector<std::vector<float>> batched_logits;
  for (int step_no = 0; batched.size() < static_cast<size_t>(kNewTokens); ++step_no) {
    StepInput step;
    for (Seq& s : seqs) {
      const int remaining = static_cast<int>(s.tokens.size()) - s.pos;
      if (remaining <= 0) continue;
      const int chunk = s.id == 1 ? (s.pos == 0 ? 11 : remaining) : std::min(remaining, 5);
      SequenceStep ss;
      ss.seq_id = s.id;
      ss.start_pos = s.pos;
      ss.token_ids.assign(s.tokens.begin() + s.pos, s.tokens.begin() + s.pos + chunk);
      ss.block_table = s.table;
      ss.sampling.temperature = 0;
      ss.num_samples = chunk == remaining ? 1 : 0;
      ss.return_logits = s.id == 1;
      step.seqs.push_back(ss);
    }
    absl::StatusOr<StepOutput> out = r->Execute(step);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < step.seqs.size(); ++i) {
      Seq& s = *std::find_if(seqs.begin(), seqs.end(),
                             [&](const Seq& q) { return q.id == step.seqs[i].seq_id; });
      s.pos += step.seqs[i].token_ids.size();
      if (out->seqs[i].samples.empty()) continue;
      const int32_t next = out->seqs[i].samples[0].token_id;
      if (s.tokens.size() < 47) s.tokens.push_back(next);  // keep within the tables
      if (s.id == 1) {
        batched.push_back(next);
        batched_logits.push_back(out->seqs[i].logits);
      }
    }
  }
  EXPECT_EQ(batched, alone);
  for (int i = 0; i < kNewTokens; ++i) {
    ExpectLogitsNear(batched_logits[i], alone_logits[i], "token " + std::to_string(i));
  }
}

TEST_P(CpuModelRunnerTest, SampledTokensDoNotDependOnTheBatch) {
  const std::vector<int32_t> prompt = Prompt(19, vocab(), 9);
  SequenceStep seq;
  seq.seq_id = 1;
  seq.token_ids = prompt;
  seq.block_table = {3, 8};
  seq.sampling.temperature = 1.0f;
  seq.sampling.top_k = 40;
  seq.sampling.seed = 77;
  seq.num_samples = 4;  // n-way: four first tokens from one prefill
  seq.num_logprobs = 2;
  seq.num_candidates = 3;
  StepInput alone;
  alone.seqs = {seq};
  absl::StatusOr<StepOutput> a = MakeRunner()->Execute(alone);
  ASSERT_TRUE(a.ok()) << a.status();

  SequenceStep other = seq;
  other.seq_id = 2;
  other.token_ids = Prompt(30, vocab(), 10);
  other.block_table = {0, 5};
  StepInput batched;
  batched.seqs = {other, seq};
  absl::StatusOr<StepOutput> b = MakeRunner()->Execute(batched);
  ASSERT_TRUE(b.ok()) << b.status();

  const SequenceOutput& x = a->seqs[0];
  const SequenceOutput& y = b->seqs[1];
  EXPECT_EQ(y.seq_id, 1u);
  ASSERT_EQ(x.samples.size(), 4u);
  ASSERT_EQ(y.samples.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(x.samples[i].token_id, y.samples[i].token_id) << "sample " << i;
    EXPECT_NEAR(x.samples[i].logprob, y.samples[i].logprob, kLogitTolerance);
    EXPECT_LE(x.samples[i].logprob, 0.0f);
    ASSERT_EQ(x.samples[i].top_logprobs.size(), 2u);
    EXPECT_GE(x.samples[i].top_logprobs[0].logprob, x.samples[i].logprob);
  }
  ASSERT_EQ(x.candidates.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(x.candidates[i].token_id, y.candidates[i].token_id);
  EXPECT_GE(x.candidates[0].logprob, x.candidates[1].logprob);
}

// Speculative verification: the tokens a verification step accepts, and the one it adds,
// are the tokens step-by-step decoding samples at those positions (greedy, and seeded
// sampling keyed by position), across a block boundary, after a rejected proposal's KV
// was written and then overwritten.
TEST_P(CpuModelRunnerTest, VerificationAcceptsWhatDecodingWouldSample) {
  for (const float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE(absl::StrCat("temperature ", temperature));
    const std::vector<int32_t> prompt = Prompt(13, vocab(), 4);
    const std::vector<int32_t> table = {2, 6, 1};
    SequenceStep base;
    base.seq_id = 1;
    base.block_table = table;
    base.sampling.temperature = temperature;
    base.sampling.seed = 99;
    base.num_logprobs = 1;
    // Plain decoding: s[0] from the prompt, then one token a step.
    const std::vector<int32_t> s = DecodePlainly(8, base, prompt, 10);
    SequenceStep step;
    // Speculative: the same prompt, then s[0] with proposals s[1], s[2], a wrong one, s[4].
    std::unique_ptr<CpuModelRunner> spec = MakeRunner(8);
    step = base;
    step.token_ids = prompt;
    ASSERT_EQ(RunOne(*spec, step).at(0).token_id, s[0]);
    const int32_t wrong = (s[3] + 1) % vocab();
    step.start_pos = static_cast<int32_t>(prompt.size());
    step.token_ids = {s[0], s[1], s[2], wrong, s[4]};
    step.num_draft_tokens = 4;
    std::vector<SampledToken> got = RunOne(*spec, step);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].token_id, s[1]);
    EXPECT_EQ(got[1].token_id, s[2]);
    EXPECT_EQ(got[2].token_id, s[3]);
    EXPECT_EQ(got[2].top_logprobs.size(), 1u);
    // Three computed (s[0..2]); s[3] goes in where the wrong proposal's KV was written.
    step.start_pos = static_cast<int32_t>(prompt.size()) + 3;
    step.token_ids = {s[3], s[4], s[5], s[6]};
    step.num_draft_tokens = 3;
    got = RunOne(*spec, step);
    ASSERT_EQ(got.size(), 4u);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got[j].token_id, s[4 + j]) << "position " << j;
    // Benchmarks' synthetic acceptance: exactly two proposals accepted, whatever they are.
    step.start_pos = static_cast<int32_t>(prompt.size()) + 7;
    step.token_ids = {s[7], wrong, wrong, wrong};
    step.num_draft_tokens = 3;
    step.synthetic_accepts = 2;
    got = RunOne(*spec, step);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].token_id, wrong);
    EXPECT_EQ(got[1].token_id, wrong);
    EXPECT_LE(got[1].logprob, 0.0f);
  }
}

// Penalties in a verification: position j counts the proposals before it as generated,
// as step-by-step decoding's history would. Six tokens get a large logit_bias and the
// repetition penalty outweighs it, so plain decoding goes through the six one by one; a
// verifier that forgot to grow the history would see the earlier ones unpenalised and
// pick one of them back.
TEST_P(CpuModelRunnerTest, VerificationPenalisesTheProposalsBeforeEachPosition) {
  const std::vector<int32_t> prompt = Prompt(11, vocab(), 6);
  SequenceStep base;
  base.seq_id = 1;
  base.block_table = {1, 3};
  base.sampling.temperature = 0;
  base.sampling.repetition_penalty = 1000.0f;
  for (int32_t t = 0; t < 6; ++t) base.sampling.logit_bias.push_back({10 + 7 * t, 50.0f});
  const std::vector<int32_t> s = DecodePlainly(16, base, prompt, 7);
  SequenceStep step;
  std::unique_ptr<CpuModelRunner> spec = MakeRunner(16);
  step = base;
  step.token_ids = prompt;
  ASSERT_EQ(RunOne(*spec, step).at(0).token_id, s[0]);
  step = WithHistory(base, {s[0]});
  step.start_pos = static_cast<int32_t>(prompt.size());
  step.token_ids = {s[0], s[1], s[2], s[3], s[4]};
  step.num_draft_tokens = 4;
  const std::vector<SampledToken> got = RunOne(*spec, step);
  std::vector<int32_t> biased(s.begin(), s.begin() + 6);
  std::sort(biased.begin(), biased.end());
  ASSERT_EQ(biased, (std::vector<int32_t>{10, 17, 24, 31, 38, 45})) << "the six, one by one";
  ASSERT_EQ(got.size(), 5u);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(got[j].token_id, s[1 + j]) << "position " << j;
}

TEST_P(CpuModelRunnerTest, BadVerificationStepsAreRejected) {
  std::unique_ptr<CpuModelRunner> r = MakeRunner();
  SequenceStep good;
  good.seq_id = 1;
  good.token_ids = {5, 6, 7};
  good.block_table = {4};
  good.num_draft_tokens = 2;
  std::vector<SequenceStep> bad(6, good);
  bad[0].num_draft_tokens = 3;  // every token a proposal
  bad[1].num_draft_tokens = -1;
  bad[2].num_samples = 2;
  bad[3].num_candidates = 4;
  bad[4].history.suppressed_token_ids = {2};
  bad[5].synthetic_accepts = 3;
  for (size_t i = 0; i < bad.size(); ++i) {
    StepInput step;
    step.seqs = {bad[i]};
    EXPECT_EQ(r->Execute(step).status().code(), absl::StatusCode::kInvalidArgument) << i;
  }
  StepInput ok;
  ok.seqs = {good};
  EXPECT_TRUE(r->Execute(ok).ok());
}

TEST_P(CpuModelRunnerTest, BadStepsAreRejectedWithoutWriting) {
  std::unique_ptr<CpuModelRunner> r = MakeRunner(16, kernels::KvDType::kF16);
  Prefill(*r, Prompt(10, vocab(), 8), {10}, {3});
  const std::vector<uint8_t> before(r->kv_cache().bytes().begin(), r->kv_cache().bytes().end());
  const int64_t pool = r->num_blocks();

  SequenceStep good;
  good.seq_id = 7;
  good.token_ids = {5, 6};
  good.start_pos = 0;
  good.block_table = {4};
  std::vector<StepInput> bad(4);
  // Position 16 lies beyond a one-block table; the good sequence must not be written either.
  SequenceStep beyond = good;
  beyond.seq_id = 8;
  beyond.start_pos = 15;
  beyond.block_table = {5};
  bad[0].seqs = {good, beyond};
  SequenceStep outside = good;
  outside.block_table = {static_cast<int32_t>(pool)};
  bad[1].seqs = {outside};
  bad[2].seqs = {good};
  bad[2].block_copies = {{3, static_cast<int32_t>(pool + 2)}};
  bad[3].seqs = {good};
  bad[3].block_copies = {{-1, 6}};
  for (size_t i = 0; i < bad.size(); ++i) {
    absl::StatusOr<StepOutput> out = r->Execute(bad[i]);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << "bad step " << i;
    EXPECT_FALSE(out.status().message().empty());
    ASSERT_TRUE(std::equal(before.begin(), before.end(), r->kv_cache().bytes().begin()))
        << "bad step " << i << " wrote into the KV cache";
  }
  // The same good sequence alone is accepted and does write.
  StepInput ok;
  ok.seqs = {good};
  ASSERT_TRUE(r->Execute(ok).ok());
  EXPECT_FALSE(std::equal(before.begin(), before.end(), r->kv_cache().bytes().begin()));
}

INSTANTIATE_TEST_SUITE_P(Models, CpuModelRunnerTest, ::testing::Values("random", "stories260K"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace folio::worker
