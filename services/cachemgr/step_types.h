// The cache manager's batched step, as native types (service.cc maps the protobuf
// messages onto these). DESIGN.md, "The cachemgr step RPC", is the contract; in short,
// one request is applied in this order: resolves, commits, frees (swap-outs among them,
// after the plain frees), forks, creates (with prefix lookups), grants; truncates apply
// right after the commits. Plain values;
// thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_STEP_TYPES_H_
#define FOLIO_SERVICES_CACHEMGR_STEP_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "services/cachemgr/types.h"

namespace folio::cachemgr {

// A grant may hold tokens whose ids are not known yet: a pipelined step (the scheduler's
// --async_steps) grants the slot of the token the step in flight is sampling. Such a
// token is kPendingToken until a ResolveOp names it; a commit may not cover it before.
inline constexpr int32_t kPendingToken = -1;

// The id of a token granted as kPendingToken, now that it has been sampled.
struct ResolveOp {
  SeqId seq;
  int32_t pos = 0;
  int32_t token_id = 0;
};

// The scheduler reports that the KV of the first `num_computed_tokens` tokens of a
// sequence has been computed; full blocks among them may enter the prefix cache.
struct CommitOp {
  SeqId seq;
  int32_t num_computed_tokens = 0;
};

// Speculative decoding: the sequence is cut back to its first `num_tokens` tokens (the
// proposals its verification rejected are dropped). Never below its computed tokens;
// blocks past the new end go back to the pool, pending positions past it are forgotten.
struct TruncateOp {
  SeqId seq;
  int32_t num_tokens = 0;
};

// A child sequence that shares all of its parent's blocks.
struct ForkOp {
  SeqId parent;
  SeqId child;
};

// A new sequence. When `prompt` is given and prefix caching is on, the blocks holding
// its longest cached prefix are attached at once (never the block of the last prompt
// token, which must be computed to produce logits).
struct CreateOp {
  SeqId seq;
  int32_t max_len = 0;           // prompt plus output, in tokens
  std::vector<int32_t> prompt;   // for the prefix lookup; may be empty
  std::string request_id;        // for logs
};

// Slots for `token_ids` at positions [start_pos, start_pos + size). start_pos must be the
// sequence's current token count. Any of them may be kPendingToken.
struct GrantOp {
  SeqId seq;
  int32_t start_pos = 0;
  std::vector<int32_t> token_ids;
};

struct StepRequest {
  std::vector<ResolveOp> resolves;
  std::vector<CommitOp> commits;
  std::vector<TruncateOp> truncates;
  std::vector<SeqId> frees;
  // Frees of preempted sequences whose KV the host tier keeps (the scheduler's
  // --preemption=swap; AllocationPolicy::SwapOut): a later create of the same tokens
  // loads it back. Without a host tier, plain frees.
  std::vector<SeqId> swap_outs;
  std::vector<ForkOp> forks;
  std::vector<CreateOp> creates;
  std::vector<GrantOp> grants;
  // The host tier (host_tier.h): the highest store ticket the workers have executed (a
  // step carrying it answered). 0: nothing to report.
  uint64_t transfers_done = 0;
};

enum class SeqStatus {
  kOk,
  // The pool could not serve it; the sequence was left exactly as it was. Also a grant
  // for a sequence created in the same request whose prefix lookup cached fewer tokens
  // than validation predicted (a host-tier load found no free block): its start_pos
  // no longer follows the sequence's tokens.
  kNoRoom,
};

// What changed in a window layer group's table (sequence.h WindowTable): the logical
// blocks before `first_block` were released, and those from `table_offset` on (logical
// indices) are replaced by `entries`.
struct WindowResult {
  int32_t first_block = 0;
  int32_t table_offset = 0;
  std::vector<BlockId> entries;
  bool operator==(const WindowResult&) const = default;
};

// What changed in one sequence's block table: entries from `table_offset` on are
// replaced by `entries` (the table's new length is table_offset + entries.size()).
struct SeqResult {
  SeqId seq;
  SeqStatus status = SeqStatus::kOk;
  int32_t table_offset = 0;
  std::vector<BlockId> entries;
  std::vector<BlockCopy> copies;  // to run before the step writes
  int32_t num_tokens = 0;         // the sequence's token count afterwards
  int32_t num_cached_tokens = 0;  // creates only: tokens found in the prefix cache
  // With window layer groups (CacheConfig::windows), one per group, unless kNoRoom. The
  // copies above include theirs.
  std::vector<WindowResult> windows;
};

struct StepResponse {
  std::vector<SeqResult> forks;    // one per ForkOp, in order
  std::vector<SeqResult> creates;  // one per CreateOp, in order
  std::vector<SeqResult> grants;   // one per GrantOp, in order
  // Host tier stores (from commits) and loads (from creates' prefix lookups), in the
  // order they were decided: the workers run them in this order, before the copies.
  std::vector<BlockTransfer> transfers;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_STEP_TYPES_H_
