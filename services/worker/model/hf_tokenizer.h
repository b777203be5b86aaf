// Reads a Hugging Face checkpoint's tokenizer files into a Vocab for one of the engines
// of common/tokenizer: byte-level BPE (the one GGUF "gpt2" vocabularies feed), or
// SentencePiece BPE (GGUF "llama") for a SentencePiece-style tokenizer.json:
//
//  - tokenizer.json, byte-level: model BPE (vocab, merges as "a b" strings or [a, b] pairs,
//    ignore_merges, unk_token; byte_fallback, dropout, subword prefixes and suffixes
//    refused by name); pre_tokenizer ByteLevel (GPT-2's expression) or a Sequence of
//    regex Splits (Isolated) then ByteLevel without its own regex, the expression
//    matched to the named pre-tokenizer that has it (Llama 3's and Qwen2/3's; another
//    is refused quoting it); decoder ByteLevel; normalizer null or NFC (recorded in
//    Vocab::normalizer, which the tokenizer applies to text outside special tokens, as
//    tokenizers does for added tokens with normalized=false); added_tokens: special ->
//    control, else user-defined, rstrip -> Vocab::rstrip_ids, lstrip -> Vocab::lstrip_ids;
//    post_processor TemplateProcessing whose single template starts with a special
//    token -> add_bos with that token.
//  - tokenizer.json, SentencePiece style (Llama 2, TinyLlama, Mistral v0.1/v0.2: the
//    normalizer writes spaces as "▁"): normalizer Prepend("▁") (-> add_dummy_prefix) and
//    Replace(" " -> "▁"), pre_tokenizer null; or (legacy false: Mistral v0.3, newer
//    Llama/Mistral conversions) normalizer null and pre_tokenizer Metaspace("▁",
//    prepend_scheme always/first/never or the older add_prefix_space, split) -> the
//    engine's "metaspace-*" rule (tokenizer.h, SentencePiecePrefix); decoder
//    Replace("▁" -> " ") + ByteFallback + Fuse (+ Strip(" ", 1, 0)), or Metaspace
//    (decoded by the same SentencePiece rules: byte tokens as bytes, where tokenizers'
//    Metaspace decoder prints "<0xXX>"); model BPE with unk_token (kUnknown) and byte_fallback
//    (the 256 "<0xXX>" pieces -> kByte; fuse_unk only with byte_fallback, where no unknown
//    is ever produced). The engine merges by piece score, tokenizers by merge rank: each
//    piece's score is minus the rank of the first merge forming it, and a multi-character
//    piece no merge forms is kUnused (never produced). Vocab::merges stays empty.
//    A Metaspace with a normalizer, another replacement or unknown keys, other
//    normalizer steps and ignore_merges are refused by name.
//  - tokenizer_config.json (optional): bos_token, eos_token (a string or an AddedToken
//    object), add_bos_token, add_eos_token, chat_template (a string, or a list of named
//    templates: "default" becomes chat_template, the others named_chat_templates).
//  - generation_config.json (optional): eos_token_id, one id or a list; every one ends
//    generation (Vocab::eog_ids), with tokenizer_config's eos_token. Nothing is added by
//    the token's text: the folder says what stops, as transformers reads it.
//
// A vocabulary shorter than the model's embedding table is padded with unused
// "[PAD<id>]" tokens, as llama.cpp's converter pads it (PadVocab).
//
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_HF_TOKENIZER_H_
#define FOLIO_SERVICES_WORKER_MODEL_HF_TOKENIZER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/vocab.h"

namespace folio::worker {

// Parses the contents of a tokenizer.json (`name` prefixes errors). The result has no
// BOS/EOS decisions beyond the post-processor's: bos_id is the post-processor's leading
// special token or -1, eos_id -1 (LoadHfVocab settles both; Tokenizer::Create refuses
// -1). InvalidArgument naming the file and key for malformed input; Unimplemented
// naming the key for a model, normalizer, pre-tokenizer or option Folio lacks.
absl::StatusOr<Vocab> ParseHfTokenizerJson(absl::string_view json_text, absl::string_view name);

// Applies tokenizer_config.json's contents to `vocab` (bos/eos/add_bos/chat templates).
absl::Status ApplyHfTokenizerConfig(absl::string_view json_text, absl::string_view name,
                                    Vocab* vocab);

// Applies generation_config.json's contents: its eos_token_id ids join vocab->eog_ids.
absl::Status ApplyHfGenerationConfig(absl::string_view json_text, absl::string_view name,
                                     Vocab* vocab);

// Pads `vocab` with unused tokens to `size` entries; InvalidArgument if it is larger.
absl::Status PadVocab(int32_t size, absl::string_view what, Vocab* vocab);

// Reads tokenizer.json, and tokenizer_config.json and generation_config.json when they
// exist, from the folder `dir`; the result is validated (Tokenizer::Create accepts it).
// Without an eos_token the first generation_config id is EOS (none at all: an error);
// without a BOS (Qwen) the EOS id stands in for it and add_bos is false.
absl::StatusOr<Vocab> LoadHfVocab(const std::string& dir);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_HF_TOKENIZER_H_
