// The chat fields of a /v1/chat/completions body turned into what a chat template renders
// (ChatInput): messages in the shapes clients send them, tool definitions, and
// chat_template_kwargs.
//
//   messages[i]: {"role": string, "content": string | null | [text parts], ...}. Text parts
//     ({"type": "text", "text": ...}) are joined into one string (templates written for
//     Hugging Face mostly take string content); other part types are refused. Assistant
//     "tool_calls" must be [{"id"?, "type"?: "function", "function": {"name": string,
//     "arguments": string | object}}]; arguments sent as JSON text (OpenAI's shape) become
//     the object they encode, as templates index them (vLLM and transformers do the same).
//     Tool results are {"role": "tool", "tool_call_id"?: string, "content": ...}. Every other
//     field (name, reasoning_content...) is passed to the template as sent.
//   tools: [{"type": "function", "function": {"name": string, ...}}], passed as sent.
//   chat_template_kwargs: an object of extra template variables (e.g. enable_thinking).
//
// Objects keep the key order of the request, as Python's json.loads keeps it.
//
// Free functions; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_CHAT_CHAT_TEMPLATE_INPUT_H_
#define FOLIO_SERVICES_FRONTEND_CHAT_CHAT_TEMPLATE_INPUT_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "services/frontend/chat/chat_template.h"

namespace folio::frontend {

// Parses `body` (a JSON object). InvalidArgument naming the field ("messages[1].tool_calls[0]
// .function.name must be a string") for a shape it does not take. add_generation_prompt is
// read too (default true).
absl::StatusOr<ChatInput> ParseChatInput(std::string_view body);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CHAT_CHAT_TEMPLATE_INPUT_H_
