// Vocab: the data a tokenizer needs, independent of where it came from (a llama2.c
// tokenizer file, a GGUF file's tokenizer.ggml.* keys, or the cluster's GetTokenizer RPC).
// Two kinds: SentencePiece BPE (pieces merged by score, "▁" for spaces, <0xXX> byte
// fallback) and byte-level BPE (pieces written in the GPT-2 byte mapping, merged by the
// rank of an explicit merge list, words cut by a named pre-tokenizer).
// Plain value type; thread-compatible.
#ifndef FOLIO_COMMON_TOKENIZER_VOCAB_H_
#define FOLIO_COMMON_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <string>
#include <utility>
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

// Which algorithm a vocabulary is for; numbered as on the wire (model.proto).
enum class TokenizerKind : int32_t {
  kSentencePiece = 0,  // GGUF tokenizer.ggml.model "llama"
  kByteLevelBpe = 1,   // GGUF tokenizer.ggml.model "gpt2"
};

struct Vocab {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  // [vocab_size]. SentencePiece: "▁" (U+2581) stands for a space. Byte-level BPE: normal
  // pieces are byte-mapped (byte_unicode.h, "Ġ" is a space); control and user-defined
  // pieces are the literal text they match.
  std::vector<std::string> pieces;
  std::vector<float> scores;     // [vocab_size]; SentencePiece merge priority, higher first
  std::vector<TokenType> types;  // [vocab_size]
  int32_t bos_id = 1;
  int32_t eos_id = 2;   // the model's primary end-of-sequence token
  int32_t unk_id = 0;   // -1: none (byte-level BPE vocabularies often have none)
  bool add_bos = true;           // prepend BOS when encoding a prompt
  bool add_eos = false;          // append EOS when encoding a prompt with the defaults
  bool add_dummy_prefix = true;  // SentencePiece: prepend a space before encoding
  // Every token that ends generation, sorted, without repeats: eos_id and, where the
  // model has them, its end-of-turn, end-of-message and the control tokens llama.cpp
  // knows by their text (<|eot_id|>, <|im_end|>, ...). Empty means {eos_id}.
  std::vector<int32_t> eog_ids;
  // Special tokens that swallow the whitespace after them when matched in text (llama.cpp
  // sets this for Phi-3's special tokens by the model's name), sorted.
  std::vector<int32_t> rstrip_ids;
  // Special tokens that swallow the whitespace before them (a tokenizer.json added token
  // with lstrip), sorted.
  std::vector<int32_t> lstrip_ids;
  // Unicode normalization applied to text outside special tokens before pre-tokenizing:
  // "" (none; every GGUF vocabulary) or "NFC" (a tokenizer.json NFC normalizer).
  std::string normalizer;
  // Byte-level BPE only: (left id, right id) by rank, lowest rank merges first.
  std::vector<std::pair<int32_t, int32_t>> merges;
  // Byte-level BPE: the pre-tokenizer name (GGUF tokenizer.ggml.pre).
  // SentencePiece: where the dummy-prefix "▁" goes (tokenizer.h, SentencePiecePrefix):
  // "default" (or ""; every GGUF vocabulary, as llama.cpp: at the start of the text and
  // after every special token, when add_dummy_prefix), or a Hugging Face Metaspace
  // pre-tokenizer "metaspace-{always,first,never}[-split]".
  std::string pre_tokenizer = "default";
  // Byte-level BPE only: a pre-tokenized word found whole in the vocabulary is emitted
  // without merging (Llama 3, Tekken); set from the pre-tokenizer by the loader.
  bool ignore_merges = false;
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
