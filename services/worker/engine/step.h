// The worker's step: what the scheduler asks one model replica rank to compute, and
// what it answers, as native types (the worker's gRPC service maps the protobuf
// messages onto these; nothing here includes protobuf).
//
// A step batches sequences: each brings the token ids it adds at positions
// start_pos, start_pos + 1, ... (one token for decode, a chunk for prefill), its full
// block table, and what to produce after its last new token (samples, log-probs,
// beam-search candidates). Block copies (copy-on-write) run before anything else.
// Token i of a sequence goes to slot
//   block_table[(start_pos + i) / block_size] * block_size + (start_pos + i) % block_size.
// Plain values; thread-compatible.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_STEP_H_
#define FOLIO_SERVICES_WORKER_ENGINE_STEP_H_

#include <cstdint>
#include <vector>

namespace folio::worker {

// An additive bias on one token's logit (OpenAI's logit_bias entry).
struct LogitBias {
  int32_t token_id = 0;
  float bias = 0.0f;  // [-100, 100]
};

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax)
  int32_t top_k = 0;         // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;        // keep the smallest set with this much probability; 1 = off
  float min_p = 0.0f;        // drop tokens below min_p * max probability; 0 = off
  uint64_t seed = 0;         // with (sample index, position) keys every random draw
  // The logits transform before sampling (logits_processor.h has the formulas). Defaults
  // are off.
  float presence_penalty = 0.0f;    // [-2, 2], over generated tokens
  float frequency_penalty = 0.0f;   // [-2, 2], over generated tokens
  float repetition_penalty = 1.0f;  // > 0, over prompt and generated tokens; 1 = off
  std::vector<LogitBias> logit_bias;  // at most 300 entries, distinct token ids
};

// What the transform needs of a sequence's history. The scheduler owns the history (the
// worker never sees a prompt's prefix-cached tokens, and keeps nothing across steps), so
// it ships this with every step that samples for a request using penalties or min_tokens,
// whole each time: nothing to refresh after a preemption, recompute or fork. Empty
// otherwise.
struct TokenHistory {
  // The prompt's distinct token ids, ascending; only with repetition_penalty != 1.
  std::vector<int32_t> prompt_token_ids;
  // The distinct tokens generated so far in this sequence (this choice), ascending, and
  // how many times each was generated (same length, each >= 1).
  std::vector<int32_t> output_token_ids;
  std::vector<int32_t> output_counts;
  // Tokens that must not be sampled this step (min_tokens not reached yet: EOS and the
  // stop token ids).
  std::vector<int32_t> suppressed_token_ids;
  // Structured output: the tokens the sequence's grammar allows next (the scheduler runs
  // the matcher, common/structured/grammar_matcher.h), bit (id % 32) of word (id / 32);
  // ceil(vocab_size / 32) words, or empty when unconstrained. Every other token is -inf.
  std::vector<uint32_t> allowed_token_bitmask;
};

// Block ids are indices into the worker's KV pool, [0, num_blocks), exactly as the
// cachemgr grants them (its BlockId values); the table is passed to the kernels as is.
struct BlockCopy {
  int32_t src_block = 0;
  int32_t dst_block = 0;
};

// A window layer group's table (kv_layer_groups.h): blocks[j] holds logical block
// first_block + j; the blocks before first_block went back to the pool (no query of the
// step sees them: they lie before its first position's window).
struct WindowBlockTable {
  int32_t first_block = 0;
  std::vector<int32_t> blocks;
};

struct SequenceStep {
  uint64_t seq_id = 0;             // the scheduler's id; echoed in the output
  std::vector<int32_t> token_ids;  // new tokens, at positions start_pos, start_pos + 1, ...
  int32_t start_pos = 0;           // tokens of this sequence already in the KV cache
  std::vector<int32_t> block_table;  // the whole table; covers start_pos + token_ids.size()
  // With window layer groups, one table per window group (the pool's, StepLimits::windows),
  // each covering the same positions from its first_block on; `block_table` is then the
  // full-attention layers'. Empty without window groups.
  std::vector<WindowBlockTable> window_tables;
  SamplingParams sampling;
  TokenHistory history;  // for the logits transform; see TokenHistory
  // Tokens to sample for the position after the last new token, with sample indices
  // 0 .. num_samples - 1 (n-way sampling shares the prompt, then forks). 0 for a prefill
  // chunk that does not end the prompt: then no logits are computed at all.
  int32_t num_samples = 1;
  // The sample index of the first sample (its rng key). A request's sample k, running as a
  // forked sequence of its own, draws with first_sample_index k.
  int32_t first_sample_index = 0;
  int32_t num_logprobs = 0;    // top alternatives (by log-prob) returned with each sample
  int32_t num_candidates = 0;  // beam search: the top-k next tokens with log-probs
  bool return_logits = false;  // copy the raw logits into the output (tests, debugging)
  // Speculative decoding: the last num_draft_tokens of token_ids are proposed
  // continuations, not known tokens. Logits are computed at each of the last
  // num_draft_tokens + 1 positions and a token is drawn at each in turn, keyed by the
  // position it would take exactly as step-by-step decoding draws it, until one differs
  // from the proposal standing there: `samples` then holds the accepted proposals and that
  // first differing token (all accepted: the token after the last proposal). With
  // position-keyed draws this is the text plain decoding produces, token for token, greedy
  // or seeded. Penalties see, at each position, the history plus the proposals before it.
  // Needs num_samples 1, no candidates, no logits, no suppressed tokens, no grammar mask.
  int32_t num_draft_tokens = 0;
  // Benchmarks only (the scheduler's --spec_synth_len): accept exactly this many proposals
  // whatever the model says, then draw the next token; -1 verifies. The text is then not
  // the model's.
  int32_t synthetic_accepts = -1;
  // Speculative decoding with a draft model (the worker's --draft_model,
  // drafting_runner.h): the num_draft_tokens proposals standing in token_ids are
  // placeholders, and the worker's draft model writes its own there before the target
  // verifies them. Needs num_draft_tokens > 0 and a backend with a draft model.
  bool draft_by_model = false;
  // Rows at this position and past it were (or will be) computed one at a time when first
  // sampled, and are computed that way whenever a chunk computes them again (a recompute
  // after preemption or a lost process): their attention runs on the per-query kernel,
  // the rows before it on the tiled prefill kernel (kernels/paged_attention.h, whose
  // online softmax sums in another order), so a recomputed sequence has the very KV bits
  // step-by-step decoding wrote and draws the same tokens after it. The scheduler sends
  // the prompt's length; -1: chunks of two or more rows tiled, lone rows per query.
  // Verified proposals (num_draft_tokens > 0) always run per query.
  int32_t decode_from_pos = -1;
};

// KV moving between the pool and the offload tiers (the cache manager decides them,
// services/cachemgr/host_tier.h and disk_tier.h): a store copies pool block `block` into
// host slot `host_slot` (host_kv_segment.h), a load the other way; a spill writes host
// slot `host_slot` to the disk file of block hash (hash_hi, hash_lo), `tokens` in its
// header, a disk load reads that file into pool block `block` (kv_disk_store.h).
struct HostTransfer {
  enum class Kind { kStore, kLoad, kSpill, kLoadDisk };
  Kind kind = Kind::kStore;
  int32_t block = 0;
  int32_t host_slot = 0;
  uint64_t hash_hi = 0;
  uint64_t hash_lo = 0;
  std::vector<int32_t> tokens;
};

struct StepInput {
  std::vector<SequenceStep> seqs;
  std::vector<BlockCopy> block_copies;  // run first, in order, in every layer
  // Run in order before the copies (ModelRunner::Execute, against the segment given by
  // SetHostSegment and the store given by SetDiskStore).
  std::vector<HostTransfer> host_transfers;
};

struct TokenLogprob {
  int32_t token_id = 0;
  // log-softmax of the model's raw logits: before the logits transform (penalties,
  // logit_bias, min_tokens) and before temperature.
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;                    // of token_id, as in TokenLogprob
  std::vector<TokenLogprob> top_logprobs;  // num_logprobs entries, most likely first
};

struct SequenceOutput {
  uint64_t seq_id = 0;
  // num_samples entries, by sample index; a verification: 1 .. num_draft_tokens + 1
  // tokens in position order (SequenceStep::num_draft_tokens).
  std::vector<SampledToken> samples;
  std::vector<TokenLogprob> candidates;    // num_candidates entries, most likely first
  std::vector<float> logits;               // [vocab_size] when return_logits
};

struct StepOutput {
  std::vector<SequenceOutput> seqs;  // one per StepInput::seqs entry, same order
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_STEP_H_
