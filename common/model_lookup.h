// The model a binary serves when --model is not given, looked up at run time,
// never through a path fixed at compile time: $FOLIO_MODEL, then
// $FOLIO_MODELS_DIR/stories260K/, then the embedded stories260K beside the
// binary: <bin>/../models/ in an installed tree (./folio install, the images),
// <bin>/../../models/ in a checkout's build/bin/.
#ifndef FOLIO_COMMON_MODEL_LOOKUP_H_
#define FOLIO_COMMON_MODEL_LOOKUP_H_

#include <string>

#include "absl/status/statusor.h"

namespace folio {

// `flag_value` when not empty; otherwise the first of the places above that
// holds a model. NOT_FOUND, naming every place looked at, when none does.
absl::StatusOr<std::string> ResolveModelPath(const std::string& flag_value);

}  // namespace folio

#endif  // FOLIO_COMMON_MODEL_LOOKUP_H_
