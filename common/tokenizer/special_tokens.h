// Special tokens: finding control, user-defined and unknown tokens in text before it is
// pre-tokenized, and the set of tokens that end generation.
//
// Splitting follows llama.cpp (tokenizer_st_partition) and Hugging Face tokenizers'
// default: special tokens are matched longest first; each one splits every stretch of
// plain text left by the longer ones at each of its occurrences, left to right. With
// ParseSpecial::kNo only user-defined tokens are matched (control and unknown tokens in
// the text are plain text), as both libraries do. A token in Vocab::rstrip_ids also
// takes the ASCII whitespace that follows it (it is dropped from the text), one in
// Vocab::lstrip_ids the whitespace before it (within the same stretch of plain text).
//
// SpecialTokenSplitter is immutable after construction and thread-safe.
#ifndef FOLIO_COMMON_TOKENIZER_SPECIAL_TOKENS_H_
#define FOLIO_COMMON_TOKENIZER_SPECIAL_TOKENS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/vocab.h"

namespace folio {

// Whether control (and unknown) tokens written in the text are recognized as tokens.
enum class ParseSpecial { kNo, kYes };

// One stretch of the text: a special token (id >= 0) or plain text (id == -1).
struct TextFragment {
  std::string_view text;
  int32_t id = -1;
};

class SpecialTokenSplitter {
 public:
  SpecialTokenSplitter() = default;
  // Collects the control, user-defined and unknown tokens of `vocab` with non-empty
  // pieces, longest first (ties: lower id first).
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Splits `text` into fragments, in order, covering it exactly.
  void Split(std::string_view text, ParseSpecial parse_special,
             std::vector<TextFragment>* fragments) const;

  size_t num_tokens() const { return tokens_.size(); }

 private:
  struct Special {
    std::string piece;
    int32_t id;
    bool control;  // control or unknown: only matched with ParseSpecial::kYes
    bool rstrip;   // drops the whitespace after a match
    bool lstrip;   // drops the whitespace before a match
  };
  std::vector<Special> tokens_;
};

// The end-of-generation tokens of `vocab`, sorted and unique, by llama.cpp's rules: the
// EOS token, `extra_ids` (end-of-turn, end-of-message, FIM ids the file names;
// out-of-range or negative ones are skipped), the first fill-in-the-middle pad,
// repository and file-separator tokens found by their text (<|fim_pad|>, <PAD>,
// <|repo_name|>, <|file_sep|>, ...), and every token whose text is one of the known
// end-of-turn markers (<|eot_id|>, <|eom_id|>, <|im_end|>, <|end|>, <end_of_turn>,
// <|endoftext|>, <|end_of_text|>, </s>, <EOT>, ...), except <|end|> when <|return|> and
// <|call|> exist (gpt-oss). Tokens found by their text are made control tokens in
// `vocab`, as llama.cpp does, so they decode to nothing and are matched as special text
// only with ParseSpecial::kYes.
std::vector<int32_t> FindEndOfGenerationIds(Vocab* vocab, const std::vector<int32_t>& extra_ids);

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_SPECIAL_TOKENS_H_
