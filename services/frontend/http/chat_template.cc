#include "services/frontend/http/chat_template.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace folio::frontend {

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string_view source, std::string bos_token,
                                                  std::string eos_token) {
  const bool is_default = source.empty();
  absl::StatusOr<jinja::Template> t =
      jinja::Template::Parse(is_default ? std::string_view(kDefaultChatTemplate) : source);
  if (!t.ok()) return t.status();
  return ChatTemplate(*std::move(t), std::move(bos_token), std::move(eos_token), is_default);
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
  // Special pieces by first byte, longest first, so "<|im_start|>" wins over "<".
  const Vocab& vocab = tokenizer.vocab();
  std::vector<std::pair<std::string_view, int32_t>> specials;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType type = vocab.types[id];
    if ((type == TokenType::kControl || type == TokenType::kUserDefined) &&
        !vocab.pieces[id].empty()) {
      specials.emplace_back(vocab.pieces[id], id);
    }
  }
  std::sort(specials.begin(), specials.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  std::vector<int32_t> ids;
  size_t fragment_start = 0;
  auto flush = [&](size_t end) -> absl::Status {
    if (end <= fragment_start) return absl::OkStatus();
    absl::StatusOr<std::vector<int32_t>> part =
        tokenizer.Encode(text.substr(fragment_start, end - fragment_start), AddBos::kNo);
    if (!part.ok()) return part.status();
    ids.insert(ids.end(), part->begin(), part->end());
    return absl::OkStatus();
  };
  for (size_t i = 0; i < text.size();) {
    const std::pair<std::string_view, int32_t>* match = nullptr;
    for (const auto& s : specials) {
      if (text.substr(i, s.first.size()) == s.first) {
        match = &s;
        break;
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    if (absl::Status s = flush(i); !s.ok()) return s;
    ids.push_back(match->second);
    i += match->first.size();
    fragment_start = i;
  }
  if (absl::Status s = flush(text.size()); !s.ok()) return s;
  if (vocab.add_bos && (ids.empty() || ids.front() != vocab.bos_id)) {
    ids.insert(ids.begin(), vocab.bos_id);
  }
  return ids;
}

}  // namespace folio::frontend
