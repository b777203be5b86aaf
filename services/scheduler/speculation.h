// Speculative decoding's scheduler side: what to propose for a decoding sequence, how
// many proposals to risk, and (benchmarks only) how many to accept synthetically.
//
// A step may carry, for a decoding branch, its next known input token followed by k
// proposed continuations (worker::SequenceStep::num_draft_tokens). The worker draws a
// token at each of the k + 1 positions, keyed by position exactly as plain decoding
// draws it, and stops at the first that differs from the proposal standing there; so the
// branch gains 1 .. k + 1 tokens in one step, and they are the tokens plain decoding
// would have produced, greedy or seeded (the exact-match rule; for a proposer that puts
// all its mass on one token, as n-gram lookup does, it is the standard speculative
// sampling rule). The cache manager granted slots for all k + 1 inputs; the rejected
// proposals' are cut back (cachemgr::TruncateOp) with the commit of the accepted ones, so
// only accepted tokens ever enter the prefix cache.
//
// Proposers: n-gram lookup (prompt lookup) over the branch's own prompt and output, no
// extra model; or the workers' draft model (their --draft_model): the step then carries k
// placeholders with worker::SequenceStep::draft_by_model, and the worker drafts the
// proposals itself, in the same step that verifies them (drafting_runner.h), so the
// scheduler never sees a proposal, only what was accepted.
//
// Adaptive: each branch keeps its own k, starting at the most allowed, halved after a
// step that accepted nothing and raised by one after a step that accepted everything. A
// branch refused again at k = 1 sits out its next decode steps (4, then
// 8, 16, ... up to 64 while each probe after a pause is refused again; any accepted
// proposal ends the backoff), so a proposer that is never right costs a verified row once
// in a while, not every step. And no branch speculates in a step whose decoding branches number more than
// SpeculativeOptions::max_batch (a batch that large keeps the weights' reads busy
// enough that verifying k more positions each costs more than it saves).
//
// Penalties speculate: the worker counts the proposals before each position into the
// history it penalises there; logit_bias is the same at every position. Not speculated
// (the step carries one token, as without speculation): beam search, the fan-out step of
// n > 1 (its branches speculate afterwards), grammar-constrained requests (the mask needs
// each token first), a branch short of its min_tokens (suppression counts tokens), and a
// step planned ahead of its predecessor's answer. Pipelined steps (--async_steps) and
// speculation exclude each other: in a batch small enough to speculate, the sampling steps
// of requests that may speculate are followed synchronously (the next plan needs their
// last token), whether or not the lookup then finds a match; except a branch whose next
// decode step sits out a pause, which is pipelined like any other (its pause counted off
// as it goes), so a proposer that is never right also leaves the steps back to back.
//
// Thread-compatible; pure functions except the branch state they are given.
#ifndef FOLIO_SERVICES_SCHEDULER_SPECULATION_H_
#define FOLIO_SERVICES_SCHEDULER_SPECULATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace folio::scheduler {

enum class SpeculativeMode { kOff, kNgram, kDraft };

// "off", "ngram" or "draft"; InvalidArgument naming the value otherwise.
absl::StatusOr<SpeculativeMode> ParseSpeculativeMode(const std::string& name);
// The flag value of `mode` ("off", "ngram", "draft"): the metrics' proposer label.
const char* SpeculativeModeName(SpeculativeMode mode);

inline constexpr int32_t kMaxSpeculativeTokens = 16;

struct SpeculativeOptions {
  SpeculativeMode mode = SpeculativeMode::kOff;
  int32_t num_tokens = 4;  // --num_speculative_tokens: proposals per step, at most
  // n-gram lookup: the longest suffix of the context, from ngram_max tokens down to
  // ngram_min, that occurred earlier; its most recent earlier occurrence's continuation
  // is proposed.
  int32_t ngram_min = 2;
  int32_t ngram_max = 4;
  // Decoding branches in a step above which no branch speculates.
  int32_t max_batch = 8;
  // Benchmarks only (--spec_synth_len): > 0 accepts proposals synthetically so that the
  // mean tokens per verification, the model's own token included, is this (1 .. k + 1);
  // proposals are padded to k. The text is then not the model's.
  double synth_len = 0.0;

  bool enabled() const { return mode != SpeculativeMode::kOff; }
};

// InvalidArgument unless num_tokens is in [1, kMaxSpeculativeTokens], 1 <= ngram_min <=
// ngram_max <= 64, max_batch >= 1 and synth_len is 0 or in [1, num_tokens + 1].
absl::Status ValidateSpeculativeOptions(const SpeculativeOptions& options);

// Up to `k` tokens that followed the most recent earlier occurrence of the context's
// last n tokens, for the largest n in [ngram_min, ngram_max] that has one; the context
// is `prompt` followed by `output`. Empty when nothing matches.
std::vector<int32_t> ProposeNgram(absl::Span<const int32_t> prompt,
                                  absl::Span<const int32_t> output, int32_t k,
                                  int32_t ngram_min, int32_t ngram_max);

// The per-position acceptance rate r with 1 + r + r^2 + ... + r^k = mean_len.
double SyntheticRate(double mean_len, int32_t k);
// How many of k proposals a synthetic verification accepts: consecutive successes of
// rate `rate`, drawn from `key` (a pure function of it).
int32_t SyntheticAccepts(double rate, int32_t k, uint64_t key);

// A branch's adaptive speculation (see the file comment).
struct SpeculativeBranch {
  int32_t k = 0;        // proposals at most; 0: not set yet (the most allowed)
  int32_t pause = 0;    // decode steps left without proposals
  int32_t backoff = 0;  // the last pause's length; 0: none since a proposal was accepted

  // Whether its next decode step would propose (no pause left to sit out).
  bool MayProposeNext() const { return pause == 0; }
};
inline constexpr int32_t kFirstSpeculativePause = 4;
inline constexpr int32_t kMaxSpeculativePause = 64;

// After a verification that accepted `accepted` of `proposed` (nothing when proposed is 0).
void AdaptSpeculation(int32_t proposed, int32_t accepted, int32_t max_k, SpeculativeBranch* s);
// Whether the branch proposes this decode step; a paused one counts the step off.
bool ProposesThisStep(SpeculativeBranch* s);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SPECULATION_H_
