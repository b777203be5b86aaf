// Reads a GGUF file's tokenizer.ggml.* keys into a Vocab, for both tokenizer kinds:
// "llama" (SentencePiece BPE) and "gpt2" (byte-level BPE with merges and a named
// pre-tokenizer), following llama.cpp's reading of the same keys (llama_vocab::load).
//
// Free functions; safe to call from any thread.
#ifndef FOLIO_SERVICES_WORKER_MODEL_GGUF_VOCAB_H_
#define FOLIO_SERVICES_WORKER_MODEL_GGUF_VOCAB_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/tokenizer/vocab.h"
#include "services/worker/model/gguf.h"

namespace folio::worker {

// The vocabulary of `gguf`, validated: Tokenizer::Create accepts it. Errors name the
// file and the key: Unimplemented for a tokenizer.ggml.model other than "llama" or
// "gpt2"; InvalidArgument for a missing or ill-typed key, an unknown
// tokenizer.ggml.pre (with the supported list), a merge that names a piece not in the
// vocabulary, a special-token id outside it. A "gpt2" file without tokenizer.ggml.pre
// gets the "default" pre-tokenizer with a warning, as in llama.cpp.
absl::StatusOr<Vocab> ReadGgufVocab(const GgufFile& gguf);

// Maps and parses the GGUF file at `path` (a model or a vocab-only file, such as
// llama.cpp's models/ggml-vocab-*.gguf) and reads its vocabulary.
absl::StatusOr<Vocab> LoadGgufVocab(const std::string& path);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_MODEL_GGUF_VOCAB_H_
