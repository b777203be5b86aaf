// ToolCallGrammar against the grammar matcher (every byte a token) and ToolCallParser: the
// text a grammar accepts is a call the parser reads back with arguments the schema
// validates; a wrong name, a missing required argument or a wrong type is refused.
#include "services/frontend/chat/tool_call_grammar.h"

#include <memory>
#include <string>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::frontend {
namespace {

using json = nlohmann::json;

const json& Tools() {
  static const auto* tools = new json(json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now"}}])"));
  return *tools;
}

// Every byte is a token, so AcceptBytes sees the grammar's own language.
std::shared_ptr<const structured::TokenVocabulary> ByteVocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.push_back("");  // EOS
  return std::make_shared<structured::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{256});
}

bool Accepts(const std::string& grammar, const std::string& text) {
  absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> g =
      structured::CompiledGrammar::Create(grammar, ByteVocab());
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << grammar;
  if (!g.ok()) return false;
  structured::GrammarMatcher m(*g);
  return m.AcceptBytes(text) && m.IsComplete();
}

// The calls ToolCallParser reads out of `text`.
std::vector<std::pair<std::string, json>> Parsed(ToolCallFormat format, const std::string& text) {
  ToolCallParserOptions o;
  o.format = format;
  ToolCallParser p(o);
  std::vector<std::pair<std::string, std::string>> calls;
  auto take = [&](const ToolParseDelta& d) {
    EXPECT_EQ(d.content, "") << text;
    for (const ToolCallDelta& c : d.calls) {
      if (!c.name.empty()) calls.emplace_back(c.name, "");
      calls.back().second += c.arguments;
    }
  };
  take(p.Feed(text));
  take(p.Finish());
  std::vector<std::pair<std::string, json>> out;
  for (const auto& [name, args] : calls) out.emplace_back(name, json::parse(args));
  return out;
}

struct FormatCase {
  ToolCallFormat format;
  std::string one;  // a valid single call
  std::string two;  // two calls
};

class ToolCallGrammarTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ToolCallGrammarTest, AcceptsValidCallsTheParserReads) {
  const FormatCase& c = GetParam();
  absl::StatusOr<std::string> any = ToolCallGrammar(c.format, Tools(), "", /*parallel=*/true);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_TRUE(Accepts(*any, c.one)) << c.one;
  EXPECT_TRUE(Accepts(*any, c.two)) << c.two;
  EXPECT_EQ(Parsed(c.format, c.one),
            (std::vector<std::pair<std::string, json>>{{"get_weather", {{"city", "Paris"}, {"days", 3}}}}));
  EXPECT_EQ(Parsed(c.format, c.two).size(), 2u);

  absl::StatusOr<std::string> single = ToolCallGrammar(c.format, Tools(), "", /*parallel=*/false);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(Accepts(*single, c.one));
  EXPECT_FALSE(Accepts(*single, c.two)) << "two calls without parallel_tool_calls";

  absl::StatusOr<std::string> named = ToolCallGrammar(c.format, Tools(), "now", true);
  ASSERT_TRUE(named.ok());
  EXPECT_FALSE(Accepts(*named, c.one)) << "get_weather when the choice names now";

  // What the schema refuses, the grammar refuses.
  std::string bad = c.one;
  bad.replace(bad.find("Paris"), 5, "Oslo!");
  EXPECT_FALSE(Accepts(*any, bad));
  bad = c.one;
  bad.replace(bad.find("3"), 1, "9");  // days > 7
  EXPECT_FALSE(Accepts(*any, bad));
  bad = c.one;
  bad.replace(bad.find("get_weather"), 11, "get_wether!");
  EXPECT_FALSE(Accepts(*any, bad));
}

INSTANTIATE_TEST_SUITE_P(
    Formats, ToolCallGrammarTest,
    ::testing::Values(
        FormatCase{ToolCallFormat::kHermes,
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"days\": 3}}\n</tool_call>",
                   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": "
                   "{}}\n</tool_call>"},
        FormatCase{ToolCallFormat::kLlama3Json,
                   "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
                   "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}; "
                   "{\"name\": \"now\", \"parameters\": {}}"},
        FormatCase{ToolCallFormat::kMistral,
                   "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"days\": 3}}]",
                   "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"days\": 3}}, {\"name\": \"now\", \"arguments\": {}}]"}));

TEST(ToolCallGrammarErrorsTest, NamesTheToolAndTheFunction) {
  json tools = Tools();
  tools[1]["function"]["parameters"] = {{"type", "object"}, {"patternProperties", json::object()}};
  absl::StatusOr<std::string> g = ToolCallGrammar(ToolCallFormat::kHermes, tools, "", true);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()),
              ::testing::StartsWith("tools[1].function.parameters: "));
  EXPECT_THAT(std::string(g.status().message()), ::testing::HasSubstr("patternProperties"));
  g = ToolCallGrammar(ToolCallFormat::kHermes, Tools(), "missing", true);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), ::testing::HasSubstr("'missing'"));
}

}  // namespace
}  // namespace folio::frontend
