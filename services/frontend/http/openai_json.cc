#include "services/frontend/http/openai_json.h"

#include "services/frontend/chat/chat_template_input.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "services/frontend/http/json_body.h"

namespace folio::frontend::openai {
namespace {

using json = nlohmann::json;

absl::Status TypeError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", what));
}

// The value of `key`, or nullptr when absent or null (OpenAI treats null as "not given").
const json* Field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status GetBool(const json& body, const char* key, bool* out) {
  const json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(key, "true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status GetFloat(const json& body, const char* key, std::optional<float>* out) {
  const json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(key, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " is out of range: ", v->dump(), " does not fit a float"));
  }
  *out = static_cast<float>(d);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> AsInt(const json& v, absl::string_view field) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return TypeError(field, "an integer in the 64-bit range");
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::fabs(d) >= 9.2e18) {
      return TypeError(field, absl::StrCat("an integer in the 64-bit range, not ", v.dump()));
    }
    return TypeError(field, absl::StrCat("an integer, not ", v.dump()));
  }
  return TypeError(field, "an integer");
}

absl::StatusOr<int32_t> AsInt32(const json& v, absl::string_view field) {
  absl::StatusOr<int64_t> i = AsInt(v, field);
  if (!i.ok()) return i.status();
  if (*i < std::numeric_limits<int32_t>::min() || *i > std::numeric_limits<int32_t>::max()) {
    return TypeError(field, "an integer in the 32-bit range");
  }
  return static_cast<int32_t>(*i);
}

absl::Status GetInt32(const json& body, const char* key, std::optional<int32_t>* out) {
  const json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<int32_t> i = AsInt32(*v, key);
  if (!i.ok()) return i.status();
  *out = *i;
  return absl::OkStatus();
}

absl::Status GetTokenIds(const json& array, absl::string_view field, std::vector<int32_t>* out) {
  for (size_t i = 0; i < array.size(); ++i) {
    absl::StatusOr<int32_t> id = AsInt32(array[i], absl::StrCat(field, "[", i, "]"));
    if (!id.ok()) return id.status();
    out->push_back(*id);
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, Request* r) {
  GenerateInput* in = &r->input;
  const json* p = Field(body, "prompt");
  if (p == nullptr) return absl::OkStatus();  // as an empty prompt: start from BOS
  if (p->is_string()) {
    in->prompt = p->get<std::string>();
    return absl::OkStatus();
  }
  const char* kShape =
      "a string, an array of token ids, or an array of strings or of token-id arrays";
  if (!p->is_array()) return TypeError("prompt", kShape);
  if (p->empty()) return absl::InvalidArgumentError("prompt is an empty array");
  if (p->at(0).is_number()) return GetTokenIds(*p, "prompt", &in->prompt_token_ids);
  if (p->size() > kMaxPrompts) {
    return absl::InvalidArgumentError(absl::StrCat("prompt lists ", p->size(),
                                                   " prompts; at most ", kMaxPrompts,
                                                   " may go in one request"));
  }
  std::vector<PromptInput> prompts(p->size());
  for (size_t i = 0; i < p->size(); ++i) {
    const json& one = p->at(i);
    const std::string field = absl::StrCat("prompt[", i, "]");
    if (one.is_string()) {
      prompts[i].text = one.get<std::string>();
    } else if (one.is_array()) {
      if (one.empty()) return absl::InvalidArgumentError(field + " is an empty array");
      if (absl::Status s = GetTokenIds(one, field, &prompts[i].token_ids); !s.ok()) return s;
    } else {
      return TypeError(field, "a string or an array of token ids");
    }
  }
  if (prompts.size() == 1) {
    in->prompt = std::move(prompts[0].text);
    in->prompt_token_ids = std::move(prompts[0].token_ids);
  } else {
    r->prompts = std::move(prompts);
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, GenerateInput* in) {
  const json* s = Field(body, "stop");
  if (s == nullptr) return absl::OkStatus();
  if (s->is_string()) {
    in->stop.push_back(s->get<std::string>());
    return absl::OkStatus();
  }
  if (!s->is_array()) return TypeError("stop", "a string or an array of strings");
  for (size_t i = 0; i < s->size(); ++i) {
    if (!(*s)[i].is_string()) return TypeError(absl::StrCat("stop[", i, "]"), "a string");
    in->stop.push_back((*s)[i].get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& body, std::vector<ChatMessage>* out) {
  const json* m = Field(body, "messages");
  if (m == nullptr) return absl::InvalidArgumentError("messages is required");
  if (!m->is_array()) return TypeError("messages", "an array");
  if (m->empty()) return absl::InvalidArgumentError("messages is empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return TypeError(field, "an object");
    const json* role = Field(msg, "role");
    if (role == nullptr || !role->is_string()) return TypeError(field + ".role", "a string");
    ChatMessage out_msg;
    out_msg.role = role->get<std::string>();
    const json* content = Field(msg, "content");
    if (content == nullptr) {
      // Allowed (an assistant turn that only called tools); renders as empty text.
    } else if (content->is_string()) {
      out_msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string part_field = absl::StrCat(field, ".content[", k, "]");
        const json* type = part.is_object() ? Field(part, "type") : nullptr;
        if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
          return absl::InvalidArgumentError(absl::StrCat(
              part_field, " is not a text part; only {\"type\": \"text\", \"text\": ...} "
                          "parts are supported"));
        }
        const json* text = Field(part, "text");
        if (text == nullptr || !text->is_string()) return TypeError(part_field + ".text", "a string");
        out_msg.content += text->get<std::string>();
      }
    } else {
      return TypeError(field + ".content", "a string or an array of text parts");
    }
    out->push_back(std::move(out_msg));
  }
  return absl::OkStatus();
}

// OpenAI's map form, {"token id": bias}. The keys must be decimal token ids; their range
// and the biases' are RequestValidator's.
absl::Status ParseLogitBias(const json& body, GenerateInput* in) {
  const json* v = Field(body, "logit_bias");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return TypeError("logit_bias", "an object mapping token ids to biases");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    int32_t id = 0;
    bool ok = !key.empty() && key.size() <= 10;
    int64_t value = 0;
    for (size_t i = 0; ok && i < key.size(); ++i) {
      ok = key[i] >= '0' && key[i] <= '9';
      value = value * 10 + (key[i] - '0');
    }
    if (!ok || value > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias key \"", key.substr(0, 32), "\" is not a token id (a decimal integer)"));
    }
    id = static_cast<int32_t>(value);
    if (!it.value().is_number()) {
      return TypeError(absl::StrCat("logit_bias[\"", key, "\"]"), "a number");
    }
    in->logit_bias.emplace_back(id, static_cast<float>(it.value().get<double>()));
  }
  return absl::OkStatus();
}

#define FOLIO_RETURN_IF_ERROR(expr)            \
  do {                                         \
    if (absl::Status _s = (expr); !_s.ok()) return _s; \
  } while (0)

// tool_choice and parallel_tool_calls (chat), checked against the tools given.
absl::Status ParseToolChoice(const json& body, Request* r) {
  const json* tools = Field(body, "tools");
  r->has_tools = tools != nullptr && tools->is_array() && !tools->empty();
  if (tools != nullptr) r->tools = *tools;
  FOLIO_RETURN_IF_ERROR(GetBool(body, "parallel_tool_calls", &r->parallel_tool_calls));
  const json* v = Field(body, "tool_choice");
  if (v == nullptr) return absl::OkStatus();
  constexpr char kForms[] =
      "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
      "\"function\": {\"name\": ...}}";
  ToolChoice& c = r->tool_choice;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "auto") {
      c.mode = ToolChoice::Mode::kAuto;
    } else if (s == "none") {
      c.mode = ToolChoice::Mode::kNone;
    } else if (s == "required") {
      c.mode = ToolChoice::Mode::kRequired;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(kForms, ", not \"", s.substr(0, 64), "\""));
    }
  } else if (v->is_object()) {
    const json* type = Field(*v, "type");
    const json* function = Field(*v, "function");
    const json* name = function != nullptr && function->is_object() ? Field(*function, "name")
                                                                     : nullptr;
    if (type == nullptr || *type != "function" || name == nullptr || !name->is_string()) {
      return absl::InvalidArgumentError(kForms);
    }
    c.mode = ToolChoice::Mode::kFunction;
    c.function = name->get<std::string>();
  } else {
    return absl::InvalidArgumentError(kForms);
  }
  if (c.mode == ToolChoice::Mode::kRequired || c.mode == ToolChoice::Mode::kFunction) {
    if (!r->has_tools) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice ", c.mode == ToolChoice::Mode::kRequired ? "\"required\"" : "naming a function",
          " needs tools; the request has none"));
    }
  }
  if (c.mode == ToolChoice::Mode::kFunction) {
    bool found = false;
    for (const json& t : *tools) {
      const json* f = t.is_object() ? Field(t, "function") : nullptr;
      const json* n = f != nullptr && f->is_object() ? Field(*f, "name") : nullptr;
      found = found || (n != nullptr && *n == c.function);
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice names the function '", c.function.substr(0, 128),
          "', which is not in tools"));
    }
  }
  return absl::OkStatus();
}

// Fields whose only supported value is their default.
absl::Status RejectUnsupported(const json& body, Endpoint endpoint) {
  if (const json* v = Field(body, "suffix"); v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
    return absl::InvalidArgumentError("suffix is not supported");
  }
  // Chat requests pass tools to the chat template (ParseChatInput checks their shape).
  if (const json* v = Field(body, "tools");
      endpoint != Endpoint::kChatCompletions && v != nullptr && !v->is_null() && !v->empty()) {
    return absl::InvalidArgumentError("tools are only taken by /v1/chat/completions");
  }
  for (const char* key : {"tool_choice", "parallel_tool_calls"}) {
    if (endpoint != Endpoint::kChatCompletions && Field(body, key) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " is only taken by /v1/chat/completions"));
    }
  }
  return absl::OkStatus();
}

// Structured output: OpenAI's response_format (json_object, json_schema), and Folio's
// `regex` and `grammar` (vLLM's guided_json, guided_regex and guided_grammar are read as
// the same). At most one of them.
absl::Status ParseStructured(const json& body, GenerateInput* in) {
  using Kind = structured::StructuredOutput::Kind;
  std::vector<std::string> given;
  auto set = [&](std::string field, Kind kind, std::string text) {
    given.push_back(std::move(field));
    in->structured.kind = kind;
    in->structured.text = std::move(text);
  };
  if (const json* v = Field(body, "response_format"); v != nullptr && !v->is_null()) {
    if (!v->is_object()) return TypeError("response_format", "an object");
    const json* type = Field(*v, "type");
    if (type == nullptr || !type->is_string()) {
      return absl::InvalidArgumentError(
          "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
    }
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      set("response_format", Kind::kJsonObject, "");
    } else if (t == "json_schema") {
      const json* js = Field(*v, "json_schema");
      if (js == nullptr || !js->is_object()) {
        return absl::InvalidArgumentError(
            "response_format.json_schema must be an object with \"name\" and \"schema\"");
      }
      if (const json* name = Field(*js, "name"); name != nullptr && !name->is_string()) {
        return TypeError("response_format.json_schema.name", "a string");
      }
      if (const json* strict = Field(*js, "strict");
          strict != nullptr && !strict->is_boolean() && !strict->is_null()) {
        return TypeError("response_format.json_schema.strict", "true or false");
      }
      const json* schema = Field(*js, "schema");
      if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
        return absl::InvalidArgumentError(
            "response_format.json_schema.schema must be a JSON Schema (an object)");
      }
      set("response_format", Kind::kJsonSchema, schema->dump());
    } else if (t != "text") {
      return absl::InvalidArgumentError(absl::StrCat(
          "response_format.type \"", t.substr(0, 32),
          "\" is not supported (\"text\", \"json_object\" or \"json_schema\")"));
    }
  }
  if (const json* v = Field(body, "guided_json"); v != nullptr && !v->is_null()) {
    if (v->is_string()) {
      set("guided_json", Kind::kJsonSchema, v->get<std::string>());
    } else if (v->is_object() || v->is_boolean()) {
      set("guided_json", Kind::kJsonSchema, v->dump());
    } else {
      return TypeError("guided_json", "a JSON Schema");
    }
  }
  for (const auto& [field, kind] : {std::pair<const char*, Kind>{"regex", Kind::kRegex},
                                    {"guided_regex", Kind::kRegex},
                                    {"grammar", Kind::kGrammar},
                                    {"guided_grammar", Kind::kGrammar}}) {
    const json* v = Field(body, field);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_string()) return TypeError(field, "a string");
    set(field, kind, v->get<std::string>());
  }
  if (given.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        given[0], " and ", given[1], " both constrain the output; give at most one"));
  }
  return absl::OkStatus();
}


json LogprobsJson(const ResponseHeader& h, const std::vector<TokenOut>& tokens) {
  if (!h.logprobs) return nullptr;
  if (h.endpoint == Endpoint::kChatCompletions) {
    json content = json::array();
    auto bytes = [](const std::string& s) {
      json b = json::array();
      for (unsigned char c : s) b.push_back(static_cast<int>(c));
      return b;
    };
    for (const TokenOut& t : tokens) {
      json top = json::array();
      for (const auto& [text, lp] : t.top_logprobs) {
        top.push_back({{"token", text}, {"logprob", lp}, {"bytes", bytes(text)}});
      }
      content.push_back({{"token", t.text},
                         {"logprob", t.logprob.value_or(0.0f)},
                         {"bytes", bytes(t.text)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()},
              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  size_t offset = 0;
  for (const TokenOut& t : tokens) {
    out["tokens"].push_back(t.text);
    out["token_logprobs"].push_back(t.logprob.value_or(0.0f));
    json top = json::object();
    for (const auto& [text, lp] : t.top_logprobs) top[text] = lp;
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(offset);
    offset += t.text.size();
  }
  return out;
}

json UsageJson(const Usage& u) {
  json out = {{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  out["prompt_tokens_details"] = {{"cached_tokens", u.cached_prompt_tokens}};
  if (u.reasoning_tokens.has_value()) {
    out["completion_tokens_details"] = {{"reasoning_tokens", *u.reasoning_tokens}};
  }
  return out;
}

json FinishJson(const std::string& reason) {
  return reason.empty() ? json(nullptr) : json(reason);
}

json HeaderJson(const ResponseHeader& h, bool chunk) {
  const bool chat = h.endpoint == Endpoint::kChatCompletions;
  return {{"id", h.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", h.created},
          {"model", h.model}};
}

}  // namespace

absl::StatusOr<Request> ParseRequest(Endpoint endpoint, std::string_view text) {
  absl::StatusOr<json> parsed = ParseJsonBody(text);
  if (!parsed.ok()) return parsed.status();
  const json& body = *parsed;
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");

  Request r;
  r.endpoint = endpoint;
  GenerateInput& in = r.input;
  if (const json* m = Field(body, "model"); m != nullptr) {
    if (!m->is_string()) return TypeError("model", "a string");
    r.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    FOLIO_RETURN_IF_ERROR(ParsePrompt(body, &r));
    FOLIO_RETURN_IF_ERROR(GetBool(body, "echo", &r.echo));
    std::optional<int32_t> logprobs;
    FOLIO_RETURN_IF_ERROR(GetInt32(body, "logprobs", &logprobs));
    in.logprobs = logprobs;
    FOLIO_RETURN_IF_ERROR(GetInt32(body, "max_tokens", &in.max_tokens));
  } else {
    FOLIO_RETURN_IF_ERROR(ParseMessages(body, &r.messages));
    FOLIO_RETURN_IF_ERROR(GetBool(body, "add_generation_prompt", &r.add_generation_prompt));
    absl::StatusOr<ChatInput> chat = ParseChatInput(text);
    if (!chat.ok()) return chat.status();
    r.chat = *std::move(chat);
    for (size_t i = 0; i < r.messages.size(); ++i) r.messages[i].message = r.chat.messages.list()[i];
    FOLIO_RETURN_IF_ERROR(ParseToolChoice(body, &r));
    bool logprobs = false;
    FOLIO_RETURN_IF_ERROR(GetBool(body, "logprobs", &logprobs));
    std::optional<int32_t> top_logprobs;
    FOLIO_RETURN_IF_ERROR(GetInt32(body, "top_logprobs", &top_logprobs));
    if (top_logprobs.has_value() && !logprobs) {
      return absl::InvalidArgumentError("top_logprobs needs logprobs set to true");
    }
    if (logprobs) in.logprobs = top_logprobs.value_or(0);
    in.logprobs_field = "top_logprobs";
    FOLIO_RETURN_IF_ERROR(GetInt32(body, "max_completion_tokens", &in.max_tokens));
    if (!in.max_tokens.has_value()) FOLIO_RETURN_IF_ERROR(GetInt32(body, "max_tokens", &in.max_tokens));
  }
  FOLIO_RETURN_IF_ERROR(GetFloat(body, "temperature", &in.temperature));
  FOLIO_RETURN_IF_ERROR(GetFloat(body, "top_p", &in.top_p));
  FOLIO_RETURN_IF_ERROR(GetInt32(body, "top_k", &in.top_k));
  FOLIO_RETURN_IF_ERROR(GetFloat(body, "min_p", &in.min_p));
  FOLIO_RETURN_IF_ERROR(GetFloat(body, "presence_penalty", &in.presence_penalty));
  FOLIO_RETURN_IF_ERROR(GetFloat(body, "frequency_penalty", &in.frequency_penalty));
  FOLIO_RETURN_IF_ERROR(GetFloat(body, "repetition_penalty", &in.repetition_penalty));
  FOLIO_RETURN_IF_ERROR(ParseLogitBias(body, &in));
  FOLIO_RETURN_IF_ERROR(GetInt32(body, "min_tokens", &in.min_tokens));
  FOLIO_RETURN_IF_ERROR(GetInt32(body, "num_speculative_tokens", &in.num_speculative_tokens));
  if (const json* s = Field(body, "seed"); s != nullptr) {
    absl::StatusOr<int64_t> seed = AsInt(*s, "seed");
    if (!seed.ok()) return seed.status();
    in.seed = static_cast<uint64_t>(*seed);
  }
  FOLIO_RETURN_IF_ERROR(ParseStop(body, &in));
  if (const json* ids = Field(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return TypeError("stop_token_ids", "an array of token ids");
    FOLIO_RETURN_IF_ERROR(GetTokenIds(*ids, "stop_token_ids", &in.stop_token_ids));
  }
  FOLIO_RETURN_IF_ERROR(GetBool(body, "ignore_eos", &in.ignore_eos));
  if (Field(body, "parse_special") != nullptr) {
    bool parse_special = true;
    FOLIO_RETURN_IF_ERROR(GetBool(body, "parse_special", &parse_special));
    in.parse_special = parse_special;
  }
  std::optional<int32_t> n;
  FOLIO_RETURN_IF_ERROR(GetInt32(body, "n", &n));
  // The validator holds it to the replica's max_n as well, naming the field.
  in.n = n.value_or(1);
  if (*in.n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n is ", *in.n, "; it must be at least 1"));
  }
  std::optional<int32_t> best_of;
  FOLIO_RETURN_IF_ERROR(GetInt32(body, "best_of", &best_of));
  if (best_of.has_value() && *best_of != *in.n) {
    return absl::InvalidArgumentError("best_of is not supported (only best_of equal to n)");
  }
  FOLIO_RETURN_IF_ERROR(GetBool(body, "stream", &r.stream));
  if (const json* so = Field(body, "stream_options"); so != nullptr) {
    if (!so->is_object()) return TypeError("stream_options", "an object");
    FOLIO_RETURN_IF_ERROR(GetBool(*so, "include_usage", &r.include_usage));
  }
  FOLIO_RETURN_IF_ERROR(RejectUnsupported(body, endpoint));
  FOLIO_RETURN_IF_ERROR(ParseStructured(body, &in));
  return r;
}

json BuildResponse(const ResponseHeader& h, const std::vector<ChoiceDelta>& choices,
                   const Usage& usage) {
  json out = HeaderJson(h, /*chunk=*/false);
  json list = json::array();
  for (const ChoiceDelta& c : choices) {
    json choice = {{"index", c.index}};
    if (h.endpoint == Endpoint::kChatCompletions) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      // Under both names the ecosystem uses: reasoning_content (llama.cpp's server,
      // DeepSeek's API) and reasoning (vLLM).
      if (!c.reasoning.empty()) {
        choice["message"]["reasoning_content"] = c.reasoning;
        choice["message"]["reasoning"] = c.reasoning;
      }
      if (!c.tool_calls.empty()) {
        // As OpenAI: no text beside the calls is null content.
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        json calls = json::array();
        for (const ToolCallDelta& t : c.tool_calls) {
          calls.push_back({{"id", t.id},
                           {"type", "function"},
                           {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
        choice["message"]["tool_calls"] = std::move(calls);
      }
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = LogprobsJson(h, c.tokens);
    choice["finish_reason"] = FinishJson(c.finish_reason);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  return out;
}

json BuildChunk(const ResponseHeader& h, const std::vector<ChoiceDelta>& deltas,
                bool include_usage_field) {
  json out = HeaderJson(h, /*chunk=*/true);
  json list = json::array();
  for (const ChoiceDelta& d : deltas) {
    json choice = {{"index", d.index}};
    if (h.endpoint == Endpoint::kChatCompletions) {
      const bool no_text = d.text.empty() && (!d.finish_reason.empty() || !d.tool_calls.empty() ||
                                               !d.reasoning.empty());
      choice["delta"] = no_text ? json::object() : json{{"content", d.text}};
      if (!d.reasoning.empty()) {
        choice["delta"]["reasoning_content"] = d.reasoning;
        choice["delta"]["reasoning"] = d.reasoning;
      }
      if (!d.tool_calls.empty()) {
        // OpenAI's shape: a call's first delta has its id, type and name (and arguments
        // ""); the next ones only arguments fragments.
        json calls = json::array();
        for (const ToolCallDelta& t : d.tool_calls) {
          json call = {{"index", t.index}};
          if (!t.name.empty()) {
            call["id"] = t.id;
            call["type"] = "function";
            call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
          } else {
            call["function"] = {{"arguments", t.arguments}};
          }
          calls.push_back(std::move(call));
        }
        choice["delta"]["tool_calls"] = std::move(calls);
      }
    } else {
      choice["text"] = d.text;
    }
    choice["logprobs"] = LogprobsJson(h, d.tokens);
    choice["finish_reason"] = FinishJson(d.finish_reason);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  if (include_usage_field) out["usage"] = nullptr;
  return out;
}

json BuildRoleChunk(const ResponseHeader& h, int32_t n, bool include_usage_field) {
  json out = HeaderJson(h, /*chunk=*/true);
  json list = json::array();
  for (int32_t i = 0; i < n; ++i) {
    list.push_back({{"index", i},
                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}});
  }
  out["choices"] = std::move(list);
  if (include_usage_field) out["usage"] = nullptr;
  return out;
}

json BuildUsageChunk(const ResponseHeader& h, const Usage& usage) {
  json out = HeaderJson(h, /*chunk=*/true);
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

HttpError MakeError(int http_status, absl::string_view type, absl::string_view code,
                    absl::string_view message) {
  HttpError e;
  e.http_status = http_status;
  e.body = {{"error",
             {{"message", std::string(message)},
              {"type", std::string(type)},
              {"param", nullptr},
              {"code", code.empty() ? json(nullptr) : json(std::string(code))}}}};
  return e;
}

HttpError ErrorFromStatus(const absl::Status& status) {
  HttpError e;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e = MakeError(400, "invalid_request_error", "", status.message());
      break;
    case absl::StatusCode::kUnauthenticated:
      e = MakeError(401, "authentication_error", "invalid_api_key", status.message());
      break;
    case absl::StatusCode::kPermissionDenied:
      e = MakeError(403, "permission_error", "", status.message());
      break;
    case absl::StatusCode::kNotFound:
      e = MakeError(404, "invalid_request_error", "model_not_found", status.message());
      break;
    case absl::StatusCode::kResourceExhausted:
      e = MakeError(429, "rate_limit_error", "rate_limit_exceeded", status.message());
      break;
    case absl::StatusCode::kUnimplemented:
      e = MakeError(501, "not_implemented_error", "", status.message());
      break;
    case absl::StatusCode::kUnavailable:
      e = MakeError(503, "service_unavailable_error", "", status.message());
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e = MakeError(504, "timeout_error", "", status.message());
      break;
    default:
      e = MakeError(500, "server_error", "", status.message());
      break;
  }
  if (e.http_status == 400) {
    // The field the message is about, when it opens with one ("temperature is 3; ...",
    // "messages[0].role must be ...", "prompt_token_ids[2] is ...").
    absl::string_view m = status.message();
    size_t n = 0;
    while (n < m.size() && (absl::ascii_islower(m[n]) || m[n] == '_')) ++n;
    const absl::string_view field = m.substr(0, n);
    static constexpr const char* kFields[] = {
        "prompt", "prompt_token_ids", "messages", "max_tokens", "temperature", "top_p",
        "top_k", "min_p", "seed", "stop", "stop_token_ids", "logprobs", "top_logprobs", "n",
        "echo", "stream", "stream_options", "ignore_eos", "parse_special", "model", "best_of",
        "suffix", "logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "min_tokens", "num_speculative_tokens", "tools", "response_format", "regex",
        "grammar", "guided_json", "guided_regex", "guided_grammar",
        "max_completion_tokens", "add_generation_prompt", "chat_template_kwargs", "tool_choice",
        "parallel_tool_calls"};
    for (const char* f : kFields) {
      if (field == f && n < m.size() && (m[n] == ' ' || m[n] == '[' || m[n] == '.')) {
        e.body["error"]["param"] = field == "prompt_token_ids" ? "prompt" : std::string(f);
      }
    }
  }
  return e;
}

std::string SseEvent(const json& data) {
  return absl::StrCat("data: ", data.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

}  // namespace folio::frontend::openai
