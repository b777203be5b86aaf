// Loading the tokenizer file of llama2.c (tokenizer.bin, tok512.bin, ...).
//
// Format, little-endian: int32 max_token_length, then for each token: float32 score,
// int32 byte length, that many bytes (no terminator). The file does not store the
// token count; the caller passes the model's vocab_size.
//
// The loaded Vocab follows the same conventions as every other source, so the
// Tokenizer sees one convention:
//   - ids 0, 1, 2 are <unk> (kUnknown), <s> and </s> (kControl); llama2.c stores
//     BOS/EOS as "\n<s>\n" and "\n</s>\n", which become "<s>" and "</s>";
//   - pieces of the form <0xXX> are byte tokens (kByte);
//   - everything else is kNormal, with the plain spaces llama2.c's export writes
//     turned back into "▁" (U+2581);
//   - bos_id 1, eos_id 2, unk_id 0, add_bos and add_dummy_prefix true.
//
// Stateless free function; thread-safe.
#ifndef FOLIO_COMMON_TOKENIZER_LLAMA2C_VOCAB_H_
#define FOLIO_COMMON_TOKENIZER_LLAMA2C_VOCAB_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/vocab.h"

namespace folio {

// Reads exactly `vocab_size` tokens from the file at `path`.
// NotFound when the file cannot be opened; InvalidArgument when vocab_size < 3, or
// the file is truncated, has a negative or over-long token length, a NaN score, or
// bytes left over after the last token (usually a wrong vocab_size). Messages name
// the file, the token index and the byte offset.
absl::StatusOr<Vocab> LoadLlama2cVocab(const std::string& path, int32_t vocab_size);

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_LLAMA2C_VOCAB_H_
