// PreTokenizer: splits text into the words that byte-level BPE merges within, by the
// regular expressions a vocabulary's `tokenizer.ggml.pre` names, as llama.cpp defines
// them (src/llama-vocab.cpp, llm_tokenizer_bpe).
//
// A definition is a list of expressions applied in turn: each one splits every piece
// left by the previous one into its matches and the text between them, both kept, so
// the pieces always cover the text exactly. Expressions run on PCRE2 in UTF and UCP mode
// (Unicode classes for \p{..}, \s and \w; lookahead), JIT-compiled where the platform
// allows. A match never reaches outside the piece it is found in; `$` means the end of
// the piece.
//
// A PreTokenizer is immutable after Create() and thread-safe; copies share the compiled
// expressions.
#ifndef FOLIO_COMMON_TOKENIZER_PRE_TOKENIZER_H_
#define FOLIO_COMMON_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace folio {

// What a pre-tokenizer name implies beyond its expressions.
struct PreTokenizerTraits {
  // A word that is a vocabulary entry as a whole is emitted before any merging
  // (Llama 3, Tekken): tiktoken-derived vocabularies need it.
  bool ignore_merges = false;
  // Whether prompts get BOS when the file has no tokenizer.ggml.add_bos_token.
  bool default_add_bos = false;
};

class PreTokenizer {
 public:
  // The name a vocabulary without tokenizer.ggml.pre gets, as in llama.cpp.
  static constexpr std::string_view kDefaultName = "default";

  // Compiles the expressions `name` stands for. InvalidArgument naming `name` and the
  // supported list when it is unknown; Internal if PCRE2 refuses an expression.
  static absl::StatusOr<PreTokenizer> Create(std::string_view name);

  // Every name Create() accepts, sorted.
  static std::vector<std::string> SupportedNames();

  // Appends the words of `text` to `words`, as views into `text`, in order; together
  // they are exactly `text`. `text` must be valid UTF-8 (the caller checks: the matcher
  // runs without re-checking). Internal only if PCRE2 fails at run time.
  absl::Status Split(std::string_view text, std::vector<std::string_view>* words) const;

  const std::string& name() const { return name_; }
  const PreTokenizerTraits& traits() const { return traits_; }

 private:
  struct Compiled;  // the PCRE2 code objects

  PreTokenizer() = default;

  std::string name_;
  PreTokenizerTraits traits_;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_PRE_TOKENIZER_H_
