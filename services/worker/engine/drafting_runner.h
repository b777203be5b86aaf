// DraftingRunner: speculative decoding's draft model (the worker's --draft_model), run in
// the worker beside the model it drafts for (the target), behind the same ModelRunner
// interface.
//
// Placement: the draft model keeps its KV in a pool of its own with the target's block
// size and block ids, so the target's block tables address it unchanged. The cache
// manager, the scheduler and the step protocol know nothing of it beyond one flag per
// sequence (SequenceStep::draft_by_model): no second sequence to create, fork, truncate,
// preempt or recover, and no extra round trip, since the proposals are drafted inside
// the step that verifies them. The price is the draft's KV for every block of the pool
// (its bytes per token are small beside the target's; the worker counts them in its
// budget).
//
// A step, in order:
//   1. the draft computes every row the target computes (prefill chunks and decode rows
//      alike, with the step's block copies), so its KV holds the same tokens at the same
//      positions as the target's; only the drafting sequences get logits, and the draft
//      draws its first proposal for each greedily;
//   2. one batched draft step per further proposal position, all drafting sequences
//      together, each input the proposal before it; then one more that writes the last
//      proposal's KV (no logits);
//   3. the proposals replace the placeholders, and the target runs the step: its
//      verification (step.h's exact-match rule) decides what is accepted, so the output is
//      the target's whatever the draft proposes, greedy or seeded. The draft only decides
//      how many tokens each verification yields.
// After a verification the draft's KV is right up to the last accepted token (its inputs
// there were the accepted proposals); rows past it are written again when the sequence
// gets there, as the target's are.
//
// The offload tiers: a host slot holds the draft's KV of the block after the target's
// (host_bytes_per_block is their sum), and the draft runs the step's stores and loads on
// its part as the target does on its own, so a block loaded from the host tier comes back
// with its draft KV. The disk tier keeps the target's KV only (its files are shared with
// replicas that may have no draft): a block loaded from disk keeps whatever the draft last
// wrote there, as does a sequence past the draft's own context (not drafted: its
// placeholders are verified as they are). Both only lower acceptance. Tensor parallelism:
// rank 0 runs the whole draft (unsharded: it is small) and one all-reduce gives its
// proposals to the other ranks before the model verifies (they add zeros); the other ranks
// compute no draft rows but run the step's block copies and host transfers on their draft
// pool (memory moves only), so that every rank refuses a transfer the draft cannot run at
// the same point, before the exchange. Every rank must be given the same draft model (the
// sequences drafted depend on its context length). The draft computes every step's rows
// whether or not the scheduler drafts (--speculative=draft): a worker with a draft model
// and a scheduler that never drafts pays for it.
//
// Thread-compatible: one step thread calls Execute, as for any ModelRunner.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_DRAFTING_RUNNER_H_
#define FOLIO_SERVICES_WORKER_ENGINE_DRAFTING_RUNNER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/engine/step.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// Whether `draft` may draft for `target`: InvalidArgument naming the first difference in
// vocabulary size, tokenizer kind, BOS / EOS ids or a token's piece (the proposals are
// token ids, so the two must mean the same text by each).
absl::Status CheckDraftVocabulary(const ModelWeights& target, const ModelWeights& draft);

class DraftingRunner final : public ModelRunner {
 public:
  // InvalidArgument unless both pools have the same block size and number of blocks and
  // both models the same vocabulary size. `group`: the target's tensor-parallel group
  // (null, or one rank: none); it must outlive the runner.
  static absl::StatusOr<std::unique_ptr<DraftingRunner>> Create(
      std::unique_ptr<ModelRunner> target, std::unique_ptr<ModelRunner> draft,
      Communicator* group = nullptr);

  // Drafts the proposals of the sequences with draft_by_model, then runs the target (see
  // the file comment). A step ValidateStep refuses, or with a bad host-tier store or load
  // (the draft checks them first, on every rank), is refused before either model writes
  // anything; a bad spill or disk load is refused by the target after the draft wrote its
  // rows (the draft's KV is only a hint: nothing served depends on it).
  absl::StatusOr<StepOutput> Execute(const StepInput& step) override;
  // The target's part of each slot at `offset`, the draft's right after it.
  absl::Status SetHostSegmentAt(const HostKvSegment* host, int64_t offset) override;
  int64_t host_bytes_per_block() const override {
    return target_->host_bytes_per_block() + draft_->host_bytes_per_block();
  }
  absl::Status SetDiskStore(KvDiskStore* disk) override { return target_->SetDiskStore(disk); }

  const ModelConfig& config() const override { return target_->config(); }
  int32_t block_size() const override { return target_->block_size(); }
  int64_t num_blocks() const override { return target_->num_blocks(); }

  ModelRunner& target() { return *target_; }
  ModelRunner& draft() { return *draft_; }

 private:
  DraftingRunner(std::unique_ptr<ModelRunner> target, std::unique_ptr<ModelRunner> draft,
                 Communicator* group)
      : target_(std::move(target)), draft_(std::move(draft)), group_(group) {}

  std::unique_ptr<ModelRunner> target_;
  std::unique_ptr<ModelRunner> draft_;
  Communicator* group_;  // null: one rank
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_DRAFTING_RUNNER_H_
