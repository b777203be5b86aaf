// The scheduler's options and the figures it reports. Plain structs, thread-compatible.
#ifndef FOLIO_SERVICES_SCHEDULER_SCHEDULER_OPTIONS_H_
#define FOLIO_SERVICES_SCHEDULER_SCHEDULER_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "services/scheduler/speculation.h"

#include "absl/time/time.h"

namespace folio::scheduler {

// Recovery from a lost worker or cache manager (recovery.h).
struct RecoveryOptions {
  absl::Duration timeout = absl::Seconds(60);  // --recovery_timeout_ms
  // Between attempts to restore the processes: doubling from the first to the most.
  absl::Duration first_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Milliseconds(200);
  // A waiting request whose own deadline is this close ends with UNAVAILABLE ("the replica
  // is recovering") while it still can: past the deadline its caller would only see
  // DEADLINE_EXCEEDED. Long enough for the status to get through the frontend.
  absl::Duration deadline_margin = absl::Milliseconds(250);
};

// What a preemption does with the victim's KV (--preemption). Recompute frees it (full
// blocks stay findable in the prefix cache and the offload tiers until evicted); swap
// also stores the partly computed last block in the host tier and makes the victim's
// blocks the tier's most recent, so the resumed request loads all it had computed.
enum class Preemption { kRecompute, kSwap };

struct SchedulerOptions {
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 512;  // tokens computed per step, all sequences
  int32_t max_num_seqs = 64;             // sequences running at once
  int32_t max_waiting_requests = 1024;   // past this, Submit answers ResourceExhausted
  int32_t max_model_len = 0;             // prompt + output cap, tokens
  int32_t vocab_size = 0;
  int32_t eos_id = 2;
  // Further tokens that end generation like eos_id (end of turn, end of message, ...);
  // may include eos_id.
  std::vector<int32_t> eog_ids;
  int32_t num_blocks = 0;                // the pool's size; 0: unknown (no size check)
  // With window layer groups: the most blocks a sequence's table of each group holds at
  // once (ClusterInfo.window_held_blocks), beside its full-attention blocks.
  std::vector<int32_t> window_held_blocks;
  int32_t max_n = 16;                    // choices per request, at most
  int32_t max_beam_width = 8;            // beam width, at most
  // Each sequence asks the cache manager for max_model_len tokens rather than its prompt
  // plus max_tokens: what a reservation system that cannot know the output length must
  // reserve (the article's Orca (Max) baseline, with the contiguous policy).
  bool reserve_max_model_len = false;
  // Pipelined steps (scheduler.h): plan step N+1 and get its slots while the workers run
  // step N. --async_steps.
  bool async_steps = true;
  // --preemption; swap needs the workers' host KV tier (--kv_host_bytes).
  Preemption preemption = Preemption::kRecompute;
  // Speculative decoding (speculation.h): --speculative, --num_speculative_tokens, ...
  SpeculativeOptions speculative;
  RecoveryOptions recovery;
  // Structured output: grammars compiled against the model's vocabulary, once per text.
  // Null: requests with a grammar are refused.
  std::shared_ptr<structured::GrammarCache> grammars;

  // Whether `token` ends generation (unless the request ignores EOS): eos_id or an eog_id.
  bool IsEndOfGeneration(int32_t token) const {
    return token == eos_id || std::find(eog_ids.begin(), eog_ids.end(), token) != eog_ids.end();
  }
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  // Tokens the admitted requests may still compute: per live branch, its max length less
  // the tokens whose KV is computed (an upper bound: a request may stop early).
  int64_t num_tokens_pending = 0;
  // Pipelined steps: steps planned and sent before the previous one's outputs were
  // applied, and samples computed past a sequence's end (or its preemption) and dropped.
  int64_t num_steps_planned_ahead = 0;
  int64_t num_samples_dropped = 0;
  // Speculative decoding: verifications run, tokens proposed, and proposals accepted.
  int64_t num_spec_verifications = 0;
  int64_t num_spec_proposed = 0;
  int64_t num_spec_accepted = 0;
  // Steps the workers refused because a KV block file they were to load was gone or
  // damaged (each one a cache reset and a recompute).
  int64_t num_disk_load_refusals = 0;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SCHEDULER_OPTIONS_H_
