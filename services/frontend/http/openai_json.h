// OpenAI wire format: request bodies of /v1/completions and /v1/chat/completions parsed
// into native types (GenerateInput plus the OpenAI-only fields), and the response, chunk
// and error objects built from a finished or streaming generation. No HTTP, no gRPC.
//
// Parsing checks types and shapes only ("temperature must be a number"); the value rules
// (ranges, lengths, the context limit) are RequestValidator's, the same as on the gRPC API,
// so the same input gets the same message either way.
//
// Free functions; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_JSON_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "services/frontend/chat/chat_template.h"
#include "services/frontend/chat/tool_call_parser.h"
#include "services/frontend/request_validator.h"

namespace folio::frontend::openai {

enum class Endpoint { kCompletions, kChatCompletions };

// tool_choice: "auto" (the default), "none", "required", or one named function
// ({"type": "function", "function": {"name": ...}}).
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction: the name
};

// One parsed request of either endpoint.
// One prompt of a completions request's list: text or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
};

// The most prompts one completions request may list.
inline constexpr size_t kMaxPrompts = 128;

struct Request {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // empty when the body names none
  // Prompt (completions: text or token ids) and sampling, as the gRPC API takes them. For
  // chat, the prompt is filled in later from `messages` and the chat template.
  GenerateInput input;
  // completions: a list of several prompts (strings or token-id lists), each run with the
  // request's sampling and n, prompt k's choices numbered k * n ...; then input's own
  // prompt is unused. Empty for one prompt.
  std::vector<PromptInput> prompts;
  std::vector<ChatMessage> messages;  // chat only
  // chat only: everything the template renders (chat_template_input.h), messages with
  // tool_calls and tool results, tools, chat_template_kwargs. messages[i].message is
  // chat.messages[i].
  ChatInput chat;
  bool add_generation_prompt = true;  // chat only (a vLLM extension)
  // chat only: whether tools were given (a non-empty list), and how they may be called.
  bool has_tools = false;
  nlohmann::json tools;  // as sent (null when absent)
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool echo = false;                  // completions: the prompt opens the text
};

// Parses a request body. InvalidArgument naming the field for malformed JSON, a wrong
// type, an unsupported feature (suffix, best_of > n), more than kMaxPrompts prompts or a missing
// prompt / messages; for a tool_choice that is not one of its forms, that needs tools when
// none are given, or names a function that is not in tools; for tool_choice or
// parallel_tool_calls on /v1/completions. presence_penalty, frequency_penalty, logit_bias ({"token id": bias})
// and the vLLM extensions repetition_penalty and min_tokens go to GenerateInput.
absl::StatusOr<Request> ParseRequest(Endpoint endpoint, std::string_view body);

// A token as the response reports it.
struct TokenOut {
  int32_t id = 0;
  std::string text;  // TokenDisplayText
  std::optional<float> logprob;
  std::vector<std::pair<std::string, float>> top_logprobs;  // text, logprob
};

// What one choice gained since the last chunk.
struct ChoiceDelta {
  int32_t index = 0;
  std::string text;
  std::vector<TokenOut> tokens;
  // "stop" / "length" / "tool_calls" on the choice's last delta, else empty.
  std::string finish_reason;
  // Chat with tool-call parsing: the calls' deltas (streamed as OpenAI's delta.tool_calls);
  // in the non-streamed response each entry is a whole call (id, name, all arguments).
  std::vector<ToolCallDelta> tool_calls;
  // Chat with a reasoning parser (reasoning_parser.h): the reasoning, apart from `text`
  // (OpenAI-compatible servers' message.reasoning_content / delta.reasoning_content).
  std::string reasoning;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  // Chat with a reasoning parser: the completion's tokens that were reasoning
  // (completion_tokens_details.reasoning_tokens, as OpenAI's reasoning models report it).
  std::optional<int32_t> reasoning_tokens;
};

// Fields every response object of one request shares.
struct ResponseHeader {
  std::string id;      // "cmpl-<request id>" or "chatcmpl-<request id>"
  int64_t created = 0; // Unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  bool logprobs = false;  // the request asked for log-probs
};

// The non-streamed response: one choice per entry of `choices` (each holding the whole
// text and every token).
nlohmann::json BuildResponse(const ResponseHeader& h, const std::vector<ChoiceDelta>& choices,
                             const Usage& usage);

// A streamed chunk with the given deltas. `first` adds the chat role ("assistant").
// `usage` (when include_usage was asked) is null on every chunk but the last one, which has
// no choices and the usage.
nlohmann::json BuildChunk(const ResponseHeader& h, const std::vector<ChoiceDelta>& deltas,
                          bool include_usage_field);
nlohmann::json BuildUsageChunk(const ResponseHeader& h, const Usage& usage);
// The chat stream's first chunk: role "assistant", empty content, for each choice.
nlohmann::json BuildRoleChunk(const ResponseHeader& h, int32_t n, bool include_usage_field);

// OpenAI's error object and the HTTP status for `status` (400 for InvalidArgument,
// 401 Unauthenticated, 404 NotFound, 413 (see ErrorBodyTooLarge), 429 ResourceExhausted,
// 501 Unimplemented, 503 Unavailable, 504 DeadlineExceeded, 500 otherwise). `param`
// names the request field the message starts with, when it does.
struct HttpError {
  int http_status = 500;
  nlohmann::json body;
};
HttpError ErrorFromStatus(const absl::Status& status);
HttpError MakeError(int http_status, absl::string_view type, absl::string_view code,
                    absl::string_view message);

// "data: <json>\n\n", and the stream's end.
std::string SseEvent(const nlohmann::json& data);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace folio::frontend::openai

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_OPENAI_JSON_H_
