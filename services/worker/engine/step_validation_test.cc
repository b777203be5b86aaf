#include "services/worker/engine/step_validation.h"

#include <string>

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
