#include "services/frontend/chat/chat_template_input.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/frontend/chat/chat_template.h"
#include "services/frontend/http/openai_json.h"

namespace folio::frontend {
namespace {

using ::testing::HasSubstr;

constexpr char kToolBody[] = R"({
  "model": "m",
  "messages": [
    {"role": "system", "content": [{"type": "text", "text": "Use "}, {"type": "text", "text": "tools."}]},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}},
      {"id": "c2", "type": "function", "function": {"name": "noop", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "4 C", "zeta": 1, "alpha": 2}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
  "add_generation_prompt": false,
  "chat_template_kwargs": {"enable_thinking": false}
})";

// A template in the Hugging Face style: it indexes arguments as a dict and iterates a
// message's keys (their order is the request's).
constexpr char kToolTemplate[] =
    "{% for t in tools %}[tool {{ t.function.name }}]{% endfor %}"
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.content is string %}{{ m.content }}{% elif m.content is none %}(none){% endif %}"
    "{% for c in m.tool_calls or [] %}{% if c.function.arguments is mapping %}"
    "{{ c.function.name }}({{ c.function.arguments.city }},{{ c.function.arguments | tojson }})"
    "{% else %}{{ c.function.name }}<{{ c.function.arguments }}>{% endif %}{% endfor %}"
    "{% if m.role == 'tool' %}#{{ m.tool_call_id }} {{ m.keys() | list }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}[no think]{% endif %}";

TEST(ChatTemplateInputTest, MessageShapesReachTheTemplate) {
  absl::StatusOr<ChatInput> input = ParseChatInput(kToolBody);
  ASSERT_TRUE(input.ok()) << input.status();
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(kToolTemplate, "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> out = t->Render(*input);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "[tool get_weather]<system>Use tools.<user>Weather in Oslo?<assistant>(none)"
            "get_weather(Oslo,{\"city\": \"Oslo\", \"days\": 2})noop<not json>"
            "<tool>4 C#c1 ['role', 'tool_call_id', 'content', 'zeta', 'alpha'][no think]");
}

TEST(ChatTemplateInputTest, ReasoningComesBackUnderEitherName) {
  // vLLM's clients send `reasoning`, llama.cpp's and DeepSeek's `reasoning_content`; the
  // template reads reasoning_content (and the client's own field stays as it was).
  absl::StatusOr<ChatInput> input = ParseChatInput(R"({"messages": [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4", "reasoning": "two and two"},
    {"role": "assistant", "content": "5", "reasoning": "ignored", "reasoning_content": "kept"},
    {"role": "assistant", "content": "6", "reasoning_content": null}]})");
  ASSERT_TRUE(input.ok()) << input.status();
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(
      "{% for m in messages %}[{{ m.reasoning_content }}|{{ m.reasoning }}]{% endfor %}", "<s>",
      "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> out = t->Render(*input);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[|][two and two|two and two][kept|ignored][None|]");  // null renders as Jinja2 does

  absl::StatusOr<ChatInput> bad = ParseChatInput(
      R"({"messages": [{"role": "assistant", "content": "4", "reasoning": 7}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("messages[0].reasoning"));
}

TEST(ChatTemplateInputTest, TheOpenAiRequestCarriesTheFullMessages) {
  // ParseRequest still rejects tools (until the server renders Request::chat); without
  // them the messages, tool calls included, reach the template through Request::messages.
  std::string body = kToolBody;
  body.replace(body.find("\"tools\""), std::string("\"tools\"").size(), "\"unused_tools\"");
  absl::StatusOr<openai::Request> r = openai::ParseRequest(openai::Endpoint::kChatCompletions, body);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].content, "Use tools.");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Create(kToolTemplate, "<s>", "</s>");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> out = t->Render(r->messages, /*add_generation_prompt=*/true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("<assistant>(none)get_weather(Oslo,"));
  EXPECT_THAT(*out, HasSubstr("#c1 ['role', 'tool_call_id'"));
}

TEST(ChatTemplateInputTest, BadShapesNameTheField) {
  auto error = [](const std::string& body) {
    absl::StatusOr<ChatInput> in = ParseChatInput(body);
    return in.ok() ? std::string("OK") : std::string(in.status().message());
  };
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages[0].content[0] is not a text part; only {\"type\": \"text\", \"text\": ...} "
            "parts are supported");
  EXPECT_EQ(error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]})"),
            "messages[0].tool_calls[0].function.name must be a string");
  EXPECT_EQ(error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})"),
            "messages[0].tool_calls[0].function.arguments must be a string or an object");
  EXPECT_EQ(error(R"({"messages": [{"role": "tool", "tool_call_id": 7, "content": "x"}]})"),
            "messages[0].tool_call_id must be a string");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": 5}]})"),
            "messages[0].content must be a string, null or an array of text parts");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})"),
            "tools[0].function must be an object");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": 1}})"),
            "chat_template_kwargs cannot set 'messages'");
  EXPECT_EQ(error(R"({"messages": []})"), "messages is empty");
  EXPECT_EQ(error(R"([1])"), "the request body must be a JSON object");
}

}  // namespace
}  // namespace folio::frontend
