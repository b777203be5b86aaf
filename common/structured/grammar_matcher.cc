#include "common/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/vocab.h"

namespace folio::structured {

// ---------------------------------------------------------------------------------------
// TokenVocabulary

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes,
                                 std::vector<int32_t> eog_ids)
    : token_bytes_(std::move(token_bytes)), eog_ids_(std::move(eog_ids)) {
  // Sort the non-empty tokens by bytes; the trie is built in DFS pre-order from them.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id) {
    if (!token_bytes_[id].empty()) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[a] != token_bytes_[b] ? token_bytes_[a] < token_bytes_[b] : a < b;
  });
  trie_.push_back(TrieNode{});
  std::vector<int32_t> path{0};  // node ids from the root to the current node
  std::string current;           // bytes of path's last node
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      trie_[path.back()].end = static_cast<int32_t>(trie_.size());
      path.pop_back();
      current.pop_back();
    }
  };
  for (int32_t id : order) {
    const std::string& bytes = token_bytes_[id];
    size_t common = 0;
    while (common < current.size() && common < bytes.size() && current[common] == bytes[common]) {
      ++common;
    }
    close_to(common);
    for (size_t i = common; i < bytes.size(); ++i) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(bytes[i]);
      node.depth = static_cast<int32_t>(i + 1);
      node.tokens_begin = node.tokens_end = 0;
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(node);
      current.push_back(bytes[i]);
    }
    // Tokens ending at a node are contiguous in `order`, so append and extend.
    TrieNode& node = trie_[path.back()];
    if (node.tokens_begin == node.tokens_end) {
      node.tokens_begin = static_cast<int32_t>(trie_token_ids_.size());
    }
    trie_token_ids_.push_back(id);
    node.tokens_end = static_cast<int32_t>(trie_token_ids_.size());
  }
  close_to(0);
  trie_[0].end = static_cast<int32_t>(trie_.size());
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(n);
  for (int32_t id = 0; id < n; ++id) {
    TokenType type = tokenizer.vocab().types[id];
    if (type == TokenType::kControl || type == TokenType::kUnknown ||
        type == TokenType::kUnused) {
      continue;
    }
    absl::StatusOr<TokenSurface> surface = tokenizer.Surface(id);
    if (!surface.ok()) continue;
    switch (surface->kind) {
      case TokenSurface::Kind::kText:
      case TokenSurface::Kind::kBytes:
        bytes[id] = std::string(surface->text);
        break;
      case TokenSurface::Kind::kByte:
        bytes[id] = std::string(1, static_cast<char>(surface->byte));
        break;
      case TokenSurface::Kind::kControl:
        break;
    }
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), tokenizer.eog_ids());
}

// ---------------------------------------------------------------------------------------
// CompiledGrammar

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  GrammarElement end;
  end.kind = GrammarElement::Kind::kRule;
  end.rule = -1;
  elems_.reserve(grammar_.num_elements());
  rule_starts_.resize(grammar_.rules().size());
  for (size_t r = 0; r < grammar_.rules().size(); ++r) {
    for (const auto& alt : grammar_.rules()[r].alternatives) {
      rule_starts_[r].push_back(static_cast<int32_t>(elems_.size()));
      elems_.insert(elems_.end(), alt.begin(), alt.end());
      elems_.push_back(end);
    }
  }
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Create(
    std::string_view grammar_text, std::shared_ptr<const TokenVocabulary> vocab) {
  absl::StatusOr<Grammar> grammar = Grammar::Parse(grammar_text);
  if (!grammar.ok()) return grammar.status();
  std::shared_ptr<const CompiledGrammar> compiled(
      new CompiledGrammar(*std::move(grammar), std::move(vocab)));
  if (absl::Status s = compiled->Probe(); !s.ok()) return s;
  return compiled;
}

int64_t CompiledGrammar::num_memoized_masks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(memo_.size());
}

int64_t CompiledGrammar::num_memo_hits() const {
  absl::MutexLock lock(&mu_);
  return memo_hits_;
}

namespace {

absl::Status TooAmbiguous(const std::string& what, std::string_view context = "") {
  std::string message = "grammar too ambiguous: " + what;
  message.append(context);
  message +=
      "; write it so that a text matches in few ways (a regex like (a*a)* or a grammar like "
      "x ::= \"a\"* \"a\"* matches one text in many)";
  return absl::InvalidArgumentError(message);
}

// The memo / probe key of a stack set.
std::string StacksKey(const std::vector<std::vector<int32_t>>& stacks) {
  std::string key;
  for (const std::vector<int32_t>& s : stacks) {
    for (int32_t p : s) key.append(reinterpret_cast<const char*>(&p), sizeof(p));
    const int32_t sep = -1;
    key.append(reinterpret_cast<const char*>(&sep), sizeof(sep));
  }
  return key;
}

}  // namespace

bool CompiledGrammar::Expand(std::vector<int32_t> stack, Stacks* out, ExpandState* st) const {
  std::vector<std::vector<int32_t>> pending;
  pending.push_back(std::move(stack));
  while (!pending.empty()) {
    std::vector<int32_t> s = std::move(pending.back());
    pending.pop_back();
    while (true) {
      if (++st->work > kMaxAcceptWork) return false;
      if (s.empty()) {
        out->push_back(std::move(s));
        break;
      }
      const int32_t p = s.back();
      const GrammarElement& e = elems_[p];
      if (e.kind == GrammarElement::Kind::kBytes) {
        out->push_back(std::move(s));
        break;
      }
      if (e.rule < 0) {  // end of an alternative: return to the caller
        s.pop_back();
        continue;
      }
      // A call met before for this byte expands the same way again: once is enough
      // (nullable alternatives reach one call by many paths; the results are made
      // unique afterwards).
      if (!st->visited.insert(s).second) break;
      // Call: the caller resumes after the reference; a call in tail position leaves
      // no frame, so right recursion keeps the stack flat.
      s.back() = p + 1;
      if (IsEnd(p + 1)) s.pop_back();
      const std::vector<int32_t>& starts = rule_starts_[e.rule];
      for (size_t i = 1; i < starts.size(); ++i) {
        std::vector<int32_t> t = s;
        t.push_back(starts[i]);
        pending.push_back(std::move(t));
      }
      s.push_back(starts[0]);
    }
  }
  return true;
}

absl::StatusOr<CompiledGrammar::Stacks> CompiledGrammar::InitialStacks() const {
  Stacks out;
  ExpandState st;
  for (int32_t start : rule_starts_[grammar_.root()]) {
    if (!Expand({start}, &out, &st)) {
      return TooAmbiguous(absl::StrCat("its start takes more than ", kMaxAcceptWork,
                                       " expansion steps"));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (static_cast<int64_t>(out.size()) > kMaxLiveStacks) {
    return TooAmbiguous(absl::StrCat(out.size(), " parse stacks at its start (at most ",
                                     kMaxLiveStacks, ")"));
  }
  return out;
}

absl::Status CompiledGrammar::Advance(const Stacks& stacks, uint8_t byte, Stacks* out,
                                      std::string_view context, int64_t* total_work) const {
  out->clear();
  ExpandState st;
  struct AddWork {
    int64_t* total;
    const int64_t& work;
    ~AddWork() {
      if (total != nullptr) *total += work;
    }
  } add_work{total_work, st.work};
  for (const std::vector<int32_t>& s : stacks) {
    if (s.empty() || !elems_[s.back()].bytes.test(byte)) continue;
    std::vector<int32_t> t = s;
    t.back() += 1;
    if (!Expand(std::move(t), out, &st)) {
      out->clear();
      return TooAmbiguous(absl::StrCat("one byte takes more than ", kMaxAcceptWork,
                                       " expansion steps"), context);
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  if (static_cast<int64_t>(out->size()) > kMaxLiveStacks) {
    const size_t n = out->size();
    out->clear();
    return TooAmbiguous(absl::StrCat(n, " parse stacks alive at once (at most ",
                                     kMaxLiveStacks, ")"), context);
  }
  return absl::OkStatus();
}

absl::Status CompiledGrammar::Probe() const {
  // Classes of bytes no element tells apart: refine {0..255} by each distinct byte set.
  std::vector<int32_t> cls(256, 0);
  {
    absl::flat_hash_set<std::string> seen_sets;
    for (const GrammarElement& e : elems_) {
      if (e.kind != GrammarElement::Kind::kBytes) continue;
      if (!seen_sets.insert(e.bytes.to_string()).second) continue;
      absl::flat_hash_map<std::pair<int32_t, bool>, int32_t> remap;
      for (int b = 0; b < 256; ++b) {
        cls[b] = remap.try_emplace({cls[b], e.bytes.test(b)}, static_cast<int32_t>(remap.size()))
                     .first->second;
      }
      if (remap.size() == 256) break;
    }
  }
  std::vector<uint8_t> reps;
  {
    std::vector<bool> have(256, false);
    for (int b = 0; b < 256; ++b) {
      if (!have[cls[b]]) {
        have[cls[b]] = true;
        reps.push_back(static_cast<uint8_t>(b));
      }
    }
  }
  absl::StatusOr<Stacks> initial = InitialStacks();
  if (!initial.ok()) return initial.status();
  // Breadth first, so the bytes named in a refusal are a shortest way there.
  std::vector<std::pair<Stacks, std::string>> queue;
  absl::flat_hash_set<std::string> seen;
  seen.insert(StacksKey(*initial));
  queue.emplace_back(*std::move(initial), "");
  Stacks next;
  int64_t work = 0;
  for (size_t q = 0; q < queue.size() && work < kAmbiguityProbeWork; ++q) {
    for (uint8_t b : reps) {
      const std::string bytes = queue[q].second + static_cast<char>(b);
      absl::Status st =
          Advance(queue[q].first, b, &next,
                  absl::StrCat(" after the bytes \"", absl::CHexEscape(bytes), "\""), &work);
      if (!st.ok()) return st;
      if (next.empty() || queue.size() >= static_cast<size_t>(kAmbiguityProbeStates) ||
          !seen.insert(StacksKey(next)).second) {
        continue;
      }
      queue.emplace_back(std::move(next), bytes);
      next = Stacks();
    }
  }
  return absl::OkStatus();
}

// The trie walk. Stacks are linked frames in an arena: frame {pos, parent}; a head is a
// frame whose pos is a byte set. Frames are hash-consed (one frame per {pos, parent}), so
// equal stacks are one frame and duplicate heads are dropped: the heads at a trie node are
// the distinct parse stacks there. Frames made below a trie node are dropped when the
// walk leaves it (the arena is cut back), so the walk allocates little in steady state.
struct CompiledGrammar::Walker {
  struct Frame {
    int32_t pos;
    int32_t parent;  // -1: the bottom (below it the root rule is complete)
  };
  const CompiledGrammar& g;
  const TokenVocabulary& vocab;
  absl::Span<uint32_t> mask;
  std::vector<Frame> frames;
  absl::flat_hash_map<uint64_t, int32_t> interned;  // Key(pos, parent) -> frame
  // The {pos, parent} expanded for the current trie edge: each expands once (nullable
  // alternatives reach one point by many paths), so each head is added once.
  absl::flat_hash_set<uint64_t> visited;
  std::vector<std::vector<int32_t>> heads_by_depth;
  std::vector<std::pair<int32_t, int32_t>> work;
  int64_t steps = 0;
  absl::Status error;

  static uint64_t Key(int32_t pos, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) |
           static_cast<uint32_t>(parent);
  }

  int32_t NewFrame(int32_t pos, int32_t parent) {
    auto [it, inserted] =
        interned.try_emplace(Key(pos, parent), static_cast<int32_t>(frames.size()));
    if (inserted) frames.push_back(Frame{pos, parent});
    return it->second;
  }

  void CutBack(size_t mark) {
    for (size_t i = mark; i < frames.size(); ++i) {
      interned.erase(Key(frames[i].pos, frames[i].parent));
    }
    frames.resize(mark);
  }

  // From position `pos` with caller frame `parent`, adds the heads reachable without a
  // byte to `heads` (those not visited yet for this edge); sets *complete when the root
  // rule can end here. Sets `error` past kMaxMaskWork steps.
  void ExpandFrom(int32_t pos, int32_t parent, std::vector<int32_t>* heads, bool* complete) {
    work.clear();
    work.emplace_back(pos, parent);
    while (!work.empty()) {
      if (++steps > kMaxMaskWork) {
        error = TooAmbiguous(
            absl::StrCat("a token mask takes more than ", kMaxMaskWork, " expansion steps"));
        return;
      }
      auto [p, parent_frame] = work.back();
      work.pop_back();
      if (!visited.insert(Key(p, parent_frame)).second) continue;
      const GrammarElement& e = g.elems_[p];
      if (e.kind == GrammarElement::Kind::kBytes) {
        heads->push_back(NewFrame(p, parent_frame));
        continue;
      }
      if (e.rule < 0) {
        if (parent_frame < 0) {
          *complete = true;
        } else {
          work.emplace_back(frames[parent_frame].pos, frames[parent_frame].parent);
        }
        continue;
      }
      int32_t ret = g.IsEnd(p + 1) ? parent_frame : NewFrame(p + 1, parent_frame);
      for (int32_t start : g.rule_starts_[e.rule]) work.emplace_back(start, ret);
    }
  }

  void Allow(int32_t trie_node) {
    for (int32_t id : vocab.trie_tokens(trie_node)) mask[id >> 5] |= 1u << (id & 31);
  }

  // Visits the children of trie node `t`, whose stacks are heads_by_depth[depth]. Stops
  // at the first error.
  void Walk(int32_t t, size_t depth) {
    const auto& trie = vocab.trie();
    if (heads_by_depth.size() <= depth + 1) heads_by_depth.resize(depth + 2);
    for (int32_t c = t + 1; c < trie[t].end; c = trie[c].end) {
      const uint8_t byte = trie[c].byte;
      const size_t mark = frames.size();
      std::vector<int32_t>& next = heads_by_depth[depth + 1];
      next.clear();
      visited.clear();
      bool complete = false;
      for (int32_t h : heads_by_depth[depth]) {
        const Frame f = frames[h];
        if (g.elems_[f.pos].bytes.test(byte)) ExpandFrom(f.pos + 1, f.parent, &next, &complete);
        if (!error.ok()) return;
      }
      if (static_cast<int64_t>(next.size()) > kMaxLiveStacks) {
        error = TooAmbiguous(absl::StrCat(next.size(), " parse stacks alive at once (at most ",
                                          kMaxLiveStacks, ")"));
        return;
      }
      if (next.empty() && !complete) {
        CutBack(mark);
        continue;
      }
      Allow(c);
      if (!next.empty()) Walk(c, depth + 1);
      if (!error.ok()) return;
      CutBack(mark);
    }
  }
};

absl::Status CompiledGrammar::ComputeMask(const Stacks& stacks,
                                          absl::Span<uint32_t> bitmask) const {
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  Walker w{*this, *vocab_, bitmask};
  w.heads_by_depth.resize(1);
  bool complete = false;
  for (const std::vector<int32_t>& s : stacks) {
    if (s.empty()) {
      complete = true;
      continue;
    }
    int32_t parent = -1;
    for (size_t i = 0; i + 1 < s.size(); ++i) parent = w.NewFrame(s[i], parent);
    w.heads_by_depth[0].push_back(w.NewFrame(s.back(), parent));
  }
  if (!w.heads_by_depth[0].empty()) w.Walk(0, 0);
  if (!w.error.ok()) {
    std::fill(bitmask.begin(), bitmask.end(), 0u);
    return w.error;
  }
  if (complete) {
    for (int32_t id : vocab_->eog_ids()) {
      if (id >= 0 && id < vocab_->size()) bitmask[id >> 5] |= 1u << (id & 31);
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// GrammarMatcher

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  absl::StatusOr<CompiledGrammar::Stacks> initial = grammar_->InitialStacks();
  if (initial.ok()) {
    stacks_ = *std::move(initial);
  } else {
    last_error_ = initial.status();
  }
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  last_error_ = absl::OkStatus();
  CompiledGrammar::Stacks s = stacks_;
  CompiledGrammar::Stacks next;
  for (char c : bytes) {
    last_error_ = grammar_->Advance(s, static_cast<uint8_t>(c), &next);
    if (next.empty()) return false;
    std::swap(s, next);
  }
  stacks_ = std::move(s);
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const TokenVocabulary& vocab = grammar_->vocab();
  if (id < 0 || id >= vocab.size()) return false;
  const std::vector<int32_t>& eog = vocab.eog_ids();
  if (std::find(eog.begin(), eog.end(), id) != eog.end()) return IsComplete();
  const std::string& bytes = vocab.bytes(id);
  if (bytes.empty()) return false;
  return AcceptBytes(bytes);
}

bool GrammarMatcher::IsComplete() const { return !stacks_.empty() && stacks_.front().empty(); }

bool GrammarMatcher::IsTerminated() const { return stacks_.size() == 1 && stacks_[0].empty(); }

absl::Status GrammarMatcher::FillNextTokenBitmask(absl::Span<uint32_t> bitmask) const {
  const CompiledGrammar& g = *grammar_;
  CHECK_EQ(static_cast<int32_t>(bitmask.size()), BitmaskWords(g.vocab().size()));
  std::string key = StacksKey(stacks_);
  {
    absl::MutexLock lock(&g.mu_);
    auto it = g.memo_.find(key);
    if (it != g.memo_.end()) {
      ++g.memo_hits_;
      std::memcpy(bitmask.data(), it->second.data(), bitmask.size() * sizeof(uint32_t));
      return absl::OkStatus();
    }
  }
  if (absl::Status s = g.ComputeMask(stacks_, bitmask); !s.ok()) return s;
  const int64_t bytes = static_cast<int64_t>(bitmask.size() * sizeof(uint32_t) + key.size());
  absl::MutexLock lock(&g.mu_);
  if (g.memo_bytes_ + bytes <= kMaxMaskMemoBytes &&
      g.memo_.try_emplace(std::move(key), bitmask.begin(), bitmask.end()).second) {
    g.memo_bytes_ += bytes;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// GrammarCache

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, int32_t capacity)
    : vocab_(std::move(vocab)), capacity_(std::max(capacity, 1)) {}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(
    std::string_view grammar_text) {
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(std::string(grammar_text));
    if (it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
  }
  // Compile outside the lock: a big grammar must not stall the others' lookups.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> compiled =
      CompiledGrammar::Create(grammar_text, vocab_);
  if (!compiled.ok()) return compiled.status();
  absl::MutexLock lock(&mu_);
  auto it = index_.find(std::string(grammar_text));
  if (it != index_.end()) return it->second->second;  // compiled meanwhile by another caller
  lru_.emplace_front(std::string(grammar_text), *compiled);
  index_[lru_.front().first] = lru_.begin();
  while (static_cast<int32_t>(lru_.size()) > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return *compiled;
}

int64_t GrammarCache::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

}  // namespace folio::structured
