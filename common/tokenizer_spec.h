// The Vocab a TokenizerSpec (the worker's vocabulary on the wire, model.proto) describes:
// what the frontend builds its tokenizer from, and the scheduler its structured-output
// vocabulary. A free function; thread-safe.
#ifndef FOLIO_COMMON_TOKENIZER_SPEC_H_
#define FOLIO_COMMON_TOKENIZER_SPEC_H_

#include "absl/status/statusor.h"
#include "common/tokenizer/vocab.h"
#include "folio/internal/v1/model.pb.h"

namespace folio {

// InvalidArgument when pieces, scores and types differ in length, a type is outside 1..6,
// the kind is unknown or the merges do not come in pairs.
absl::StatusOr<Vocab> VocabFromSpec(const folio::internal::v1::TokenizerSpec& spec);

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_SPEC_H_
