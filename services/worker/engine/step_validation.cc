#include "services/worker/engine/step_validation.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "services/worker/engine/logits_processor.h"
#include "services/worker/engine/sampler.h"

namespace folio::worker {
namespace {

absl::Status SeqError(size_t index, const SequenceStep& seq, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("step sequence #", index, " (seq_id ", seq.seq_id, "): ", what));
}

}  // namespace

absl::Status ValidateStep(const StepInput& step, const StepLimits& limits) {
  for (size_t i = 0; i < step.block_copies.size(); ++i) {
    const BlockCopy& c = step.block_copies[i];
    for (int32_t b : {c.src_block, c.dst_block}) {
      if (b < 0 || b >= limits.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("block copy #", i, " (", c.src_block,
                                                       " -> ", c.dst_block, "): block ", b,
                                                       " is outside the pool of ",
                                                       limits.num_blocks, " blocks"));
      }
    }
    if (c.src_block == c.dst_block) {
      return absl::InvalidArgumentError(
          absl::StrCat("block copy #", i, " copies block ", c.src_block, " onto itself"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (step.block_copies[j].dst_block == c.dst_block) {
        return absl::InvalidArgumentError(absl::StrCat(
            "block copies #", j, " and #", i, " both write block ", c.dst_block));
      }
    }
  }

  absl::flat_hash_set<uint64_t> seq_ids;
  std::vector<int64_t> written_slots;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const SequenceStep& seq = step.seqs[i];
    if (!seq_ids.insert(seq.seq_id).second) return SeqError(i, seq, "sequence id repeated in step");
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    if (n == 0) return SeqError(i, seq, "no new tokens");
    if (seq.start_pos < 0) {
      return SeqError(i, seq, absl::StrCat("negative start position ", seq.start_pos));
    }
    const int64_t end = seq.start_pos + n;  // one past the last new position
    if (end > limits.max_seq_len) {
      return SeqError(i, seq, absl::StrCat("position ", end - 1, " is beyond the model's context of ",
                                           limits.max_seq_len, " tokens"));
    }
    const int64_t capacity = static_cast<int64_t>(seq.block_table.size()) * limits.block_size;
    if (end > capacity) {
      return SeqError(i, seq, absl::StrCat("position ", end - 1, " is outside its block table (",
                                           seq.block_table.size(), " blocks of ",
                                           limits.block_size, " = ", capacity, " slots)"));
    }
    for (size_t b = 0; b < seq.block_table.size(); ++b) {
      const int32_t id = seq.block_table[b];
      if (id < 0 || id >= limits.num_blocks) {
        return SeqError(i, seq, absl::StrCat("block table entry ", b, " = ", id,
                                             " is outside the pool of ", limits.num_blocks,
                                             " blocks"));
      }
    }
    if (seq.window_tables.size() != limits.windows.size()) {
      return SeqError(i, seq, absl::StrCat(seq.window_tables.size(), " window tables for a pool of ",
                                           limits.windows.size(), " window layer groups"));
    }
    for (size_t g = 0; g < seq.window_tables.size(); ++g) {
      const WindowBlockTable& w = seq.window_tables[g];
      const int64_t first_seen = std::max<int64_t>(0, seq.start_pos - limits.windows[g] + 1);
      if (w.first_block < 0 || w.first_block > first_seen / limits.block_size) {
        return SeqError(i, seq, absl::StrCat("window group ", g, "'s table starts at block ",
                                             w.first_block, ", but position ", seq.start_pos,
                                             " sees keys from position ", first_seen));
      }
      const int64_t covered =
          (w.first_block + static_cast<int64_t>(w.blocks.size())) * limits.block_size;
      if (end > covered) {
        return SeqError(i, seq, absl::StrCat("position ", end - 1, " is outside window group ",
                                             g, "'s table (", covered, " slots)"));
      }
      for (size_t b = 0; b < w.blocks.size(); ++b) {
        if (w.blocks[b] < 0 || w.blocks[b] >= limits.num_blocks) {
          return SeqError(i, seq, absl::StrCat("window group ", g, "'s table entry ",
                                               w.first_block + static_cast<int64_t>(b), " = ",
                                               w.blocks[b], " is outside the pool of ",
                                               limits.num_blocks, " blocks"));
        }
      }
      for (int64_t pos = seq.start_pos; pos < end; ++pos) {
        written_slots.push_back(
            static_cast<int64_t>(w.blocks[pos / limits.block_size - w.first_block]) *
                limits.block_size + pos % limits.block_size);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      const int32_t id = seq.token_ids[t];
      if (id < 0 || id >= limits.vocab_size) {
        return SeqError(i, seq, absl::StrCat("token id ", id, " at position ", seq.start_pos + t,
                                             " is outside the vocabulary of ", limits.vocab_size));
      }
      const int64_t pos = seq.start_pos + t;
      written_slots.push_back(static_cast<int64_t>(seq.block_table[pos / limits.block_size]) *
                                  limits.block_size + pos % limits.block_size);
    }
    if (seq.num_samples < 0 || seq.num_samples > limits.max_num_samples) {
      return SeqError(i, seq, absl::StrCat("num_samples ", seq.num_samples, " not in [0, ",
                                           limits.max_num_samples, "]"));
    }
    if (seq.num_logprobs < 0 || seq.num_logprobs > limits.vocab_size) {
      return SeqError(i, seq, absl::StrCat("num_logprobs ", seq.num_logprobs, " not in [0, ",
                                           limits.vocab_size, "]"));
    }
    if (seq.num_candidates < 0 || seq.num_candidates > limits.vocab_size) {
      return SeqError(i, seq, absl::StrCat("num_candidates ", seq.num_candidates, " not in [0, ",
                                           limits.vocab_size, "]"));
    }
    if (seq.draft_by_model) {
      if (!limits.drafts_with_model) {
        return SeqError(i, seq, "proposals to draft with a model, but this worker has no draft "
                                "model (start it with --draft_model, or the scheduler with "
                                "--speculative=ngram or off)");
      }
      if (seq.num_draft_tokens <= 0) {
        return SeqError(i, seq, "draft_by_model without proposals (num_draft_tokens is 0)");
      }
    }
    if (seq.num_draft_tokens != 0 || seq.synthetic_accepts != -1) {
      if (!limits.verifies_drafts) {
        return SeqError(i, seq, "this backend does not verify proposed tokens (speculative "
                                "decoding needs the CPU backend; start the scheduler with "
                                "--speculative=off)");
      }
      const int32_t n = static_cast<int32_t>(seq.token_ids.size());
      if (seq.num_draft_tokens < 0 || seq.num_draft_tokens >= n) {
        return SeqError(i, seq, absl::StrCat("num_draft_tokens ", seq.num_draft_tokens,
                                             " not in [0, ", n - 1, "]"));
      }
      if (seq.synthetic_accepts < -1 || seq.synthetic_accepts > seq.num_draft_tokens) {
        return SeqError(i, seq, absl::StrCat("synthetic_accepts ", seq.synthetic_accepts,
                                             " not in [-1, ", seq.num_draft_tokens, "]"));
      }
      const TokenHistory& h = seq.history;
      if (seq.num_samples != 1 || seq.num_candidates != 0 || seq.return_logits ||
          !h.suppressed_token_ids.empty() || !h.allowed_token_bitmask.empty()) {
        return SeqError(i, seq, "proposed tokens are verified only for one sample, without "
                                "candidates, logits, suppressed tokens or a grammar mask");
      }
    }
    if (absl::Status s = ValidateSamplingParams(seq.sampling); !s.ok()) {
      return SeqError(i, seq, std::string(s.message()));
    }
    if (absl::Status s = ValidateLogitsParams(seq.sampling, limits.vocab_size); !s.ok()) {
      return SeqError(i, seq, std::string(s.message()));
    }
    if (absl::Status s = ValidateTokenHistory(seq.history, limits.vocab_size); !s.ok()) {
      return SeqError(i, seq, std::string(s.message()));
    }
  }
  std::sort(written_slots.begin(), written_slots.end());
  const auto dup = std::adjacent_find(written_slots.begin(), written_slots.end());
  if (dup != written_slots.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot ", *dup, " (block ", *dup / limits.block_size, ") is written twice in one step"));
  }
  return absl::OkStatus();
}

}  // namespace folio::worker
