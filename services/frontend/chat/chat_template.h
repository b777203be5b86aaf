// ChatTemplate: turns chat messages into the prompt text the model was trained on, with
// the model's own template (GGUF tokenizer.chat_template, run by the Jinja subset in
// jinja.h) or, when the model has none, kDefaultChatTemplate:
//
//   system: You are terse.
//   user: Hello
//   assistant:
//
// (one "role: content" line per message, then "assistant:" when a reply is wanted). It
// also carries the tool-call loop for models without a template of their own: a null or
// missing content is empty, a list of text parts is joined, tools open the prompt as a
// system line that teaches Hermes' <tool_call>{"name": ..., "arguments": ...}</tool_call>
// with one JSON line per function, an assistant's tool_calls follow its content in that
// form, and a tool result is a "tool: ..." line; its tool-call format is Hermes, so
// tool_choice works on such models with no flag.
//
// EncodeChatPrompt then tokenizes that text the way llama.cpp's server does: the pieces of
// control and user-defined tokens written in it ("<s>", "</s>", "<|im_start|>" when the
// vocabulary has such a token) become those tokens, the text between them is encoded as
// usual, and BOS is put first when the model adds BOS and the text does not already begin
// with it.
//
// Immutable after Create; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_CHAT_CHAT_TEMPLATE_H_
#define FOLIO_SERVICES_FRONTEND_CHAT_CHAT_TEMPLATE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"
#include "services/frontend/jinja/jinja.h"
#include "services/frontend/chat/tool_call_parser.h"

namespace folio::frontend {

inline constexpr char kDefaultChatTemplate[] = R"JINJA({%- if tools %}
{{- 'system: You can call these functions. To call one, answer with <tool_call>{"name": <function name>, "arguments": <its arguments as a JSON object>}</tool_call>.\n' }}
{%- for tool in tools %}{{ (tool['function'] if tool['function'] is defined else tool) | tojson }}{{ '\n' }}{% endfor %}
{%- endif %}
{%- for message in messages %}
{%- set content = message['content'] %}
{{- message['role'] + ': ' }}
{%- if content is string %}{{ content }}
{%- elif content is iterable %}{% for part in content %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}
{%- endif %}
{%- if message['tool_calls'] %}{% for call in message['tool_calls'] %}
{%- set fn = call['function'] if call['function'] is defined else call %}
{{- '<tool_call>{"name": ' }}{{ fn['name'] | tojson }}{{ ', "arguments": ' }}
{%- if fn['arguments'] is string %}{{ fn['arguments'] }}{% else %}{{ fn['arguments'] | tojson }}{% endif %}
{{- '}</tool_call>' }}
{%- endfor %}{% endif %}
{{- '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ 'assistant:' }}{% endif %})JINJA";

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ... (passed to the template as is)
  std::string content;
  // The whole message as the template sees it (with tool_calls, tool_call_id...), from
  // ParseChatInput (chat_template_input.h); when not a dict, {role, content} is used.
  jinja::Value message;
};

// What a chat template renders: the variables Hugging Face's apply_chat_template gives it.
struct ChatInput {
  // A list of message dicts as the client sent them: role, content (a string, null, or a
  // list of {"type": "text", "text": ...} parts), and for tool use tool_calls (assistant),
  // tool_call_id and name (tool). Passed to the template as is, as Hugging Face does.
  jinja::Value messages = jinja::Value(jinja::Value::List{});
  // The tool definitions ({"type": "function", "function": {...}}), or undefined (no tools).
  jinja::Value tools;
  bool add_generation_prompt = true;
  // More variables (a request's chat_template_kwargs, date_string...).
  jinja::Value::Map extra;
};

class ChatTemplate {
 public:
  // `source` is the model's template; empty selects kDefaultChatTemplate. `bos_token` and
  // `eos_token` are the texts the template sees as bos_token / eos_token. InvalidArgument
  // (with the line) when the template does not parse.
  static absl::StatusOr<ChatTemplate> Create(std::string_view source, std::string bos_token,
                                             std::string eos_token);

  // Renders `messages` (the template sees a list of {role, content} dicts named messages,
  // add_generation_prompt, bos_token and eos_token). InvalidArgument with the template's
  // own message when it raises (e.g. "Conversation roles must alternate ...").
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const;

  // Renders `input` (messages, tools when defined, add_generation_prompt, bos_token,
  // eos_token, then `input.extra`) within the limits of `options` (its `now` is what
  // strftime_now() formats).
  absl::StatusOr<std::string> Render(const ChatInput& input,
                                     const jinja::RenderOptions& options = {}) const;

  const std::string& bos_token() const { return bos_; }

  bool is_default() const { return is_default_; }

  // The tool-call format the template teaches (ToolCallFormatOfTemplate), if any.
  std::optional<ToolCallFormat> tool_call_format() const { return tool_call_format_; }

  // Whether the template's source mentions <think> (Qwen3, QwQ, DeepSeek-R1: a reasoning
  // model's template), which turns --reasoning_parser=auto on (reasoning_parser.h).
  bool mentions_think() const { return mentions_think_; }

 private:
  ChatTemplate(jinja::Template t, std::string bos, std::string eos, bool is_default)
      : template_(std::move(t)), bos_(std::move(bos)), eos_(std::move(eos)),
        is_default_(is_default) {}

  jinja::Template template_;
  std::string bos_;
  std::string eos_;
  bool is_default_;
  std::optional<ToolCallFormat> tool_call_format_;
  bool mentions_think_ = false;
};

// The template a model's chat requests render with, chosen as llama.cpp's server and
// Hugging Face's apply_chat_template choose among a model's templates: with tools, the one
// named "tool_use" when the model has it; otherwise the default (GGUF
// tokenizer.chat_template), or when there is none the one named "default". Empty: none
// (ChatTemplate::Create then uses kDefaultChatTemplate).
std::string SelectChatTemplate(const std::string& default_source,
                               const std::map<std::string, std::string>& named, bool has_tools);

// Tokenizes a rendered chat prompt as the file comment describes. InvalidArgument when the
// text is not valid UTF-8.
absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const Tokenizer& tokenizer,
                                                      std::string_view text);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CHAT_CHAT_TEMPLATE_H_
