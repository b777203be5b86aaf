// BpeModel: byte-level BPE merging (GPT-2, Llama 3, Qwen, ...) for one pre-tokenized
// word at a time.
//
// A word arrives in its byte-mapped form (byte_unicode.h). It starts as one symbol per
// character; the adjacent pair whose merge has the lowest rank (its index in the merge
// list) is merged, ties going to the leftmost pair, until no adjacent pair has a merge.
// With `ignore_merges`, a word that is a vocabulary entry as a whole is emitted at once.
// A symbol left that is not an entry (a character the vocabulary lacks) becomes the
// entries for its single bytes where they exist, and nothing otherwise, as in llama.cpp.
//
// Immutable after Create(); thread-safe.
#ifndef FOLIO_COMMON_TOKENIZER_BPE_H_
#define FOLIO_COMMON_TOKENIZER_BPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace folio {

// Whether a word found whole in the vocabulary skips merging (Llama 3's rule).
enum class IgnoreMerges { kNo, kYes };

class BpeModel {
 public:
  // `pieces` are the vocabulary entries by id (byte-mapped for normal tokens; a later
  // duplicate of an entry wins the lookup, as in llama.cpp); `merges` are (left id,
  // right id) pairs by rank. InvalidArgument, naming the merge, when an id is out of
  // range or the joined piece is not an entry. A repeated pair keeps its first rank.
  static absl::StatusOr<BpeModel> Create(const std::vector<std::string>& pieces,
                                         const std::vector<std::pair<int32_t, int32_t>>& merges,
                                         IgnoreMerges ignore_merges);

  // Appends the ids of byte-mapped `word` to `ids`.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  // The id of an exact entry, or -1.
  int32_t Find(std::string_view piece) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  BpeModel() = default;
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  absl::flat_hash_map<std::string, int32_t> piece_to_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // Key(left, right) -> merge
  bool ignore_merges_ = false;
};

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_BPE_H_
