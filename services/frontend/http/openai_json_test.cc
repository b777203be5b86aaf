#include "services/frontend/http/openai_json.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::frontend::openai {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

absl::Status ParseError(Endpoint e, const std::string& body) {
  return ParseRequest(e, body).status();
}

TEST(OpenAiJsonTest, ParsesACompletionRequest) {
  absl::StatusOr<Request> r = ParseRequest(Endpoint::kCompletions, R"({
      "model": "m", "prompt": "Once", "max_tokens": 5, "temperature": 0, "top_p": 0.5,
      "top_k": 3, "min_p": 0.1, "seed": 7, "stop": ["a", "b"], "logprobs": 2, "echo": true,
      "ignore_eos": true, "n": 1, "stream": true, "stream_options": {"include_usage": true},
      "presence_penalty": 0, "user": "ignored"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->input.prompt, "Once");
  EXPECT_EQ(r->input.max_tokens, 5);
  EXPECT_EQ(r->input.temperature, 0.0f);
  EXPECT_EQ(r->input.top_p, 0.5f);
  EXPECT_EQ(r->input.top_k, 3);
  EXPECT_EQ(r->input.seed, 7u);
  EXPECT_EQ(r->input.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->input.logprobs, 2);
  EXPECT_TRUE(r->input.ignore_eos);
  EXPECT_TRUE(r->echo);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(OpenAiJsonTest, PromptShapes) {
  auto prompt_ids = [](const std::string& body) {
    return ParseRequest(Endpoint::kCompletions, body)->input.prompt_token_ids;
  };
  EXPECT_EQ(prompt_ids(R"({"prompt": [1, 2, 3]})"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(prompt_ids(R"({"prompt": [[4, 5]]})"), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ParseRequest(Endpoint::kCompletions, R"({"prompt": ["x"]})")->input.prompt, "x");
  EXPECT_EQ(ParseRequest(Endpoint::kCompletions, R"({})")->input.prompt, "");
  // A list of prompts: strings and token-id lists, each its own.
  absl::StatusOr<Request> list =
      ParseRequest(Endpoint::kCompletions, R"({"prompt": ["a", [7, 8], "c"]})");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->prompts.size(), 3u);
  EXPECT_EQ(list->prompts[0].text, "a");
  EXPECT_EQ(list->prompts[1].token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(list->prompts[2].text, "c");
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"prompt": ["a", 5]})").message(),
              HasSubstr("prompt[1] must be a string or an array of token ids"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"prompt": ["a", []]})").message(),
              HasSubstr("prompt[1] is an empty array"));
  std::string many = R"({"prompt": [)";
  for (int i = 0; i < 129; ++i) many += std::string(i ? "," : "") + "\"p\"";
  many += "]}";
  EXPECT_THAT(ParseError(Endpoint::kCompletions, many).message(), HasSubstr("at most 128"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"prompt": [1, "x"]})").message(),
              HasSubstr("prompt[1] must be an integer"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"prompt": 5})").message(),
              HasSubstr("prompt must be a string"));
}

TEST(OpenAiJsonTest, ParsesAChatRequest) {
  absl::StatusOr<Request> r = ParseRequest(Endpoint::kChatCompletions, R"({
      "messages": [{"role": "system", "content": "S"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}],
      "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_EQ(r->input.max_tokens, 9);
  EXPECT_EQ(r->input.logprobs, 3);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_FALSE(ParseRequest(Endpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})")
                   ->input.logprobs.has_value());
}

TEST(OpenAiJsonTest, ShapeErrorsNameTheField) {
  EXPECT_THAT(ParseError(Endpoint::kCompletions, "{not json").message(),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, "[1]").message(), HasSubstr("a JSON object"));
  // Found by openai_request_fuzz: a number past double's range threw out_of_range.
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"temperature": 9e929})").message(),
              HasSubstr("overflows a double"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"logit_bias": {"5": -1e400}})").message(),
              HasSubstr("overflows a double"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"temperature": "hot"})").message(),
              HasSubstr("temperature must be a number"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"max_tokens": 1.5})").message(),
              HasSubstr("max_tokens must be an integer"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"max_tokens": 99999999999})").message(),
              HasSubstr("32-bit range"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"stop": [1]})").message(),
              HasSubstr("stop[0] must be a string"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"n": 0})").message(),
              HasSubstr("n is 0; it must be at least 1"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"frequency_penalty": "high"})").message(),
              HasSubstr("frequency_penalty must be a number"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"logit_bias": [1, 2]})").message(),
              HasSubstr("logit_bias must be an object"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"logit_bias": {"abc": 2}})").message(),
              HasSubstr("logit_bias key \"abc\" is not a token id"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"logit_bias": {"-1": 2}})").message(),
              HasSubstr("logit_bias key \"-1\" is not a token id"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"logit_bias": {"99999999999": 2}})").message(),
              HasSubstr("is not a token id"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"logit_bias": {"5": "x"}})").message(),
              HasSubstr("logit_bias[\"5\"] must be a number"));
  EXPECT_THAT(ParseError(Endpoint::kCompletions, R"({"min_tokens": 1.5})").message(),
              HasSubstr("min_tokens must be an integer"));
  EXPECT_THAT(ParseError(Endpoint::kChatCompletions, R"({})").message(),
              HasSubstr("messages is required"));
  EXPECT_THAT(ParseError(Endpoint::kChatCompletions, R"({"messages": []})").message(),
              HasSubstr("messages is empty"));
  EXPECT_THAT(ParseError(Endpoint::kChatCompletions, R"({"messages": [{"content": "x"}]})").message(),
              HasSubstr("messages[0].role must be a string"));
  EXPECT_THAT(ParseError(Endpoint::kChatCompletions,
                         R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
                  .message(),
              HasSubstr("messages[0].content[0] is not a text part"));
  EXPECT_THAT(ParseError(Endpoint::kChatCompletions,
                         R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})")
                  .message(),
              HasSubstr("top_logprobs needs logprobs"));
}

TEST(OpenAiJsonTest, ParsesPenaltiesLogitBiasAndMinTokens) {
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
    absl::StatusOr<Request> r = ParseRequest(e, R"({
        "prompt": "x", "messages": [{"role": "user", "content": "x"}],
        "presence_penalty": 0.5, "frequency_penalty": -1.25, "repetition_penalty": 1.1,
        "logit_bias": {"7": -100, "300": 2.5}, "min_tokens": 4, "num_speculative_tokens": 0})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->input.presence_penalty, 0.5f);
    EXPECT_EQ(r->input.frequency_penalty, -1.25f);
    EXPECT_EQ(r->input.repetition_penalty, 1.1f);
    std::vector<std::pair<int32_t, float>> bias = r->input.logit_bias;
    std::sort(bias.begin(), bias.end());
    EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}, {300, 2.5f}}));
    EXPECT_EQ(r->input.min_tokens, 4);
    EXPECT_EQ(r->input.num_speculative_tokens, 0);
  }
  // null and {} mean "not given".
  absl::StatusOr<Request> r = ParseRequest(
      Endpoint::kCompletions, R"({"logit_bias": null, "presence_penalty": null})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->input.logit_bias.empty());
  EXPECT_FALSE(r->input.presence_penalty.has_value());
  EXPECT_TRUE(ParseRequest(Endpoint::kCompletions, R"({"logit_bias": {}})")->input.logit_bias.empty());
  // The validator's messages name the field in the error object.
  const HttpError e = ErrorFromStatus(absl::InvalidArgumentError("logit_bias key 9999 is not a token id"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.body["error"]["param"], "logit_bias");
  EXPECT_EQ(ErrorFromStatus(absl::InvalidArgumentError("min_tokens is 9; it must be"))
                .body["error"]["param"],
            "min_tokens");
  EXPECT_EQ(ErrorFromStatus(absl::InvalidArgumentError("repetition_penalty is 0; it must be"))
                .body["error"]["param"],
            "repetition_penalty");
}

TEST(OpenAiJsonTest, ParsesStructuredOutput) {
  using Kind = structured::StructuredOutput::Kind;
  for (Endpoint e : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
    const std::string head = R"({"prompt": "x", "messages": [{"role": "user", "content": "x"}], )";
    absl::StatusOr<Request> r = ParseRequest(e, head + R"("response_format": {"type": "json_schema",
        "json_schema": {"name": "p", "strict": true, "schema": {"type": "integer"}}}})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->input.structured.kind, Kind::kJsonSchema);
    EXPECT_EQ(json::parse(r->input.structured.text), json::parse(R"({"type": "integer"})"));
    r = ParseRequest(e, head + R"("response_format": {"type": "json_object"}})");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->input.structured.kind, Kind::kJsonObject);
    r = ParseRequest(e, head + R"("response_format": {"type": "text"}})");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->input.structured.kind, Kind::kNone);
    r = ParseRequest(e, head + R"("regex": "a+"})");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->input.structured.kind, Kind::kRegex);
    EXPECT_EQ(r->input.structured.text, "a+");
    r = ParseRequest(e, head + R"("grammar": "root ::= \"a\""})");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->input.structured.kind, Kind::kGrammar);
    r = ParseRequest(e, head + R"("guided_json": {"type": "null"}})");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->input.structured.kind, Kind::kJsonSchema);
  }
  auto err = [](const std::string& body) {
    return ErrorFromStatus(ParseError(Endpoint::kCompletions, body)).body["error"];
  };
  EXPECT_EQ(err(R"({"response_format": {"type": "xml"}})")["param"], "response_format");
  EXPECT_THAT(err(R"({"response_format": {"type": "xml"}})")["message"].get<std::string>(),
              HasSubstr("\"xml\" is not supported"));
  EXPECT_THAT(err(R"({"response_format": {"type": "json_schema"}})")["message"].get<std::string>(),
              HasSubstr("json_schema must be an object"));
  EXPECT_THAT(err(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}})")
                  ["message"].get<std::string>(),
              HasSubstr("schema must be a JSON Schema"));
  EXPECT_EQ(err(R"({"regex": 5})")["param"], "regex");
  EXPECT_THAT(err(R"({"regex": "a", "grammar": "root ::= \"a\""})")["message"].get<std::string>(),
              HasSubstr("at most one"));
  // The validator's compile errors name the field too.
  EXPECT_EQ(ErrorFromStatus(absl::InvalidArgumentError("grammar is invalid: grammar: line 1"))
                .body["error"]["param"],
            "grammar");
}

TEST(OpenAiJsonTest, ErrorsMapToHttpStatusesAndOpenAiObjects) {
  HttpError e = ErrorFromStatus(absl::InvalidArgumentError("temperature is 3; it must be in [0, 2]"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.body["error"]["message"], "temperature is 3; it must be in [0, 2]");
  EXPECT_EQ(e.body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e.body["error"]["param"], "temperature");
  EXPECT_TRUE(e.body["error"]["code"].is_null());
  EXPECT_EQ(ErrorFromStatus(absl::InvalidArgumentError("prompt_token_ids[0] is 9999; ..."))
                .body["error"]["param"],
            "prompt");
  EXPECT_TRUE(ErrorFromStatus(absl::InvalidArgumentError("the prompt has 5 tokens"))
                  .body["error"]["param"]
                  .is_null());
  EXPECT_EQ(ErrorFromStatus(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ErrorFromStatus(absl::NotFoundError("x")).http_status, 404);
  EXPECT_EQ(ErrorFromStatus(absl::NotFoundError("x")).body["error"]["code"], "model_not_found");
  EXPECT_EQ(ErrorFromStatus(absl::ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(ErrorFromStatus(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ErrorFromStatus(absl::UnimplementedError("x")).http_status, 501);
  EXPECT_EQ(ErrorFromStatus(absl::InternalError("x")).http_status, 500);
}

TEST(OpenAiJsonTest, ResponsesAndChunks) {
  ResponseHeader h{"cmpl-r1", 1700000000, "m", Endpoint::kCompletions, false};
  ChoiceDelta c;
  c.index = 0;
  c.text = "hello";
  c.finish_reason = "length";
  json r = BuildResponse(h, {c}, Usage{3, 2, 1});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "hello");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 1);

  ResponseHeader chat{"chatcmpl-r1", 1, "m", Endpoint::kChatCompletions, true};
  ChoiceDelta d;
  d.text = "hi";
  d.tokens.push_back(TokenOut{7, "hi", -0.5f, {{"hi", -0.5f}, {"yo", -1.0f}}});
  json chunk = BuildChunk(chat, {d}, /*include_usage_field=*/true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "hi");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk["usage"].is_null());
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "yo");
  EXPECT_EQ(BuildRoleChunk(chat, 2, false)["choices"][1]["delta"]["role"], "assistant");
  EXPECT_EQ(BuildUsageChunk(chat, Usage{1, 2, 0})["choices"].size(), 0u);
  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

TEST(OpenAiJsonTest, ReasoningIsReasoningContentBesideContent) {
  ResponseHeader chat{"chatcmpl-r1", 1, "m", Endpoint::kChatCompletions, false};
  ChoiceDelta d;
  d.reasoning = "hmm";
  json chunk = BuildChunk(chat, {d}, /*include_usage_field=*/false);
  EXPECT_EQ(chunk["choices"][0]["delta"],
            json({{"reasoning_content", "hmm"}, {"reasoning", "hmm"}}));
  d.text = "4";
  chunk = BuildChunk(chat, {d}, /*include_usage_field=*/false);
  EXPECT_EQ(chunk["choices"][0]["delta"],
            json({{"reasoning_content", "hmm"}, {"reasoning", "hmm"}, {"content", "4"}}));
  json r = BuildResponse(chat, {d}, Usage{});
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "hmm");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning"], "hmm");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "4");
  d.reasoning.clear();
  r = BuildResponse(chat, {d}, Usage{});
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning"));
  EXPECT_FALSE(BuildChunk(chat, {d}, false)["choices"][0]["delta"].contains("reasoning_content"));
}

}  // namespace
}  // namespace folio::frontend::openai
