// ToolCallParser on outputs in each format, whole and streamed: every output is also fed
// cut at every byte (two pieces) and one byte at a time, and must give the same content
// and calls; the deltas must follow OpenAI's streaming shape (a call's id and name on its
// first delta only, indexes in order).
#include "services/frontend/http/tool_call_parser.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace folio::frontend {
namespace {

using ::testing::ElementsAre;

struct Call {
  std::string id, name, arguments;
  bool operator==(const Call& o) const {
    return name == o.name && arguments == o.arguments;  // ids are random
  }
  friend std::ostream& operator<<(std::ostream& os, const Call& c) {
    return os << c.name << "(" << c.arguments << ")";
  }
};

struct Parsed {
  std::string content;
  std::vector<Call> calls;
  int num_deltas = 0;  // argument fragments seen
};

// Feeds `pieces`, checks the delta protocol, and joins the result.
Parsed Parse(ToolCallFormat format, const std::vector<std::string>& pieces, int max_calls = 1 << 30) {
  ToolCallParserOptions o;
  o.format = format;
  o.max_calls = max_calls;
  int next_id = 0;
  o.make_id = [&] { return absl::StrCat("id", next_id++); };
  ToolCallParser parser(o);
  Parsed p;
  auto take = [&](const ToolParseDelta& d) {
    p.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (!c.name.empty()) {
        EXPECT_EQ(c.index, static_cast<int>(p.calls.size())) << "a call's first delta out of order";
        EXPECT_FALSE(c.id.empty());
        p.calls.push_back(Call{c.id, c.name, c.arguments});
      } else {
        EXPECT_TRUE(c.id.empty()) << "id on a later delta";
        ASSERT_FALSE(p.calls.empty()) << "arguments before the call's name";
        EXPECT_EQ(c.index, static_cast<int>(p.calls.size()) - 1) << "arguments of an earlier call";
        p.calls.back().arguments += c.arguments;
      }
      if (!c.arguments.empty()) ++p.num_deltas;
    }
  };
  for (const std::string& piece : pieces) take(parser.Feed(piece));
  take(parser.Finish());
  EXPECT_EQ(parser.num_calls(), static_cast<int>(p.calls.size()));
  return p;
}

// The output whole, cut in two at every byte, and byte by byte: all the same.
Parsed RunEveryWay(ToolCallFormat format, const std::string& text, int max_calls = 1 << 30) {
  const Parsed whole = Parse(format, {text}, max_calls);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Parsed two = Parse(format, {text.substr(0, cut), text.substr(cut)}, max_calls);
    EXPECT_EQ(two.content, whole.content) << "cut at " << cut;
    EXPECT_EQ(two.calls, whole.calls) << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const Parsed one = Parse(format, bytes, max_calls);
  EXPECT_EQ(one.content, whole.content) << "byte by byte";
  EXPECT_EQ(one.calls, whole.calls) << "byte by byte";
  return whole;
}

void ExpectArgumentsAreJson(const std::vector<Call>& calls) {
  for (const Call& c : calls) {
    EXPECT_TRUE(nlohmann::json::accept(c.arguments)) << c;
  }
}

// --- Hermes 2 Pro / Qwen2.5 / Qwen3 ---

TEST(ToolCallParserTest, QwenCallAfterContent) {
  const std::string out =
      "Let me check the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
  const Parsed p = RunEveryWay(ToolCallFormat::kHermes, out);
  EXPECT_EQ(p.content, "Let me check the weather.");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather",
                                        "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}));
  // Streamed byte by byte, the arguments come in many fragments, not at the end.
  std::vector<std::string> bytes;
  for (char c : out) bytes.emplace_back(1, c);
  EXPECT_GT(Parse(ToolCallFormat::kHermes, bytes).num_deltas, 20);
}

TEST(ToolCallParserTest, QwenParallelCallsDropTheWhitespaceBetween) {
  const std::string out =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
      "\"Europe/Paris\"}}\n</tool_call>\n";
  const Parsed p = RunEveryWay(ToolCallFormat::kHermes, out);
  EXPECT_EQ(p.content, "");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"Paris\"}"},
                                   Call{"", "get_time", "{\"tz\": \"Europe/Paris\"}"}));
  // parallel_tool_calls: false keeps the first.
  const Parsed one = RunEveryWay(ToolCallFormat::kHermes, out, /*max_calls=*/1);
  EXPECT_THAT(one.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"Paris\"}"}));
  EXPECT_EQ(one.content, "");
}

TEST(ToolCallParserTest, HermesArgumentsBeforeNameAndNestedValues) {
  // Hermes 2 Pro's template asks for {"arguments": ..., "name": ...}.
  const std::string out =
      "<tool_call>\n{\"arguments\": {\"query\": \"a \\\"quoted\\\" {brace}\", \"filters\": "
      "[1, 2.5e3, {\"x\": null}], \"deep\": true}, \"name\": \"search\"}\n</tool_call>";
  const Parsed p = RunEveryWay(ToolCallFormat::kHermes, out);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "search");
  EXPECT_EQ(p.calls[0].arguments,
            "{\"query\": \"a \\\"quoted\\\" {brace}\", \"filters\": [1, 2.5e3, {\"x\": null}], "
            "\"deep\": true}");
  ExpectArgumentsAreJson(p.calls);
}

TEST(ToolCallParserTest, NotACallStaysContentByteForByte) {
  for (const std::string out : {
           std::string("I would use <tool_call> tags, but not now.\n"),
           std::string("<tool_call>\nnot json at all\n</tool_call> done"),
           std::string("<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>"),  // no name
           std::string("<tool_call>{\"name\": 12}</tool_call>"),
           std::string("  spaces, <tool_ca and a cut marker  \n"),
           std::string("<tool_call><tool_call><tool_cal"),
           std::string(""),
           std::string("\n\n"),
       }) {
    const Parsed p = RunEveryWay(ToolCallFormat::kHermes, out);
    EXPECT_EQ(p.content, out);
    EXPECT_TRUE(p.calls.empty()) << out;
  }
}

TEST(ToolCallParserTest, FailedAttemptThenARealCall) {
  const std::string out =
      "<tool_call>oops</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
      "</tool_call>";
  const Parsed p = RunEveryWay(ToolCallFormat::kHermes, out);
  EXPECT_EQ(p.content, "<tool_call>oops</tool_call>");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "f", "{}"}));
}

TEST(ToolCallParserTest, ContentIsNotHeldBackLongerThanAMarkerPrefix) {
  ToolCallParserOptions o;
  o.format = ToolCallFormat::kHermes;
  ToolCallParser parser(o);
  EXPECT_EQ(parser.Feed("Hello wor").content, "Hello wor");
  EXPECT_EQ(parser.Feed("ld <tool").content, "ld");  // " <tool" may open a call
  EXPECT_EQ(parser.Feed("box> ok").content, " <toolbox> ok");
  EXPECT_EQ(parser.Finish().content, "");
}

TEST(ToolCallParserTest, CallWithoutArgumentsOrCutShort) {
  Parsed p = RunEveryWay(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"now\"}\n</tool_call>");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "now", "{}"}));
  // max_tokens cut the call: it keeps what it had.
  p = RunEveryWay(ToolCallFormat::kHermes,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"Pa"}));
  // Arguments sent as a JSON string are the text they hold.
  p = RunEveryWay(ToolCallFormat::kHermes,
                  "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "f", "{\"a\": 1}"}));
}

// --- Llama 3.x ---

TEST(ToolCallParserTest, Llama3JsonCall) {
  const std::string out =
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}";
  const Parsed p = RunEveryWay(ToolCallFormat::kLlama3Json, out);
  EXPECT_EQ(p.content, "");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"San Francisco, CA\"}"}));
}

TEST(ToolCallParserTest, Llama3PythonTagTypeFunctionAndSeveralCalls) {
  const std::string out =
      "<|python_tag|>{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": "
      "{\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}";
  const Parsed p = RunEveryWay(ToolCallFormat::kLlama3Json, out);
  EXPECT_EQ(p.content, "");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"Paris\"}"},
                                   Call{"", "get_time", "{}"}));
  // The tag after some text.
  const Parsed q = RunEveryWay(
      ToolCallFormat::kLlama3Json,
      "Checking.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}");
  EXPECT_EQ(q.content, "Checking.");
  EXPECT_THAT(q.calls, ElementsAre(Call{"", "f", "{\"x\": [1, 2]}"}));
}

TEST(ToolCallParserTest, Llama3JsonThatIsNotACallIsContent) {
  for (const std::string out : {
           std::string("{\"answer\": 42, \"name\": \"x\"}"),  // first key is not name
           std::string("  {\"name\": \"f\", \"parameters\": {\"a\": 1} trailing"),
           std::string("The answer is {\"name\": \"f\"}"),  // not at the start
           std::string("<|python_tag|>brave_search.call(query=\"x\")"),
           std::string("{"),
       }) {
    const Parsed p = RunEveryWay(ToolCallFormat::kLlama3Json, out);
    if (out.find("trailing") != std::string::npos) {
      // A call whose object never closes but has a name: it is a call, cut short.
      EXPECT_EQ(p.calls.size(), 1u) << out;
      continue;
    }
    EXPECT_EQ(p.content, out);
    EXPECT_TRUE(p.calls.empty()) << out;
  }
}

// --- Mistral ---

TEST(ToolCallParserTest, MistralNemoList) {
  const std::string out =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
      "\"a1b2c3d4e\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}, \"id\": "
      "\"f5g6h7i8j\"}]";
  const Parsed p = RunEveryWay(ToolCallFormat::kMistral, out);
  EXPECT_EQ(p.content, "");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"Paris\"}"},
                                   Call{"", "get_time", "{\"tz\": \"CET\"}"}));
}

TEST(ToolCallParserTest, MistralNameArgsFormat) {
  const std::string out =
      "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]"
      "abc123XYZ[ARGS]{}";
  const Parsed p = RunEveryWay(ToolCallFormat::kMistral, out);
  EXPECT_EQ(p.content, "Sure.");
  EXPECT_THAT(p.calls, ElementsAre(Call{"", "get_weather", "{\"city\": \"Paris\"}"},
                                   Call{"", "get_time", "{}"}));
  for (const std::string& bad : {std::string("[TOOL_CALLS]not a name[ARGS]{}"),
                                std::string("[TOOL_CALLS][ARGS]{}"),
                                std::string("[TOOL_CALLS][]"), std::string("[TOOL_CALLS")}) {
    const Parsed q = RunEveryWay(ToolCallFormat::kMistral, bad);
    EXPECT_EQ(q.content, bad);
    EXPECT_TRUE(q.calls.empty()) << bad;
  }
}

TEST(ToolCallParserTest, IdsAreOpenAisShapeAndMistralsNineCharacters) {
  const std::string id = NewToolCallId(ToolCallFormat::kHermes);
  EXPECT_EQ(id.size(), 29u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  EXPECT_NE(id, NewToolCallId(ToolCallFormat::kHermes));
  const std::string m = NewToolCallId(ToolCallFormat::kMistral);
  EXPECT_EQ(m.size(), 9u);
  for (char c : m) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << m;
  ToolCallParserOptions o;
  o.format = ToolCallFormat::kMistral;
  ToolCallParser parser(o);
  ToolParseDelta d = parser.Feed("[TOOL_CALLS]f[ARGS]{}");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].id.size(), 9u);
}

TEST(ToolCallParserTest, FormatNames) {
  EXPECT_EQ(*ToolCallFormatByName("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(*ToolCallFormatByName("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(*ToolCallFormatByName("mistral"), ToolCallFormat::kMistral);
  absl::StatusOr<ToolCallFormat> bad = ToolCallFormatByName("qwen9");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("unknown tool call parser 'qwen9'; the parsers are llama3_json"));
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kMistral}) {
    EXPECT_EQ(*ToolCallFormatByName(ToolCallFormatName(f)), f);
  }
}

}  // namespace
}  // namespace folio::frontend
