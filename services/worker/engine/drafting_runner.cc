#include "services/worker/engine/drafting_runner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/worker/engine/step_validation.h"

namespace folio::worker {

absl::Status CheckDraftVocabulary(const ModelWeights& target, const ModelWeights& draft) {
  const int32_t tv = target.config.vocab_size;
  const int32_t dv = draft.config.vocab_size;
  if (tv != dv) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model's vocabulary has ", dv, " tokens, the model's ", tv,
        ": a draft model must share the model's tokenizer"));
  }
  const Vocab& a = target.vocab;
  const Vocab& b = draft.vocab;
  if (a.kind != b.kind) {
    return absl::InvalidArgumentError(
        "the draft model's tokenizer is of another kind than the model's (SentencePiece "
        "against byte-level BPE)");
  }
  if (a.bos_id != b.bos_id || a.eos_id != b.eos_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model's BOS / EOS ids (", b.bos_id, ", ", b.eos_id, ") differ from the "
        "model's (", a.bos_id, ", ", a.eos_id, ")"));
  }
  if (a.pieces.size() != b.pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model's tokenizer has ", b.pieces.size(), " pieces, the model's ",
        a.pieces.size()));
  }
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    if (a.pieces[i] != b.pieces[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the draft model's token ", i, " is \"", b.pieces[i], "\", the model's \"",
          a.pieces[i], "\": a draft model must share the model's tokenizer"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DraftingRunner>> DraftingRunner::Create(
    std::unique_ptr<ModelRunner> target, std::unique_ptr<ModelRunner> draft,
    Communicator* group) {
  if (target == nullptr || draft == nullptr) {
    return absl::InvalidArgumentError("a drafting runner needs a model and a draft model");
  }
  if (target->block_size() != draft->block_size() ||
      target->num_blocks() != draft->num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model's KV pool (", draft->num_blocks(), " blocks of ", draft->block_size(),
        " tokens) must match the model's (", target->num_blocks(), " blocks of ",
        target->block_size(), ")"));
  }
  if (target->config().vocab_size != draft->config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model's vocabulary has ", draft->config().vocab_size, " tokens, the model's ",
        target->config().vocab_size));
  }
  if (group != nullptr && group->world_size() <= 1) group = nullptr;
  if (group != nullptr && target->config().vocab_size > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a vocabulary of ", target->config().vocab_size,
        " tokens is past what the ranks' proposal exchange carries (2^24)"));
  }
  return std::unique_ptr<DraftingRunner>(
      new DraftingRunner(std::move(target), std::move(draft), group));
}

absl::Status DraftingRunner::SetHostSegmentAt(const HostKvSegment* host, int64_t offset) {
  if (absl::Status s = target_->SetHostSegmentAt(host, offset); !s.ok()) return s;
  const absl::Status s = draft_->SetHostSegmentAt(host, offset + target_->host_bytes_per_block());
  if (!s.ok()) {
    target_->SetHostSegmentAt(nullptr, 0).IgnoreError();  // neither, rather than one
    return absl::Status(s.code(), absl::StrCat("draft model: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> DraftingRunner::Execute(const StepInput& step) {
  const ModelConfig& c = target_->config();
  StepLimits limits;
  limits.num_blocks = target_->num_blocks();
  limits.block_size = target_->block_size();
  limits.vocab_size = c.vocab_size;
  limits.max_seq_len = c.max_seq_len;
  limits.verifies_drafts = true;
  limits.drafts_with_model = true;
  if (absl::Status s = ValidateStep(step, limits); !s.ok()) return s;

  // The drafting sequences: index in the step, where their known tokens end, how many
  // proposals they want.
  struct Drafting {
    size_t index = 0;
    int32_t known = 0;
    int32_t k = 0;
  };
  std::vector<Drafting> drafting;
  StepInput rows;  // 1. every row the target computes, and the first proposals
  rows.block_copies = step.block_copies;
  // The host tier's stores and loads of the draft's part of each slot (spills and disk
  // loads move the target's KV only: see the file comment).
  for (const HostTransfer& t : step.host_transfers) {
    if (t.kind == HostTransfer::Kind::kStore || t.kind == HostTransfer::Kind::kLoad) {
      rows.host_transfers.push_back(t);
    }
  }
  const int32_t draft_context = draft_->config().max_seq_len;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const SequenceStep& s = step.seqs[i];
    const int32_t n = static_cast<int32_t>(s.token_ids.size());
    if (s.start_pos + n > draft_context) continue;  // past the draft's context: not drafted
    SequenceStep d;
    d.seq_id = s.seq_id;
    d.start_pos = s.start_pos;
    d.block_table = s.block_table;
    d.decode_from_pos = s.decode_from_pos;
    d.sampling.temperature = 0.0f;  // the draft's most likely token
    d.num_samples = 0;
    int32_t known = n;
    if (s.draft_by_model) {
      known = n - s.num_draft_tokens;
      drafting.push_back({i, known, s.num_draft_tokens});
      d.num_samples = 1;
    }
    d.token_ids.assign(s.token_ids.begin(), s.token_ids.begin() + known);
    rows.seqs.push_back(std::move(d));
  }

  StepInput verified = step;
  // Under tensor parallelism only rank 0 drafts: the others take its proposals below. They
  // still run the draft's copies and transfers (memory moves only), so that a step whose
  // transfers the draft refuses is refused by every rank at the same point, before the
  // proposals' exchange.
  const bool drafts = group_ == nullptr || group_->rank() == 0;
  if (!drafts && (!rows.block_copies.empty() || !rows.host_transfers.empty())) {
    rows.seqs.clear();
    if (absl::StatusOr<StepOutput> out = draft_->Execute(rows); !out.ok()) {
      return absl::Status(out.status().code(),
                          absl::StrCat("draft model: ", out.status().message()));
    }
  }
  // Copies and transfers keep its pool in step with the target's.
  if (drafts && (!rows.seqs.empty() || !rows.block_copies.empty() ||
                 !rows.host_transfers.empty())) {
    absl::StatusOr<StepOutput> out = draft_->Execute(rows);
    if (!out.ok()) {
      return absl::Status(out.status().code(),
                          absl::StrCat("draft model: ", out.status().message()));
    }
    // Rows without logits answer with no samples; the drafting ones with one each, in order.
    size_t next = 0;
    for (const SequenceOutput& o : out->seqs) {
      if (o.samples.empty()) continue;
      const Drafting& d = drafting[next++];
      verified.seqs[d.index].token_ids[d.known] = o.samples[0].token_id;
    }
    // 2. One draft step per further position: the proposal before it as input.
    int32_t max_k = 0;
    for (const Drafting& d : drafting) max_k = std::max(max_k, d.k);
    for (int32_t r = 1; r <= max_k; ++r) {
      StepInput pos;
      std::vector<const Drafting*> sampled;
      for (const Drafting& d : drafting) {
        if (d.k < r) continue;
        const SequenceStep& s = verified.seqs[d.index];
        SequenceStep p;
        p.seq_id = s.seq_id;
        p.start_pos = s.start_pos + d.known + r - 1;
        p.token_ids = {s.token_ids[d.known + r - 1]};
        p.block_table = s.block_table;
        p.sampling.temperature = 0.0f;
        p.num_samples = r < d.k ? 1 : 0;  // the last proposal's row: its KV only
        if (p.num_samples > 0) sampled.push_back(&d);
        pos.seqs.push_back(std::move(p));
      }
      absl::StatusOr<StepOutput> drafted = draft_->Execute(pos);
      if (!drafted.ok()) {
        return absl::Status(drafted.status().code(),
                            absl::StrCat("draft model: ", drafted.status().message()));
      }
      size_t j = 0;
      for (const SequenceOutput& o : drafted->seqs) {
        if (o.samples.empty()) continue;
        const Drafting& d = *sampled[j++];
        verified.seqs[d.index].token_ids[d.known + r] = o.samples[0].token_id;
      }
    }
  }
  // Rank 0's proposals are every rank's (the others add zeros: a token id is exact in f32
  // below 2^24). Which sequences draft, and how many proposals, is the step's: the same on
  // every rank of a group whose ranks run one draft model.
  if (group_ != nullptr && !drafting.empty()) {
    std::vector<float> proposals;
    for (const Drafting& d : drafting) {
      const std::vector<int32_t>& t = verified.seqs[d.index].token_ids;
      for (int32_t j = 0; j < d.k; ++j) {
        proposals.push_back(group_->rank() == 0 ? static_cast<float>(t[d.known + j]) : 0.0f);
      }
    }
    if (absl::Status s = group_->AllReduceSum(proposals.data(),
                                              static_cast<int64_t>(proposals.size()),
                                              CommDType::kF32);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("draft model's proposals: ", s.message()));
    }
    size_t next = 0;
    for (const Drafting& d : drafting) {
      std::vector<int32_t>& t = verified.seqs[d.index].token_ids;
      for (int32_t j = 0; j < d.k; ++j) t[d.known + j] = static_cast<int32_t>(proposals[next++]);
    }
  }
  // 3. The target verifies (placeholders of undrafted sequences stand as proposals).
  for (SequenceStep& s : verified.seqs) s.draft_by_model = false;
  return target_->Execute(verified);
}

}  // namespace folio::worker
