#include "services/frontend/http/tokenize_api.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "services/frontend/http/openai_json.h"

namespace folio::frontend {
namespace {

using json = nlohmann::json;

absl::StatusOr<json> ParseObject(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the body is not a JSON object");
  }
  return j;
}

absl::Status CheckKnownFields(const json& j, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : j.items()) {
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("unknown field \"", key, "\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> TokenizeBody(const ModelContext& model, std::string_view body,
                                  const TemplateSource& chat_template) {
  absl::StatusOr<json> j = ParseObject(body);
  if (!j.ok()) return j.status();
  if (absl::Status s = CheckKnownFields(
          *j, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt"});
      !s.ok()) {
    return s;
  }
  bool add_special = true;
  if (j->contains("add_special_tokens")) {
    if (!(*j)["add_special_tokens"].is_boolean()) {
      return absl::InvalidArgumentError("add_special_tokens must be a boolean");
    }
    add_special = (*j)["add_special_tokens"].get<bool>();
  }
  const bool has_prompt = j->contains("prompt"), has_messages = j->contains("messages");
  if (has_prompt == has_messages) {
    return absl::InvalidArgumentError("give one of prompt and messages");
  }
  const Tokenizer& tokenizer = model.tokenizer();
  std::vector<int32_t> ids;
  if (has_prompt) {
    const json& p = (*j)["prompt"];
    if (!p.is_string()) return absl::InvalidArgumentError("prompt must be a string");
    absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(
        p.get<std::string>(), add_special ? AddBos::kVocabDefault : AddBos::kNo,
        ParseSpecial::kYes);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", encoded.status().message()));
    }
    ids = *std::move(encoded);
  } else {
    // The chat request's own parsing of messages, so the two agree on what is valid.
    json chat = {{"messages", (*j)["messages"]}};
    if (j->contains("add_generation_prompt")) {
      chat["add_generation_prompt"] = (*j)["add_generation_prompt"];
    }
    absl::StatusOr<openai::Request> r =
        openai::ParseRequest(openai::Endpoint::kChatCompletions, chat.dump());
    if (!r.ok()) return r.status();
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = chat_template();
    if (!t.ok()) return t.status();
    absl::StatusOr<std::string> text = (*t)->Render(r->chat);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<int32_t>> encoded = EncodeChatPrompt(tokenizer, *text);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("messages: ", encoded.status().message()));
    }
    ids = *std::move(encoded);
  }
  return json{{"tokens", ids},
              {"count", ids.size()},
              {"max_model_len", model.info().max_model_len()}};
}

absl::StatusOr<json> DetokenizeBody(const ModelContext& model, std::string_view body) {
  absl::StatusOr<json> j = ParseObject(body);
  if (!j.ok()) return j.status();
  if (absl::Status s = CheckKnownFields(*j, {"model", "tokens"}); !s.ok()) return s;
  if (!j->contains("tokens") || !(*j)["tokens"].is_array()) {
    return absl::InvalidArgumentError("tokens must be an array of token ids");
  }
  const int32_t vocab = model.tokenizer().vocab_size();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < (*j)["tokens"].size(); ++i) {
    const json& t = (*j)["tokens"][i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokens[", i, "] is ", t.dump(), ", not a token id of this model (0 to ", vocab - 1,
          ")"));
    }
    ids.push_back(t.get<int32_t>());
  }
  absl::StatusOr<std::string> text = model.tokenizer().Decode(ids);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("tokens: ", text.status().message()));
  return json{{"prompt", *text}};
}

}  // namespace folio::frontend
