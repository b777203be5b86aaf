#include "services/worker/engine/step_validation.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace folio::worker {
namespace {

StepLimits Limits() {
  StepLimits l;
  l.num_blocks = 10;
  l.block_size = 4;
  l.vocab_size = 100;
  l.max_seq_len = 64;
  return l;
}

SequenceStep Seq(uint64_t id, int32_t start, int32_t n, std::vector<int32_t> table) {
  SequenceStep s;
  s.seq_id = id;
  s.start_pos = start;
  s.token_ids.assign(n, 7);
  s.block_table = std::move(table);
  return s;
}

void ExpectInvalid(const StepInput& step, const std::string& needle) {
  const absl::Status s = ValidateStep(step, Limits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(StepValidationTest, AcceptsAWellFormedStep) {
  StepInput step;
  step.seqs = {Seq(1, 0, 8, {3, 4}), Seq(2, 5, 1, {0, 9})};
  step.block_copies = {{4, 5}};
  EXPECT_TRUE(ValidateStep(step, Limits()).ok());
  EXPECT_TRUE(ValidateStep(StepInput{}, Limits()).ok());
}

TEST(StepValidationTest, RejectsPositionsOutsideTheTable) {
  StepInput step;
  step.seqs = {Seq(1, 6, 3, {3, 4})};  // positions 6..8, table covers 0..7
  ExpectInvalid(step, "position 8 is outside its block table");
  step.seqs = {Seq(1, 62, 3, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6})};
  ExpectInvalid(step, "beyond the model's context");
  step.seqs = {Seq(1, -1, 1, {3})};
  ExpectInvalid(step, "negative start");
  step.seqs = {Seq(1, 0, 0, {3})};
  ExpectInvalid(step, "no new tokens");
}

TEST(StepValidationTest, RejectsBlocksOutsideThePool) {
  StepInput step;
  step.seqs = {Seq(1, 0, 2, {10})};
  ExpectInvalid(step, "block table entry 0 = 10 is outside the pool of 10 blocks");
  step.seqs = {Seq(1, 0, 2, {2, -1})};  // even an entry past the written positions
  ExpectInvalid(step, "entry 1 = -1");
  step.seqs = {};
  step.block_copies = {{1, 10}};
  ExpectInvalid(step, "block 10 is outside the pool");
  step.block_copies = {{-3, 1}};
  ExpectInvalid(step, "block -3 is outside the pool");
  step.block_copies = {{2, 2}};
  ExpectInvalid(step, "onto itself");
  step.block_copies = {{1, 3}, {2, 3}};
  ExpectInvalid(step, "both write block 3");
}

TEST(StepValidationTest, RejectsOverlappingWritesAndBadFields) {
  StepInput step;
  step.seqs = {Seq(1, 0, 2, {3}), Seq(2, 1, 1, {3})};  // both write slot 13
  ExpectInvalid(step, "slot 13 (block 3) is written twice");
  step.seqs = {Seq(1, 0, 1, {3}), Seq(1, 0, 1, {4})};
  ExpectInvalid(step, "repeated");
  step.seqs = {Seq(1, 0, 1, {3})};
  step.seqs[0].token_ids = {100};
  ExpectInvalid(step, "token id 100");
  step.seqs = {Seq(1, 0, 1, {3})};
  step.seqs[0].num_samples = -1;
  ExpectInvalid(step, "num_samples");
  step.seqs[0].num_samples = 1;
  step.seqs[0].num_logprobs = 101;
  ExpectInvalid(step, "num_logprobs");
  step.seqs[0].num_logprobs = 0;
  step.seqs[0].sampling.top_p = 2;
  ExpectInvalid(step, "top_p");
  // The logits transform's inputs index the logits row: an id outside the vocabulary
  // must never reach it.
  step.seqs[0].sampling.top_p = 1;
  step.seqs[0].sampling.logit_bias = {{100, 1.0f}};
  ExpectInvalid(step, "logit_bias key 100");
  step.seqs[0].sampling.logit_bias.clear();
  step.seqs[0].sampling.frequency_penalty = 5;
  ExpectInvalid(step, "frequency_penalty");
  step.seqs[0].sampling.frequency_penalty = 0;
  step.seqs[0].history.output_token_ids = {7, 100};
  step.seqs[0].history.output_counts = {1, 1};
  ExpectInvalid(step, "history.output_token_ids[1] is 100");
  step.seqs[0].history = {};
  step.seqs[0].history.suppressed_token_ids = {-3};
  ExpectInvalid(step, "history.suppressed_token_ids[0]");
}

TEST(StepValidationTest, DraftsWithAModelOnlyWhereThereIsOne) {
  StepInput step;
  step.seqs = {Seq(1, 0, 4, {3})};
  step.seqs[0].num_draft_tokens = 3;
  step.seqs[0].draft_by_model = true;
  ExpectInvalid(step, "this worker has no draft model");
  StepLimits limits = Limits();
  limits.verifies_drafts = true;
  limits.drafts_with_model = true;
  EXPECT_TRUE(ValidateStep(step, limits).ok());
  step.seqs[0].num_draft_tokens = 0;
  const absl::Status s = ValidateStep(step, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("draft_by_model without proposals"), std::string::npos) << s;
}

}  // namespace
}  // namespace folio::worker

namespace folio::worker {
namespace {

// Random window tables (any first block, length and ids, some out of range): whatever
// ValidateStep accepts is safe to run, by an independent reading of what the runner
// touches: every written slot inside the pool and written once, every key a query of a
// window group sees held by its table.
TEST(StepValidationTest, AcceptedWindowTablesAreSafeToRun) {
  std::mt19937 rng(17);
  StepLimits limits = Limits();
  limits.num_blocks = 24;
  limits.windows = {5, 9};
  int accepted = 0;
  int refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    StepInput step;
    const int32_t start = static_cast<int32_t>(rng() % 40);
    const int32_t n = 1 + static_cast<int32_t>(rng() % 6);
    std::vector<int32_t> table;
    for (int32_t b = 0; b < (start + n + 3) / 4; ++b) table.push_back(b);
    SequenceStep s = Seq(1, start, n, table);
    for (size_t g = 0; g < limits.windows.size() + (rng() % 8 == 0 ? 1 : 0); ++g) {
      // Near what a window of 7 needs (the groups' windows are 5 and 9): one block
      // either side of its first and last.
      WindowBlockTable w;
      w.first_block = std::max(0, start - 6) / 4 + static_cast<int32_t>(rng() % 3) - 1;
      const int32_t len = (start + n + 3) / 4 - w.first_block + static_cast<int32_t>(rng() % 3) - 1;
      for (int32_t j = 0; j < len; ++j) {
        w.blocks.push_back(12 + static_cast<int32_t>(rng() % 13));  // 24: outside the pool
      }
      s.window_tables.push_back(w);
    }
    step.seqs = {s};
    const absl::Status status = ValidateStep(step, limits);
    if (!status.ok()) {
      ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      ++refused;
      continue;
    }
    ++accepted;
    ASSERT_EQ(s.window_tables.size(), limits.windows.size());
    std::vector<int64_t> written;
    for (int32_t pos = start; pos < start + n; ++pos) written.push_back(table[pos / 4] * 4 + pos % 4);
    for (size_t g = 0; g < limits.windows.size(); ++g) {
      const WindowBlockTable& w = s.window_tables[g];
      // The first query (the earliest position) sees keys from start - window + 1.
      const int32_t first_key = std::max(0, start - limits.windows[g] + 1);
      ASSERT_GE(w.first_block, 0);
      ASSERT_LE(w.first_block * 4, first_key) << "a key the window sees was released";
      for (int32_t pos = first_key; pos < start + n; ++pos) {
        const int32_t at = pos / 4 - w.first_block;
        ASSERT_GE(at, 0);
        ASSERT_LT(at, static_cast<int32_t>(w.blocks.size())) << "position " << pos;
        ASSERT_GE(w.blocks[at], 0);
        ASSERT_LT(w.blocks[at], limits.num_blocks);
        if (pos >= start) written.push_back(int64_t{w.blocks[at]} * 4 + pos % 4);
      }
    }
    std::sort(written.begin(), written.end());
    ASSERT_EQ(std::adjacent_find(written.begin(), written.end()), written.end())
        << "a slot written twice";
  }
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace folio::worker
