// Tokenizer: encoding and decoding for both vocabulary kinds (vocab.h): SentencePiece
// BPE as Llama 2 models use it, and byte-level BPE (GPT-2, Llama 3, Qwen, Mistral-Nemo,
// DeepSeek, ...) as llama.cpp implements it.
//
// Both kinds first cut the text at special tokens (special_tokens.h): user-defined
// tokens always, control tokens when ParseSpecial::kYes. Plain stretches are encoded as
// below; a SentencePiece stretch gets the dummy-prefix space when it starts the text or
// follows a special token, as in llama.cpp.
//
// Byte-level BPE: each stretch is cut into words by the vocabulary's pre-tokenizer
// (pre_tokenizer.h), each word is byte-mapped and merged by rank (bpe.h). Decoding maps
// each normal token's piece back to its bytes; runs of such bytes are decoded as UTF-8
// with U+FFFD for each byte that is not part of a valid character. User-defined tokens
// decode to their text, control tokens to nothing. No space clean-up is applied, so
// decode(encode(text)) == text.
//
// SentencePiece encoding: spaces become "▁" (U+2581), a dummy "▁" is prepended when the vocab asks
// for it (where: see SentencePiecePrefix), the text is split into UTF-8 characters, and
// adjacent symbols are merged
// greedily, always taking the pair whose merged piece has the highest score (ties go
// to the leftmost pair). Symbols that are not pieces fall back to byte tokens <0xXX>,
// or to the unknown token when the vocab has no byte tokens. This reproduces
// libsentencepiece's BPE model for vocabularies of normal, control, unknown and byte
// pieces (Llama 2, llama2.c). Unused pieces are never produced (SentencePiece re-splits
// them).
//
// SentencePiece decoding rules (see Decode):
//   - "▁" becomes a space; a byte token contributes its raw byte, and each run of
//     consecutive byte tokens is decoded as UTF-8 with every byte that is not part
//     of a valid character replaced by U+FFFD;
//   - control tokens (BOS, EOS, ...) decode to nothing; the unknown token to " ⁇ ";
//   - the first visible token after a BOS loses one leading space if its piece
//     starts with "▁" (the dummy prefix), as in SentencePiece and llama2.c.
//     Unlike SentencePiece, a sequence that does not start with BOS keeps its leading
//     space, so decoded continuations of a prompt join up correctly.
//
// A Tokenizer is immutable after Create() and thread-safe; copies share nothing.
#ifndef FOLIO_COMMON_TOKENIZER_TOKENIZER_H_
#define FOLIO_COMMON_TOKENIZER_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/bpe.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/special_tokens.h"
#include "common/tokenizer/vocab.h"

namespace folio {

// Where a SentencePiece vocabulary prepends its dummy "▁", from Vocab::pre_tokenizer and
// Vocab::add_dummy_prefix. A stretch is a piece of plain text between special tokens.
//   "default": llama.cpp's rule (GGUF add_space_prefix; a tokenizer.json Prepend("▁")
//       normalizer): every stretch at the start of the text or after a special token,
//       whether or not it starts with a space; only when add_dummy_prefix.
//   "metaspace-always": Hugging Face's Metaspace pre-tokenizer, prepend_scheme "always":
//       every stretch that does not already start with a space (or a literal "▁").
//   "metaspace-first": prepend_scheme "first" (tokenizer.json files converted with
//       legacy false: Mistral v0.3, newer Llama/Mistral conversions): only the stretch that
//       starts the text, and only when it does not already start with a space or "▁";
//       a stretch after a special token never gets one.
//   "metaspace-never": no dummy prefix.
//   A "-split" suffix (Metaspace split true): the text is cut before every "▁" and each
//   word is merged on its own (no merge joins a symbol to a following "▁...").
// add_dummy_prefix must be false for "metaspace-never*" and true for the other Metaspace
// names; Tokenizer::Create refuses other names and mismatches by name.
struct SentencePiecePrefix {
  enum class Where { kLlamaCpp, kMetaspaceAlways, kMetaspaceFirst, kNever };
  Where where = Where::kLlamaCpp;
  bool split = false;
  // Parses a pre_tokenizer name as above. InvalidArgument naming it otherwise.
  static absl::StatusOr<SentencePiecePrefix> Parse(std::string_view name, bool add_dummy_prefix);
};

// Whether Encode prepends the BOS token.
enum class AddBos {
  kNo,
  kYes,
  kVocabDefault,  // as Vocab::add_bos says
};

// What one token contributes to decoded text on its own, before the context rules of
// Decode (byte runs, the space after BOS) apply.
struct TokenSurface {
  enum class Kind {
    kText,     // normal, user-defined, unused or unknown piece: `text`
    kByte,     // byte-fallback token: `byte`
    kControl,  // BOS, EOS and other control tokens: nothing
    kBytes,    // byte-level BPE normal piece: raw bytes `text`, maybe part of a character
  };
  Kind kind = Kind::kControl;
  std::string_view text;  // kText: the piece with "▁" as " "; kBytes: the raw bytes
  uint8_t byte = 0;       // kByte only
  // kText only: `text` starts with a space that came from "▁", which Decode drops
  // when the token is the first visible one after BOS.
  bool leading_space_strippable = false;
};

class Tokenizer {
 public:
  // Validates `vocab` and builds the lookup tables. InvalidArgument when: the vocab is
  // empty; pieces, scores and types differ in size; bos/eos ids are out of range; an
  // end-of-generation id is out of range. SentencePiece also: unk is out of range or
  // not of type kUnknown; a normal piece is empty or repeated; a byte piece is not
  // "<0xXX>" or repeats a byte; some but not all 256 byte tokens are present.
  // Byte-level BPE also: unk is neither -1 nor in range; the pre-tokenizer is unknown
  // (the message names it and the supported list); a merge names an id out of range or
  // forms a piece that is not in the vocabulary.
  static absl::StatusOr<Tokenizer> Create(Vocab vocab);

  // Encodes UTF-8 `text`. InvalidArgument naming the byte offset when `text` is not
  // valid UTF-8. The empty string encodes to no tokens (just BOS if requested). With
  // AddBos::kVocabDefault, EOS is appended too when the vocab asks for it.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, AddBos add_bos,
                                              ParseSpecial parse_special) const;
  // As above with ParseSpecial::kNo: control tokens in `text` are plain text.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, AddBos add_bos) const {
    return Encode(text, add_bos, ParseSpecial::kNo);
  }

  // Decodes `ids` by the rules in the file comment. The result is valid UTF-8.
  // OutOfRange naming the position when an id is not in [0, vocab size).
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const;

  // The raw vocabulary piece of `id` ("▁the", "<0x0A>", "<s>").
  // OutOfRange when `id` is not in [0, vocab size).
  absl::StatusOr<std::string_view> TokenToPiece(int32_t id) const;

  // How `id` decodes on its own; see TokenSurface. OutOfRange as TokenToPiece.
  absl::StatusOr<TokenSurface> Surface(int32_t id) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // Every end-of-generation id, sorted (at least eos_id).
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool IsEndOfGeneration(int32_t id) const;
  TokenizerKind kind() const { return vocab_.kind; }
  // Whether unknown characters fall back to byte tokens (all 256 are present).
  bool has_byte_fallback() const { return byte_to_id_[0] >= 0; }

 private:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

  absl::Status BuildTables();
  absl::Status BuildSentencePieceTables();
  absl::Status BuildByteLevelTables();
  // Encodes one plain-text stretch, appending to `ids`.
  void EncodeSentencePiece(std::string_view text, bool dummy_prefix,
                           std::vector<int32_t>* ids) const;
  // Whether the plain stretch `text` gets the dummy prefix (SentencePiecePrefix).
  bool SentencePieceDummyPrefix(std::string_view text, bool text_start,
                                bool after_special) const;
  absl::Status EncodeByteLevel(std::string_view text, std::vector<int32_t>* ids) const;
  // Appends the ids for one symbol left after merging.
  void AppendSymbolIds(std::string_view symbol, std::vector<int32_t>* ids) const;
  absl::Status CheckId(int32_t id) const;

  Vocab vocab_;
  std::vector<int32_t> eog_ids_;  // sorted
  SpecialTokenSplitter special_;
  // Byte-level BPE only; shared by copies (immutable).
  std::shared_ptr<const BpeModel> bpe_;
  std::optional<PreTokenizer> pre_tokenizer_;
  // SentencePiece only.
  SentencePiecePrefix spm_prefix_;
  // Mergeable pieces (normal and user-defined) -> id.
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;
  // [256] byte value -> id of its <0xXX> token; all -1 without byte fallback.
  std::array<int32_t, 256> byte_to_id_;
  // [vocab_size] per-token decoding data. surfaces_[i].text is left empty (the
  // Tokenizer is copyable, so it must not point into texts_); Surface() fills it in.
  std::vector<std::string> texts_;
  std::vector<TokenSurface> surfaces_;
};

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_TOKENIZER_H_
