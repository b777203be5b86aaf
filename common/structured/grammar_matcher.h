// The token-level side of structured output: which vocabulary tokens may come next.
//
//   TokenVocabulary   each token's bytes as the tokenizer decodes them (so it works for
//                     SentencePiece and byte-level BPE alike), its end-of-generation ids
//                     and a byte trie over the tokens; built once per model.
//   CompiledGrammar   a Grammar (grammar.h) bound to a vocabulary: the pushdown
//                     automaton's position table plus a per-position token-mask cache,
//                     filled lazily (below). Shared by every sequence using the grammar.
//   GrammarMatcher    one sequence's state: the set of parse stacks after the tokens
//                     accepted so far. A value type: copying it forks it (n > 1, beams).
//   GrammarCache      compile once per grammar text (an LRU of CompiledGrammar).
//
// The matcher state is a function of the accepted tokens only, so replaying a sequence's
// output tokens into a fresh matcher (after a preemption, a recompute or a recovery)
// gives the same state.
//
// The mask. A state is a set of stacks of grammar positions whose top is a byte set. Its
// mask comes from one walk of the vocabulary trie: each trie edge advances the stacks
// (held as linked frames in an arena, so a push or a pop is O(1) and a finished subtree's
// frames are dropped at once) by one byte, and a subtree whose stacks all die is skipped
// whole. Masks are memoized per state (the canonical stack set) in the CompiledGrammar,
// shared by every sequence and request using the grammar: the same schema at the same
// point of its output costs one hash lookup and a copy. The memo is bounded
// (kMaxMaskMemoBytes per grammar); past that a mask is computed each time.
//
// Ambiguity. Equal stacks are one: the walk's frames are hash-consed ({pos, parent} ->
// one frame), so two parses that reach the same point share a frame and a head, and the
// accept path keeps its stacks sorted and unique. What is left is the number of really
// distinct parses alive at once; an ambiguous grammar (the regex `(a*a){100}`, or
// `x ::= "a"* "a"*` repeated) keeps many, and the work of every byte grows with them. So
// a matcher is bounded: at most kMaxLiveStacks distinct stacks at one byte position, at
// most kMaxMaskWork expansion steps per mask and kMaxAcceptWork per accepted byte. A
// grammar over a bound is refused, InvalidArgument "grammar too ambiguous: ...":
//   - at compile when possible: CompiledGrammar::Create runs the matcher breadth first
//     over its first kAmbiguityProbeStates states (one byte per class of bytes no element
//     tells apart; kAmbiguityProbeWork steps at most, a few milliseconds) and refuses a
//     grammar that goes over a bound there, naming the bytes that lead to it;
//   - otherwise at the mask or the byte that goes over: FillNextTokenBitmask returns the
//     error (the mask is then all zeros), AcceptToken / AcceptBytes return false and
//     last_error() says why. The scheduler computes each sequence's first mask at Submit
//     (a refusal there is HTTP 400 / gRPC INVALID_ARGUMENT) and ends a request whose later
//     mask goes over with that error.
//
// Bitmask layout: bit (id % 32) of word (id / 32) is 1 when token id is allowed;
// BitmaskWords(vocab_size) words.
#ifndef FOLIO_COMMON_STRUCTURED_GRAMMAR_MATCHER_H_
#define FOLIO_COMMON_STRUCTURED_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/structured/grammar.h"

namespace folio {
class Tokenizer;
}

namespace folio::structured {

// Memoized masks per compiled grammar, at most (4096 masks of a 128K vocabulary).
inline constexpr int64_t kMaxMaskMemoBytes = int64_t{64} << 20;

// The ambiguity bounds (above).
inline constexpr int32_t kMaxLiveStacks = 1024;
inline constexpr int64_t kMaxMaskWork = int64_t{1} << 24;
inline constexpr int64_t kMaxAcceptWork = int64_t{1} << 16;
inline constexpr int32_t kAmbiguityProbeStates = 256;
inline constexpr int64_t kAmbiguityProbeWork = int64_t{1} << 21;  // expansion steps in all

inline int32_t BitmaskWords(int32_t vocab_size) { return (vocab_size + 31) / 32; }
inline bool BitmaskTest(absl::Span<const uint32_t> mask, int32_t id) {
  return (mask[id >> 5] >> (id & 31)) & 1u;
}

// Immutable after construction; thread-safe.
class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes token id decodes to on its own (empty for control tokens,
  // which a grammar never allows); eog_ids: the tokens that end generation, allowed
  // exactly when the grammar is complete.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids);

  // From a tokenizer: normal, user-defined and byte tokens by their decoded bytes
  // (SentencePiece "▁" as a space, byte tokens as their byte, byte-level pieces as their
  // raw bytes); control, unknown and unused tokens as empty.
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::string& bytes(int32_t id) const { return token_bytes_[id]; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }

  // The trie over the non-empty tokens, in DFS pre-order: node 0 is the root (no byte);
  // node i has byte trie_byte(i), its subtree is [i, trie_end(i)), and the tokens ending
  // at it are trie_tokens(i).
  struct TrieNode {
    uint8_t byte = 0;
    int32_t depth = 0;
    int32_t end = 0;          // one past the last node of this subtree
    int32_t tokens_begin = 0;  // into trie_token_ids_
    int32_t tokens_end = 0;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  absl::Span<const int32_t> trie_tokens(int32_t node) const {
    return absl::MakeConstSpan(trie_token_ids_).subspan(
        trie_[node].tokens_begin, trie_[node].tokens_end - trie_[node].tokens_begin);
  }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> eog_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_token_ids_;
};

// Thread-safe: the mask cache is filled under a mutex; everything else is immutable.
class CompiledGrammar {
 public:
  // Parses `grammar_text` (grammar.h) and binds it to `vocab`. The errors of
  // Grammar::Parse, and "grammar too ambiguous: ..." when the probe (above) goes over a
  // bound.
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Create(
      std::string_view grammar_text, std::shared_ptr<const TokenVocabulary> vocab);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  // Per-position caches computed so far (tests, metrics).
  // Masks memoized so far, and lookups that found one (tests, metrics).
  int64_t num_memoized_masks() const;
  int64_t num_memo_hits() const;

 private:
  friend class GrammarMatcher;
  struct Walker;  // grammar_matcher.cc
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab);
  using Stacks = std::vector<std::vector<int32_t>>;
  // One byte's expansion: its steps so far and the calls (stacks topped by a rule
  // reference) it met.
  struct ExpandState {
    int64_t work = 0;
    absl::flat_hash_set<std::vector<int32_t>> visited;
  };
  // The stacks with every top a kBytes element, from `stack` whose top may be any
  // position (appended to `out`; each call expanded once per ExpandState, so `out` may
  // repeat a stack); false past kMaxAcceptWork steps.
  bool Expand(std::vector<int32_t> stack, Stacks* out, ExpandState* st) const;
  // The stacks after `byte`, sorted and unique, into *out (empty when the byte is not
  // allowed); "grammar too ambiguous" (with `context` after the reason) past
  // kMaxLiveStacks or kMaxAcceptWork.
  absl::Status Advance(const Stacks& stacks, uint8_t byte, Stacks* out,
                       std::string_view context = "", int64_t* total_work = nullptr) const;
  absl::StatusOr<Stacks> InitialStacks() const;
  absl::Status ComputeMask(const Stacks& stacks, absl::Span<uint32_t> bitmask) const;
  // The compile-time ambiguity probe (above).
  absl::Status Probe() const;
  bool IsEnd(int32_t position) const {
    return elems_[position].kind == GrammarElement::Kind::kRule && elems_[position].rule < 0;
  }

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  // Position table: every element of every alternative, each alternative followed by an
  // end marker. elem_[p] is the element at position p (kind kRule with rule -1 = end).
  std::vector<GrammarElement> elems_;
  std::vector<std::vector<int32_t>> rule_starts_;  // per rule: its alternatives' first positions
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::vector<uint32_t>> memo_ ABSL_GUARDED_BY(mu_);
  mutable int64_t memo_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t memo_hits_ ABSL_GUARDED_BY(mu_) = 0;
};

// One sequence's matcher. Thread-compatible; copy to fork.
class GrammarMatcher {
 public:
  // At the grammar's start. (A start over an ambiguity bound is refused by Create's
  // probe; were one to get here, the matcher would allow nothing and say why in
  // last_error().)
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by token `id`'s bytes. Returns false, leaving the state unchanged, when the
  // grammar does not allow the token here (an end-of-generation id is allowed, and
  // changes nothing, only when IsComplete()), or when the bytes take the grammar over an
  // ambiguity bound (then last_error() says so; it is OK after a plain refusal).
  bool AcceptToken(int32_t id);
  // Advances by raw bytes (tests, and callers that force text such as a tool-call tag).
  bool AcceptBytes(std::string_view bytes);
  const absl::Status& last_error() const { return last_error_; }

  // Writes the allowed next tokens into `bitmask` (BitmaskWords(vocab size) words).
  // "grammar too ambiguous: ..." (and an all-zero mask) past kMaxMaskWork.
  absl::Status FillNextTokenBitmask(absl::Span<uint32_t> bitmask) const;

  // The bytes so far form a complete match of the root rule (EOS may come next).
  bool IsComplete() const;
  // Complete and nothing can follow: generation must end here (finish reason "stop").
  bool IsTerminated() const;

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  // Each stack lists positions bottom first; its top is a kBytes element. An empty stack
  // means the root rule is complete.
  std::vector<std::vector<int32_t>> stacks_;
  absl::Status last_error_;
};

// Compiles each grammar text once. Thread-safe.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, int32_t capacity);

  // The compiled grammar for `grammar_text`, compiling it on a miss (the errors of
  // CompiledGrammar::Create; failures are not cached).
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(std::string_view grammar_text);

  int64_t hits() const;
  int64_t misses() const;
  const std::shared_ptr<const TokenVocabulary>& vocab() const { return vocab_; }

 private:
  const std::shared_ptr<const TokenVocabulary> vocab_;
  const int32_t capacity_;
  mutable absl::Mutex mu_;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, decltype(lru_)::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_GRAMMAR_MATCHER_H_
