// POST /tokenize and POST /detokenize on the HTTP API, in vLLM's shapes (UIs count tokens
// with them):
//
//   /tokenize    {"prompt": "text"} or {"messages": [...], "add_generation_prompt": true}
//                with "add_special_tokens" (default true: the model's own BOS rule for a
//                prompt; messages keep what the chat template writes)
//                -> {"tokens": [ids], "count": n, "max_model_len": m}
//   /detokenize  {"tokens": [ids]} -> {"prompt": "text"}
//
// Plain functions of the request body and the model: the server routes to them. Errors are
// InvalidArgument naming the field.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_TOKENIZE_API_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_TOKENIZE_API_H_

#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "services/frontend/cluster_info.h"
#include "services/frontend/chat/chat_template.h"

namespace folio::frontend {

// The chat template to render messages with (the server's cached one).
using TemplateSource = std::function<absl::StatusOr<std::shared_ptr<const ChatTemplate>>()>;

absl::StatusOr<nlohmann::json> TokenizeBody(const ModelContext& model, std::string_view body,
                                            const TemplateSource& chat_template);
absl::StatusOr<nlohmann::json> DetokenizeBody(const ModelContext& model, std::string_view body);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_TOKENIZE_API_H_
