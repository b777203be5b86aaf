// Checks a step against the pool and model it will run on, before anything is written.
// This is the worker's guard against scheduler bugs: a step that would write outside
// the slots its block tables grant, read a block outside the pool, or copy into a
// block that does not exist is rejected whole. Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_STEP_VALIDATION_H_
#define FOLIO_SERVICES_WORKER_ENGINE_STEP_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "services/worker/engine/step.h"

namespace folio::worker {

struct StepLimits {
  int64_t num_blocks = 0;    // block ids must lie in [0, num_blocks)
  int32_t block_size = 0;
  int32_t vocab_size = 0;    // token ids must lie in [0, vocab_size)
  int32_t max_seq_len = 0;   // positions must lie in [0, max_seq_len)
  int32_t max_num_samples = 64;
  // Whether the backend verifies proposed tokens (SequenceStep::num_draft_tokens).
  bool verifies_drafts = false;
  // Whether the backend drafts proposals with a model of its own
  // (SequenceStep::draft_by_model).
  bool drafts_with_model = false;
  // The pool's window layer groups (kv_layer_groups.h), each group's window: every
  // sequence carries one window table per group.
  std::vector<int32_t> windows;
};

// OK, or InvalidArgument with a message naming the sequence (by id and index) and what
// is wrong: no new tokens; a negative start; a position at or past max_seq_len or past
// the end of the block table; a block id outside the pool; two sequences writing one
// slot; a token id outside the vocabulary; bad sampling or logits-transform parameters,
// a bad token history (logits_processor.h), or bad counts; proposed tokens to verify on
// a backend that does not, or with anything but one sample free of suppressed tokens and
// grammar masks; proposals to draft with a model (draft_by_model) on a backend without
// one, or without proposals; a repeated sequence id; a block copy with a block outside the
// pool, onto itself, or onto a block an earlier copy already wrote; window tables not one
// per window group, short of the step's positions, with a block outside the pool, or
// starting after a block the step's first position's window reaches.
absl::Status ValidateStep(const StepInput& step, const StepLimits& limits);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_STEP_VALIDATION_H_
