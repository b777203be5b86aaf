// The other way from openai_chat_tools_test.cc: the scheduler plays a model's tool-call
// output and the client gets OpenAI's tool_calls, streamed and not, for each template
// family's format (the Llama 3 one on llama.cpp's llama-bpe vocabulary, whose
// <|python_tag|> is a control token), with tool_choice and parallel_tool_calls validated
// and honoured, and the grammar (eager or lazy, with its triggers) the scheduler is sent.
// The fixtures: chat_tools_test_env.h.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/structured/grammar_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/frontend/http/chat_tools_test_env.h"
#include "services/frontend/chat/tool_call_parser.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/service.h"
#include "tests/reference/llama_ref.h"

namespace folio::frontend::testing {
namespace {

using ordered_json = nlohmann::ordered_json;
namespace ipb = folio::internal::v1;

constexpr char kTwoCalls[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Rome\"}}\n</tool_call>";

// A stream's chunks joined as OpenAI's client libraries join them, checking OpenAI's shape
// on the way: a call's first delta has index, id, type "function" and function.name (and
// arguments ""); later ones only index and function.arguments.
struct Joined {
  std::string content;
  ordered_json calls = ordered_json::array();  // [{"id", "name", "arguments"}]
  std::string finish_reason;
};
Joined Join(const std::vector<ordered_json>& chunks) {
  Joined j;
  for (const ordered_json& chunk : chunks) {
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    for (const ordered_json& choice : chunk["choices"]) {
      const ordered_json& delta = choice["delta"];
      if (delta.contains("content") && delta["content"].is_string()) {
        j.content += delta["content"].get<std::string>();
      }
      if (choice["finish_reason"].is_string()) j.finish_reason = choice["finish_reason"];
      if (!delta.contains("tool_calls")) continue;
      for (const ordered_json& c : delta["tool_calls"]) {
        const size_t index = c["index"].get<size_t>();
        if (c.contains("id")) {
          EXPECT_EQ(index, j.calls.size()) << c.dump();
          EXPECT_EQ(c["type"], "function") << c.dump();
          EXPECT_TRUE(c["function"]["name"].is_string()) << c.dump();
          j.calls.push_back({{"id", c["id"]},
                             {"name", c["function"]["name"]},
                             {"arguments", c["function"].value("arguments", "")}});
        } else {
          EXPECT_FALSE(c.contains("type")) << c.dump();
          EXPECT_FALSE(c["function"].contains("name")) << c.dump();
          EXPECT_LT(index, j.calls.size()) << c.dump();
          if (index >= j.calls.size()) continue;
          j.calls[index]["arguments"] =
              j.calls[index]["arguments"].get<std::string>() +
              c["function"]["arguments"].get<std::string>();
        }
      }
    }
  }
  return j;
}

TEST_F(ToolCallsTest, HermesFormatBecomesToolCallsStreamedAndNot) {
  FrontendOptions options;
  options.chat_template = ReadFileOrEmpty(TemplatePath(kQwen25));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(kHermesOutput));

  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  const ordered_json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], SaidBefore(kHermesOutput, "\n<tool_call>"));
  EXPECT_EQ(SaidBefore(kHermesOutput, "\n<tool_call>"), " I'll check.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
  const ordered_json& call = choice["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("call_"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(ordered_json::parse(call["function"]["arguments"].get<std::string>()),
            ordered_json({{"city", "Paris"}}));

  const std::vector<ordered_json> chunks = Stream(Body());
  const Joined j = Join(chunks);
  EXPECT_EQ(j.content, " I'll check.");
  EXPECT_EQ(j.finish_reason, "tool_calls");
  ASSERT_EQ(j.calls.size(), 1u);
  EXPECT_EQ(j.calls[0]["name"], "get_weather");
  EXPECT_EQ(j.calls[0]["arguments"], call["function"]["arguments"]);
  // The arguments arrive in pieces as the tokens do, not all at the end.
  int argument_chunks = 0;
  for (const ordered_json& c : chunks) {
    for (const ordered_json& choice : c["choices"]) {
      if (choice["delta"].contains("tool_calls") &&
          !choice["delta"]["tool_calls"][0].contains("id")) {
        ++argument_chunks;
      }
    }
  }
  EXPECT_GT(argument_chunks, 5);
}

TEST_F(ToolCallsTest, ToolChoiceNoneNoToolsAndParallelToolCalls) {
  FrontendOptions options;
  options.chat_template = ReadFileOrEmpty(TemplatePath(kQwen25));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(kHermesOutput));
  // tool_choice none: no parsing, the text as the model wrote it.
  auto [s1, none] = Post(Body({{"tool_choice", "none"}}));
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(none["choices"][0]["message"]["content"], Said(kHermesOutput));
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(none["choices"][0]["finish_reason"], "stop");
  // No tools: no parsing either.
  ordered_json no_tools = Body();
  no_tools.erase("tools");
  auto [s2, plain] = Post(no_tools);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(plain["choices"][0]["message"]["content"], Said(kHermesOutput));

  Play(Encode(kTwoCalls));
  auto [s3, two] = Post(Body({{"tool_choice", "auto"}}));
  ASSERT_EQ(s3, 200);
  ASSERT_EQ(two["choices"][0]["message"]["tool_calls"].size(), 2u) << two.dump();
  EXPECT_TRUE(two["choices"][0]["message"]["content"].is_null());
  EXPECT_NE(two["choices"][0]["message"]["tool_calls"][0]["id"],
            two["choices"][0]["message"]["tool_calls"][1]["id"]);
  auto [s4, one] = Post(Body({{"parallel_tool_calls", false}}));
  ASSERT_EQ(s4, 200);
  ASSERT_EQ(one["choices"][0]["message"]["tool_calls"].size(), 1u) << one.dump();
  EXPECT_EQ(Join(Stream(Body({{"parallel_tool_calls", false}}))).calls.size(), 1u);
}

TEST_F(ToolCallsTest, BadToolChoiceIs400NamingIt) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));
  Play(Encode("ok"));
  struct Case {
    ordered_json extra;
    bool drop_tools;
    const char* message;
    const char* param;
  };
  const Case cases[] = {
      {{{"tool_choice", "sometimes"}}, false,
       "tool_choice must be \"auto\", \"none\", \"required\" or", "tool_choice"},
      {{{"tool_choice", {{"type", "function"}}}}, false, "tool_choice must be", "tool_choice"},
      {{{"tool_choice", 3}}, false, "tool_choice must be", "tool_choice"},
      {{{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}, false,
       "tool_choice names the function 'get_time', which is not in tools", "tool_choice"},
      {{{"tool_choice", "required"}}, true, "tool_choice \"required\" needs tools", "tool_choice"},
      {{{"parallel_tool_calls", "yes"}}, false, "parallel_tool_calls must be true or false",
       "parallel_tool_calls"},
  };
  for (const Case& c : cases) {
    ordered_json body = Body(c.extra);
    if (c.drop_tools) body.erase("tools");
    auto [status, r] = Post(body);
    EXPECT_EQ(status, 400) << c.extra.dump() << " " << r.dump();
    EXPECT_THAT(r["error"]["message"].get<std::string>(), ::testing::HasSubstr(c.message))
        << c.extra.dump();
    EXPECT_EQ(r["error"]["param"], c.param) << r.dump();
  }
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Result r = client.Post(
      "/v1/completions", ordered_json({{"prompt", "x"}, {"tool_choice", "auto"}}).dump(),
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, ::testing::HasSubstr("tool_choice is only taken by /v1/chat/completions"));
}

TEST_F(ToolCallsTest, RequiredAndNamedFunctionSendTheCallsGrammar) {
  FrontendOptions options;
  options.chat_template = ReadFileOrEmpty(TemplatePath(kQwen25));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(kHermesOutput));
  for (const ordered_json& choice :
       {ordered_json("required"),
        ordered_json({{"type", "function"}, {"function", {{"name", "get_weather"}}}})}) {
    auto [status, r] = Post(Body({{"tool_choice", choice}}));
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
    // The scheduler got the grammar of Hermes' call with get_weather's parameters.
    const std::string grammar = fake_->calls().back().request.grammar();
    EXPECT_NE(grammar.find("<tool_call>"), std::string::npos) << grammar;
    EXPECT_NE(grammar.find("get_weather"), std::string::npos) << grammar;
    EXPECT_NE(grammar.find("city"), std::string::npos) << grammar;
  }
  // auto sends the same calls grammar, lazy: triggered by <tool_call> in the output (text:
  // no control token here), and from the trigger on it accepts what a call looks like.
  ASSERT_EQ(Post(Body()).first, 200);
  const ipb::ScheduleRequest lazy = fake_->calls().back().request;
  ASSERT_EQ(lazy.grammar_triggers_size(), 1) << lazy.DebugString();
  EXPECT_EQ(lazy.grammar_triggers(0).text(), "<tool_call>");
  EXPECT_FALSE(lazy.grammar_triggers(0).has_token_id());
  EXPECT_FALSE(lazy.grammar_triggers(0).at_start());
  {
    auto compiled = structured::CompiledGrammar::Create(
        lazy.grammar(), std::make_shared<structured::TokenVocabulary>(
                            std::vector<std::string>{"x"}, std::vector<int32_t>{}));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const std::string text = kTwoCalls;
    structured::GrammarMatcher m(*compiled);
    EXPECT_TRUE(m.AcceptBytes(text)) << lazy.grammar();
    EXPECT_TRUE(m.IsComplete());
    structured::GrammarMatcher wrong_name(*compiled);
    EXPECT_FALSE(wrong_name.AcceptBytes("<tool_call>\n{\"name\": \"get_time\""));
  }
  // parallel_tool_calls false: one call, then the grammar is done.
  ASSERT_EQ(Post(Body({{"parallel_tool_calls", false}})).first, 200);
  EXPECT_EQ(fake_->calls().back().request.grammar_triggers_size(), 1);
  EXPECT_NE(fake_->calls().back().request.grammar(), lazy.grammar());
  // none: neither grammar nor triggers; auto with response_format: response_format's.
  ASSERT_EQ(Post(Body({{"tool_choice", "none"}})).first, 200);
  EXPECT_EQ(fake_->calls().back().request.grammar(), "");
  EXPECT_EQ(fake_->calls().back().request.grammar_triggers_size(), 0);
  ASSERT_EQ(Post(Body({{"response_format", {{"type", "json_object"}}}})).first, 200);
  EXPECT_NE(fake_->calls().back().request.grammar(), "");
  EXPECT_EQ(fake_->calls().back().request.grammar_triggers_size(), 0);
  // Both a tool choice and a response format constrain the output: one is enough.
  auto [s1, both] = Post(Body({{"tool_choice", "required"},
                               {"response_format", {{"type", "json_object"}}}}));
  EXPECT_EQ(s1, 400);
  EXPECT_EQ(both["error"]["param"], "tool_choice") << both.dump();
  // A parameters schema the grammar compiler does not take is named.
  ordered_json tools = WeatherTools();
  tools[0]["function"]["parameters"]["patternProperties"] = ordered_json::object();
  for (const char* mode : {"required", "auto"}) {
    auto [s2, bad] = Post(Body({{"tool_choice", mode}, {"tools", tools}}));
    EXPECT_EQ(s2, 400) << mode;
    EXPECT_THAT(bad["error"]["message"].get<std::string>(),
                ::testing::StartsWith("tools[0].function.parameters: "));
    EXPECT_EQ(bad["error"]["param"], "tools") << bad.dump();
  }
}

// A chat template that teaches no tool-call format (the default one teaches Hermes').
FrontendOptions PlainTemplate() {
  FrontendOptions o;
  o.chat_template =
      "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}assistant:{% endif %}";
  return o;
}

TEST_F(ToolCallsTest, RequiredNeedsATemplateWithAFormat) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(PlainTemplate()));
  Play(Encode("ok"));
  auto [status, r] = Post(Body({{"tool_choice", "required"}}));
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_THAT(r["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("--tool_call_parser"));
}

constexpr char kMistralOutput[] =
    "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
    "\"id\": \"abcdefghi\"}]";

TEST_F(ToolCallsTest, TemplateWithoutAFormatLeavesTheOutputContent) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(PlainTemplate()));
  Play(Encode(kMistralOutput));
  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], Said(kMistralOutput));
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
}

// A model without a template of its own: the default template teaches Hermes calls, and
// they are parsed with no flag.
TEST_F(ToolCallsTest, TheDefaultTemplateParsesHermesCalls) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));
  constexpr char kHermes[] =
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
  Play(Encode(kHermes));
  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(ToolCallsTest, ToolCallParserOptionForcesAFormat) {
  OpenAiServerOptions http_options;
  http_options.tool_call_parser = ToolCallFormat::kMistral;
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}, http_options));
  Play(Encode(kMistralOutput));
  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  const ordered_json& call = r["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["id"].get<std::string>().size(), 9u);  // Mistral's templates want 9
}

// Llama 3.1 on llama.cpp's llama-bpe vocabulary: <|python_tag|> is a control token, which
// decodes to nothing, except here, where the parser must see it.
TEST_F(ToolCallsTest, Llama3PythonTagControlTokenIsSeenByTheParser) {
  absl::StatusOr<Vocab> vocab =
      worker::LoadGgufVocab(reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  // That file is Llama 3.0's vocabulary; Llama 3.1's is the same with two reserved control
  // tokens named.
  ASSERT_EQ(vocab->pieces[128008], "<|reserved_special_token_4|>");
  ASSERT_EQ(vocab->pieces[128010], "<|reserved_special_token_5|>");
  vocab->pieces[128008] = "<|eom_id|>";
  vocab->pieces[128010] = "<|python_tag|>";
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  *info_.mutable_tokenizer() = worker::TokenizerSpecFromVocab(*vocab);
  info_.mutable_model()->set_vocab_size(vocab->size());
  FrontendOptions options;
  options.chat_template = ReadFileOrEmpty(TemplatePath("meta-llama-Llama-3.1-8B-Instruct.jinja"));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));

  const std::string text =
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eom_id|>";
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(text, AddBos::kNo, ParseSpecial::kYes);
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<TokenSurface> tag = tok->Surface(ids->front());
  ASSERT_TRUE(tag.ok());
  ASSERT_EQ(tag->kind, TokenSurface::Kind::kControl) << "<|python_tag|> is not one control token";
  fake_->SetScript(TokensScript(*ids, ipb::FINISH_REASON_STOP, 7));

  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Paris\"}");
  // auto's lazy grammar starts at <|python_tag|>, as text or as its control token, or at a
  // {"name" opening the output.
  const ipb::ScheduleRequest lazy = fake_->calls().back().request;
  ASSERT_EQ(lazy.grammar_triggers_size(), 3) << lazy.DebugString();
  EXPECT_EQ(lazy.grammar_triggers(0).text(), "<|python_tag|>");
  EXPECT_FALSE(lazy.grammar_triggers(0).has_token_id());
  EXPECT_EQ(lazy.grammar_triggers(1).text(), "<|python_tag|>");
  EXPECT_EQ(lazy.grammar_triggers(1).token_id(), 128010);
  EXPECT_EQ(lazy.grammar_triggers(2).text(), "{\"name\"");
  EXPECT_TRUE(lazy.grammar_triggers(2).at_start());
  {
    auto compiled = structured::CompiledGrammar::Create(
        lazy.grammar(), std::make_shared<structured::TokenVocabulary>(
                            std::vector<std::string>{"x"}, std::vector<int32_t>{}));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    for (const char* from : {"<|python_tag|>", ""}) {
      structured::GrammarMatcher m(*compiled);
      EXPECT_TRUE(m.AcceptBytes(absl::StrCat(
          from, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}")))
          << from << "\n" << lazy.grammar();
      EXPECT_TRUE(m.IsComplete());
    }
  }
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  const Joined j = Join(Stream(Body()));
  ASSERT_EQ(j.calls.size(), 1u);
  EXPECT_EQ(j.calls[0]["name"], "get_weather");
  EXPECT_EQ(j.content, "");
  // Without tools the control tokens decode to nothing, as always.
  ordered_json no_tools = Body();
  no_tools.erase("tools");
  auto [s2, plain] = Post(no_tools);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(plain["choices"][0]["message"]["content"],
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
}
}  // namespace
}  // namespace folio::frontend::testing
