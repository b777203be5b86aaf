#include "common/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "absl/status/status.h"
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
  return std::shared_ptr<const CompiledGrammar>(
      new CompiledGrammar(*std::move(grammar), std::move(vocab)));
}

int64_t CompiledGrammar::num_memoized_masks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(memo_.size());
}

int64_t CompiledGrammar::num_memo_hits() const {
  absl::MutexLock lock(&mu_);
  return memo_hits_;
}

void CompiledGrammar::Expand(std::vector<int32_t> stack, Stacks* out) const {
  std::vector<std::vector<int32_t>> work;
  work.push_back(std::move(stack));
  while (!work.empty()) {
    std::vector<int32_t> s = std::move(work.back());
    work.pop_back();
    while (true) {
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
      // Call: the caller resumes after the reference; a call in tail position leaves
      // no frame, so right recursion keeps the stack flat.
      s.back() = p + 1;
      if (IsEnd(p + 1)) s.pop_back();
      const std::vector<int32_t>& starts = rule_starts_[e.rule];
      for (size_t i = 1; i < starts.size(); ++i) {
        std::vector<int32_t> t = s;
        t.push_back(starts[i]);
        work.push_back(std::move(t));
      }
      s.push_back(starts[0]);
    }
  }
}

CompiledGrammar::Stacks CompiledGrammar::InitialStacks() const {
  Stacks out;
  for (int32_t start : rule_starts_[grammar_.root()]) Expand({start}, &out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CompiledGrammar::Stacks CompiledGrammar::Advance(const Stacks& stacks, uint8_t byte) const {
  Stacks out;
  for (const std::vector<int32_t>& s : stacks) {
    if (s.empty() || !elems_[s.back()].bytes.test(byte)) continue;
    std::vector<int32_t> t = s;
    t.back() += 1;
    Expand(std::move(t), &out);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The trie walk. Stacks are linked frames in an arena: frame {pos, parent}; a head is a
// frame whose pos is a byte set. Frames made below a trie node are dropped when the walk
// leaves it (the arena is cut back), so the walk allocates nothing in steady state.
struct CompiledGrammar::Walker {
  struct Frame {
    int32_t pos;
    int32_t parent;  // -1: the bottom (below it the root rule is complete)
  };
  const CompiledGrammar& g;
  const TokenVocabulary& vocab;
  absl::Span<uint32_t> mask;
  std::vector<Frame> frames;
  std::vector<std::vector<int32_t>> heads_by_depth;
  std::vector<std::pair<int32_t, int32_t>> work;

  int32_t NewFrame(int32_t pos, int32_t parent) {
    frames.push_back(Frame{pos, parent});
    return static_cast<int32_t>(frames.size()) - 1;
  }

  // From position `pos` with caller frame `parent`, adds the heads reachable without a
  // byte to `heads`; sets *complete when the root rule can end here.
  void ExpandFrom(int32_t pos, int32_t parent, std::vector<int32_t>* heads, bool* complete) {
    work.clear();
    work.emplace_back(pos, parent);
    while (!work.empty()) {
      auto [p, parent_frame] = work.back();
      work.pop_back();
      const GrammarElement& e = g.elems_[p];
      if (e.kind == GrammarElement::Kind::kBytes) {
        bool seen = false;
        for (int32_t h : *heads) {
          if (frames[h].pos == p && frames[h].parent == parent_frame) {
            seen = true;
            break;
          }
        }
        if (!seen) heads->push_back(NewFrame(p, parent_frame));
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

  // Visits the children of trie node `t`, whose stacks are heads_by_depth[depth].
  void Walk(int32_t t, size_t depth) {
    const auto& trie = vocab.trie();
    if (heads_by_depth.size() <= depth + 1) heads_by_depth.resize(depth + 2);
    for (int32_t c = t + 1; c < trie[t].end; c = trie[c].end) {
      const uint8_t byte = trie[c].byte;
      const size_t mark = frames.size();
      std::vector<int32_t>& next = heads_by_depth[depth + 1];
      next.clear();
      bool complete = false;
      for (int32_t h : heads_by_depth[depth]) {
        const Frame f = frames[h];
        if (g.elems_[f.pos].bytes.test(byte)) ExpandFrom(f.pos + 1, f.parent, &next, &complete);
      }
      if (next.empty() && !complete) {
        frames.resize(mark);
        continue;
      }
      Allow(c);
      if (!next.empty()) Walk(c, depth + 1);
      frames.resize(mark);
    }
  }
};

void CompiledGrammar::ComputeMask(const Stacks& stacks, absl::Span<uint32_t> bitmask) const {
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  Walker w{*this, *vocab_, bitmask, {}, {}, {}};
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
  if (complete) {
    for (int32_t id : vocab_->eog_ids()) {
      if (id >= 0 && id < vocab_->size()) bitmask[id >> 5] |= 1u << (id & 31);
    }
  }
}

// ---------------------------------------------------------------------------------------
// GrammarMatcher

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->InitialStacks()) {}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  CompiledGrammar::Stacks s = stacks_;
  for (char c : bytes) {
    s = grammar_->Advance(s, static_cast<uint8_t>(c));
    if (s.empty()) return false;
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

void GrammarMatcher::FillNextTokenBitmask(absl::Span<uint32_t> bitmask) const {
  const CompiledGrammar& g = *grammar_;
  CHECK_EQ(static_cast<int32_t>(bitmask.size()), BitmaskWords(g.vocab().size()));
  std::string key;
  for (const std::vector<int32_t>& s : stacks_) {
    for (int32_t p : s) key.append(reinterpret_cast<const char*>(&p), sizeof(p));
    const int32_t sep = -1;
    key.append(reinterpret_cast<const char*>(&sep), sizeof(sep));
  }
  {
    absl::MutexLock lock(&g.mu_);
    auto it = g.memo_.find(key);
    if (it != g.memo_.end()) {
      ++g.memo_hits_;
      std::memcpy(bitmask.data(), it->second.data(), bitmask.size() * sizeof(uint32_t));
      return;
    }
  }
  g.ComputeMask(stacks_, bitmask);
  const int64_t bytes = static_cast<int64_t>(bitmask.size() * sizeof(uint32_t) + key.size());
  absl::MutexLock lock(&g.mu_);
  if (g.memo_bytes_ + bytes <= kMaxMaskMemoBytes &&
      g.memo_.try_emplace(std::move(key), bitmask.begin(), bitmask.end()).second) {
    g.memo_bytes_ += bytes;
  }
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
