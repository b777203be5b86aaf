// ParseJsonBody: a request body parsed into nlohmann::json, with errors that name where
// they are. A number too large for a double ("max_tokens": 1e309) is InvalidArgument
// naming its field ("max_tokens is out of range: ..."), as is malformed JSON (with its
// byte offset); never an exception.
//
// Free function; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_JSON_BODY_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_JSON_BODY_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace folio::frontend::openai {

// Parses `text`; the path of a bad number is written as in messages ("a.b[2].c").
absl::StatusOr<nlohmann::json> ParseJsonBody(std::string_view text);

}  // namespace folio::frontend::openai

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_JSON_BODY_H_
