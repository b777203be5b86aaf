#include "common/tokenizer/bpe.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace folio {
namespace {

absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

size_t CharLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// One symbol of the word being merged, in a doubly linked list over a vector.
// A symbol merged into its left neighbour has length 0.
struct Symbol {
  uint32_t start;
  uint32_t length;
  int32_t id;  // -1: not a vocabulary entry (never merges)
  int32_t prev;
  int32_t next;
};

// A candidate merge of symbols[left] and its right neighbour. Candidates are not removed
// when a neighbour changes; a popped one is stale when either side no longer holds the
// ids it was made from.
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

struct CandidateGreater {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  }
};

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Create(
    const std::vector<std::string>& pieces,
    const std::vector<std::pair<int32_t, int32_t>>& merges, IgnoreMerges ignore_merges) {
  BpeModel m;
  m.ignore_merges_ = ignore_merges == IgnoreMerges::kYes;
  m.piece_to_id_.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    m.piece_to_id_.insert_or_assign(pieces[i], static_cast<int32_t>(i));
  }
  const auto n = static_cast<int32_t>(pieces.size());
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = merges[rank];
    if (left < 0 || left >= n || right < 0 || right >= n) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " (", left, ", ", right,
                                                     ") names an id outside [0, ", n, ")"));
    }
    const std::string joined = pieces[left] + pieces[right];
    const int32_t result = m.Find(joined);
    if (result < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge ", rank, " '", pieces[left], " ", pieces[right], "' forms '",
                       joined, "', which is not in the vocabulary"));
    }
    m.merges_.try_emplace(Key(left, right), Merge{static_cast<int32_t>(rank), result});
  }
  return m;
}

int32_t BpeModel::Find(std::string_view piece) const {
  const auto it = piece_to_id_.find(ToAbsl(piece));
  return it == piece_to_id_.end() ? -1 : it->second;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = Find(word); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    const size_t len =
        std::min(word.size() - pos, CharLength(static_cast<uint8_t>(word[pos])));
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len),
                       Find(word.substr(pos, len)), index - 1, index + 1});
    pos += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateGreater> queue;
  auto maybe_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols[left].id, r = symbols[right].id;
    if (l < 0 || r < 0) return;
    const auto it = merges_.find(Key(l, r));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, right, l, r, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) maybe_add(i, i + 1);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.length == 0 || right.length == 0 || left.next != top.right ||
        left.id != top.left_id || right.id != top.right_id) {
      continue;  // stale
    }
    left.length += right.length;
    left.id = top.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.length = 0;
    maybe_add(left.prev, top.left);
    maybe_add(top.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      ids->push_back(s.id);
      continue;
    }
    for (char c : word.substr(s.start, s.length)) {
      if (const int32_t id = Find(std::string_view(&c, 1)); id >= 0) ids->push_back(id);
    }
  }
}

}  // namespace folio
