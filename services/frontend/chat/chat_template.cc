#include "services/frontend/chat/chat_template.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/frontend/chat/tool_call_parser.h"

namespace folio::frontend {

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string_view source, std::string bos_token,
                                                  std::string eos_token) {
  const bool is_default = source.empty();
  absl::StatusOr<jinja::Template> t =
      jinja::Template::Parse(is_default ? std::string_view(kDefaultChatTemplate) : source);
  if (!t.ok()) return t.status();
  ChatTemplate out(*std::move(t), std::move(bos_token), std::move(eos_token), is_default);
  out.tool_call_format_ =
      ToolCallFormatOfTemplate(is_default ? std::string_view(kDefaultChatTemplate) : source);
  out.mentions_think_ = !is_default && source.find("<think>") != std::string_view::npos;
  return out;
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) const {
  jinja::Value::List list;
  for (const ChatMessage& m : messages) {
    if (m.message.is_map()) {
      list.push_back(m.message);
      continue;
    }
    list.emplace_back(jinja::Value::Map{{"role", jinja::Value(m.role)},
                                        {"content", jinja::Value(m.content)}});
  }
  ChatInput input;
  input.messages = jinja::Value(std::move(list));
  input.add_generation_prompt = add_generation_prompt;
  return Render(input);
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatInput& input,
                                                 const jinja::RenderOptions& options) const {
  jinja::Value::Map context = {{"messages", input.messages},
                               {"add_generation_prompt", jinja::Value(input.add_generation_prompt)},
                               {"bos_token", jinja::Value(bos_)},
                               {"eos_token", jinja::Value(eos_)}};
  if (!input.tools.is_undefined()) context.emplace_back("tools", input.tools);
  for (const auto& extra : input.extra) {
    auto it = std::find_if(context.begin(), context.end(),
                           [&](const auto& kv) { return kv.first == extra.first; });
    if (it != context.end()) {
      it->second = extra.second;
    } else {
      context.push_back(extra);
    }
  }
  return template_.Render(context, options);
}

std::string SelectChatTemplate(const std::string& default_source,
                               const std::map<std::string, std::string>& named, bool has_tools) {
  if (has_tools) {
    if (auto it = named.find("tool_use"); it != named.end()) return it->second;
  }
  if (!default_source.empty()) return default_source;
  if (auto it = named.find("default"); it != named.end()) return it->second;
  return "";
}

absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const Tokenizer& tokenizer,
                                                      std::string_view text) {
  // Special tokens are parsed in the whole rendered prompt, message contents included, as
  // Hugging Face's apply_chat_template + encode and llama.cpp's server do (docs/http-api.md).
  absl::StatusOr<std::vector<int32_t>> ids =
      tokenizer.Encode(text, AddBos::kNo, ParseSpecial::kYes);
  if (!ids.ok()) return ids.status();
  const Vocab& vocab = tokenizer.vocab();
  if (vocab.add_bos && (ids->empty() || ids->front() != vocab.bos_id)) {
    ids->insert(ids->begin(), vocab.bos_id);
  }
  return ids;
}

}  // namespace folio::frontend
