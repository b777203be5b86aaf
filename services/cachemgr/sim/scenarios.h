// Scenarios for folio-cachemgr-sim: the PagedAttention article's memory figures,
// reproduced by driving a real KvCacheManager through its step API. Nothing here computes
// a result from a formula: every figure is read back from the manager's Stats() or from
// the block tables of its live sequences (Find()), so a broken policy gives wrong
// figures. Formulas belong only in the tests, as expectations.
//
// Each Run*() builds its own KvCacheManager(s), sized from its inputs, and drops them on
// return. Invalid inputs are InvalidArgument with a message naming the bad value; a
// manager that disagrees with itself (CheckInvariants) is Internal.
//
// Thread-compatible: the functions share no state, so concurrent calls are fine.
#ifndef FOLIO_SERVICES_CACHEMGR_SIM_SCENARIOS_H_
#define FOLIO_SERVICES_CACHEMGR_SIM_SCENARIOS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "services/cachemgr/kv_cache_manager.h"

namespace folio::cachemgr::sim {

using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------- snapshot

// One request of a snapshot: `prompt_tokens` + `generated_tokens` are in the cache now;
// `final_tokens` is the length it will eventually reach (its KV still to come).
struct RequestSpec {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  int32_t final_tokens = 0;
};

// Parses "PROMPT:GENERATED:FINAL,..." (at least one request). Only the syntax is checked
// here; RunSnapshot() checks the values against max_len.
absl::StatusOr<std::vector<RequestSpec>> ParseRequests(absl::string_view text);

// The article's four requests: 200:100:450, 1200:300:1800, 50:20:300, 800:600:1500.
std::vector<RequestSpec> ArticleRequests();

struct SnapshotOptions {
  PolicyKind policy = PolicyKind::kPaged;
  int32_t block_size = 16;      // tokens per block
  int32_t max_len = 4096;       // every request's max_len (contiguous reserves all of it)
  int64_t kib_per_token = 128;  // KV bytes per token / 1024 (Llama 3.1 8B, 16-bit: 128)
  std::vector<RequestSpec> requests;
};

struct RequestSnapshot {
  RequestSpec spec;
  int32_t num_tokens = 0;        // tokens the manager holds for it
  int32_t num_blocks = 0;        // blocks its table or reserved run covers
  int64_t slots_held = 0;        // num_blocks * block_size
  int64_t slots_to_come = 0;     // held slots its later tokens (up to final) will fill
  int64_t slots_never_used = 0;  // held slots it will never fill
};

struct SnapshotResult {
  SnapshotOptions options;
  int32_t pool_blocks = 0;     // size of the pool the scenario ran in
  int32_t blocks_held = 0;     // Stats().pool.num_blocks_used
  int64_t slots_reserved = 0;  // Stats().pool.num_slots_allocated
  int64_t slots_used = 0;      // Stats().pool.num_tokens_stored
  int64_t slots_to_come = 0;   // sums of the per-request figures
  int64_t slots_never_used = 0;
  std::vector<RequestSnapshot> requests;
};

// Creates every request as a sequence (max_len = options.max_len), grants its prompt in
// one step, commits it, then grants the generated tokens one decode step at a time.
absl::StatusOr<SnapshotResult> RunSnapshot(const SnapshotOptions& options);
Json ToJson(const SnapshotResult& result);

// --------------------------------------------------------------------- parallel sampling

struct ParallelSamplingOptions {
  int32_t prompt_tokens = 1000;
  int32_t num_samples = 4;         // n
  int32_t generated_tokens = 200;  // per sample
  int32_t block_size = 16;
  int64_t kib_per_token = 128;
};

struct ParallelSamplingResult {
  ParallelSamplingOptions options;
  int32_t blocks_with_sharing = 0;     // paged: one prompt, forked n - 1 times
  int32_t blocks_without_sharing = 0;  // paged: n independent sequences
  int32_t shared_blocks = 0;           // blocks in more than one table at the end
  int64_t cow_copies = 0;              // Stats().num_cow_copies of the sharing run
  int32_t blocks_after_prompt = 0;     // sharing run, before the forks
  int32_t blocks_after_forks = 0;      // sharing run, before any sample token
};

// Prefix caching is off in both runs, so only forks share.
absl::StatusOr<ParallelSamplingResult> RunParallelSampling(const ParallelSamplingOptions& options);
Json ToJson(const ParallelSamplingResult& result);

// ------------------------------------------------------------------------- fragmentation

struct FragmentationOptions {
  int32_t block_size = 16;  // must divide 512, so the article's runs are whole blocks
};

// The article's external-fragmentation case, run once per policy; see RunFragmentation.
struct FragmentationRun {
  PolicyKind policy = PolicyKind::kPaged;
  Json layout_before;         // A(1,024) B(512) C(2,048) and 512 free
  Json layout_after_free;     // after B ends
  Json layout_after_request;  // after the 1,024-token request D was tried
  int64_t free_slots_before_request = 0;
  int64_t largest_free_run_slots = 0;  // before D, in slots
  bool request_served = false;
  int32_t request_blocks = 0;  // blocks in D's table afterwards (0 if refused)
};

struct FragmentationResult {
  FragmentationOptions options;
  int64_t space_slots = 4096;
  FragmentationRun contiguous;  // ContiguousPolicy, power-of-two rounding
  FragmentationRun paged;
};

// In a 4,096-slot pool, sequences A, B, C of 1,024, 512 and 2,048 tokens are created and
// filled (512 slots stay free); B is freed; D asks for 1,024 tokens (create + grant in
// one step).
absl::StatusOr<FragmentationResult> RunFragmentation(const FragmentationOptions& options);
Json ToJson(const FragmentationResult& result);

// ---------------------------------------------------------------------------------- pool

// Parses a byte count: an integer ("63900000000") or a decimal with a unit, SI (B, KB,
// MB, GB, TB: powers of 1000) or binary (KiB, MiB, GiB, TiB: powers of 1024), case
// insensitive ("63.9GB", "64GiB", "1.5 tb"). Fractions of a byte are dropped.
absl::StatusOr<int64_t> ParseBytes(absl::string_view text);

struct PoolOptions {
  int64_t free_bytes = 0;
  int64_t kib_per_token = 128;
  int32_t block_size = 16;
};

struct PoolResult {
  PoolOptions options;
  int64_t bytes_per_block = 0;
  int64_t num_blocks = 0;             // whole blocks that fit in free_bytes
  int64_t num_tokens = 0;             // num_blocks * block_size
  int64_t bytes_left_over = 0;        // free_bytes not covered by a whole block
  bool configured = false;            // a KvCacheManager of num_blocks blocks was built
  std::string not_configured_reason;  // why not, when configured is false
  int32_t manager_blocks_total = 0;   // what that manager's Stats() reports
  int32_t manager_blocks_free = 0;
};

// Block metadata (host memory) the simulator is willing to allocate for one pool. The
// pool subcommand reports a larger pool as not configured rather than building it; the
// other scenarios refuse inputs that would need one.
inline constexpr int64_t kMaxSimMetadataBytes = int64_t{512} << 20;

absl::StatusOr<PoolResult> RunPool(const PoolOptions& options);
Json ToJson(const PoolResult& result);

}  // namespace folio::cachemgr::sim

#endif  // FOLIO_SERVICES_CACHEMGR_SIM_SCENARIOS_H_
