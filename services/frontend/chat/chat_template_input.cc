#include "services/frontend/chat/chat_template_input.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace folio::frontend {
namespace {

using nlohmann::ordered_json;

absl::Status TypeError(const std::string& field, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", what));
}

const ordered_json* Field(const ordered_json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// Text parts joined; InvalidArgument for any other part.
absl::StatusOr<std::string> JoinTextParts(const ordered_json& parts, const std::string& field) {
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) {
    const ordered_json& part = parts[k];
    const std::string part_field = absl::StrCat(field, "[", k, "]");
    const ordered_json* type = part.is_object() ? Field(part, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
      return absl::InvalidArgumentError(absl::StrCat(
          part_field, " is not a text part; only {\"type\": \"text\", \"text\": ...} parts are "
                      "supported"));
    }
    const ordered_json* text = Field(part, "text");
    if (text == nullptr || !text->is_string()) return TypeError(part_field + ".text", "a string");
    out += text->get<std::string>();
  }
  return out;
}

absl::Status NormalizeToolCalls(ordered_json* calls, const std::string& field) {
  if (!calls->is_array()) return TypeError(field, "an array");
  for (size_t k = 0; k < calls->size(); ++k) {
    ordered_json& call = (*calls)[k];
    const std::string call_field = absl::StrCat(field, "[", k, "]");
    if (!call.is_object()) return TypeError(call_field, "an object");
    if (const ordered_json* id = Field(call, "id"); id != nullptr && !id->is_string()) {
      return TypeError(call_field + ".id", "a string");
    }
    if (const ordered_json* type = Field(call, "type");
        type != nullptr && !(type->is_string() && type->get<std::string>() == "function")) {
      return TypeError(call_field + ".type", "\"function\"");
    }
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) return TypeError(call_field + ".function", "an object");
    const ordered_json* name = Field(*fn, "name");
    if (name == nullptr || !name->is_string()) return TypeError(call_field + ".function.name", "a string");
    auto args = fn->find("arguments");
    if (args == fn->end()) continue;
    if (args->is_string()) {
      ordered_json parsed = ordered_json::parse(args->get<std::string>(), nullptr,
                                                /*allow_exceptions=*/false);
      if (parsed.is_object()) *args = std::move(parsed);
    } else if (!args->is_object()) {
      return TypeError(call_field + ".function.arguments", "a string or an object");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatInput> ParseChatInput(std::string_view body_text) {
  ordered_json body = ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  ChatInput input;
  auto messages = body.find("messages");
  if (messages == body.end()) return absl::InvalidArgumentError("messages is required");
  if (!messages->is_array()) return TypeError("messages", "an array");
  if (messages->empty()) return absl::InvalidArgumentError("messages is empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    ordered_json& msg = (*messages)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return TypeError(field, "an object");
    const ordered_json* role = Field(msg, "role");
    if (role == nullptr || !role->is_string()) return TypeError(field + ".role", "a string");
    auto content = msg.find("content");
    if (content != msg.end() && content->is_array()) {
      absl::StatusOr<std::string> text = JoinTextParts(*content, field + ".content");
      if (!text.ok()) return text.status();
      *content = *std::move(text);
    } else if (content != msg.end() && !content->is_string() && !content->is_null()) {
      return TypeError(field + ".content", "a string, null or an array of text parts");
    }
    if (auto calls = msg.find("tool_calls"); calls != msg.end() && !calls->is_null()) {
      if (absl::Status s = NormalizeToolCalls(&*calls, field + ".tool_calls"); !s.ok()) return s;
    }
    // An assistant turn's reasoning comes back under either name clients use (vLLM's
    // `reasoning`, llama.cpp's and DeepSeek's `reasoning_content`); templates that render
    // it (interleaved thinking) read message.reasoning_content.
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (const ordered_json* v = Field(msg, key); v != nullptr && !v->is_string() && !v->is_null()) {
        return TypeError(absl::StrCat(field, ".", key), "a string or null");
      }
    }
    if (const ordered_json* reasoning = Field(msg, "reasoning");
        reasoning != nullptr && reasoning->is_string() &&
        (Field(msg, "reasoning_content") == nullptr || Field(msg, "reasoning_content")->is_null())) {
      msg["reasoning_content"] = *reasoning;
    }
    for (const char* key : {"tool_call_id", "name"}) {
      if (const ordered_json* v = Field(msg, key); v != nullptr && !v->is_string()) {
        return TypeError(absl::StrCat(field, ".", key), "a string");
      }
    }
  }
  input.messages = jinja::Value::FromJson(*messages);
  if (const ordered_json* tools = Field(body, "tools"); tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return TypeError("tools", "an array");
    for (size_t k = 0; k < tools->size(); ++k) {
      const ordered_json& tool = (*tools)[k];
      const std::string tool_field = absl::StrCat("tools[", k, "]");
      const ordered_json* fn = tool.is_object() ? Field(tool, "function") : nullptr;
      if (fn == nullptr || !fn->is_object()) return TypeError(tool_field + ".function", "an object");
      const ordered_json* name = Field(*fn, "name");
      if (name == nullptr || !name->is_string()) return TypeError(tool_field + ".function.name", "a string");
    }
    input.tools = jinja::Value::FromJson(*tools);
  }
  if (const ordered_json* agp = Field(body, "add_generation_prompt"); agp != nullptr) {
    if (!agp->is_boolean()) return TypeError("add_generation_prompt", "true or false");
    input.add_generation_prompt = agp->get<bool>();
  }
  if (const ordered_json* kw = Field(body, "chat_template_kwargs"); kw != nullptr && !kw->is_null()) {
    if (!kw->is_object()) return TypeError("chat_template_kwargs", "an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools") {
        return absl::InvalidArgumentError(
            absl::StrCat("chat_template_kwargs cannot set '", it.key(), "'"));
      }
      input.extra.emplace_back(it.key(), jinja::Value::FromJson(it.value()));
    }
  }
  return input;
}

}  // namespace folio::frontend
