// Vocab: the data a SentencePiece-style tokenizer needs, independent of where it came from
// (a llama2.c tokenizer file, a GGUF file's tokenizer.ggml.* keys, or the cluster's
// GetTokenizer RPC). Plain value type; thread-compatible.
#ifndef FOLIO_COMMON_TOKENIZER_VOCAB_H_
#define FOLIO_COMMON_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

namespace folio {

// Token types, numbered as SentencePiece and GGUF number them.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  std::vector<std::string> pieces;  // [vocab_size]; "▁" (U+2581) stands for a space
  std::vector<float> scores;        // [vocab_size]; merge priority, higher merges first
  std::vector<TokenType> types;     // [vocab_size]
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;
  bool add_bos = true;           // prepend BOS when encoding a prompt
  bool add_dummy_prefix = true;  // prepend a space before encoding, as SentencePiece does
  // The model's chat template (GGUF tokenizer.chat_template, Jinja source); empty: none.
  // Carried for the frontend's chat API; encoding never reads it.
  std::string chat_template;
  // Further templates by name (GGUF tokenizer.chat_template.<name>, e.g. "tool_use"), in
  // file order.
  std::vector<std::pair<std::string, std::string>> named_chat_templates;

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
};

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_VOCAB_H_
