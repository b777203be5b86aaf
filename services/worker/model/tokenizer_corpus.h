// Test helper: the tokenizer corpus of the BPE issue, shared by the tests that compare
// Folio's tokenizers with a reference (llama.cpp's llama_tokenize, Hugging Face's
// tokenizers): multilingual text, code, emoji with joiners and flags, whitespace runs,
// numbers, NBSP/ZWSP/soft hyphen, combining marks. Test-only.
#ifndef FOLIO_SERVICES_WORKER_MODEL_TOKENIZER_CORPUS_H_
#define FOLIO_SERVICES_WORKER_MODEL_TOKENIZER_CORPUS_H_

#include <string>
#include <vector>

#include "common/tokenizer/vocab.h"

namespace folio::worker::testing {

// The corpus texts.
const std::vector<std::string>& Corpus();

// Corpus texts with the vocabulary's own special tokens written inside: the first few
// control and user-defined tokens, and the usual markers where the vocabulary has them.
std::vector<std::string> SpecialTexts(const Vocab& v);

}  // namespace folio::worker::testing

#endif  // FOLIO_SERVICES_WORKER_MODEL_TOKENIZER_CORPUS_H_
