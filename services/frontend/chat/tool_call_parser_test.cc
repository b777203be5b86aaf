// ToolCallParser on outputs in each format, whole and streamed: every output is also fed
// cut at every byte (two pieces) and one byte at a time, and must give the same content
// and calls; the deltas must follow OpenAI's streaming shape (a call's id and name on its
// first delta only, indexes in order). The outputs are a table (ParseCase), one test each.
#include "services/frontend/chat/tool_call_parser.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace folio::frontend {
namespace {

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

// One output in one format: what the parser must make of it, whole, cut in two at every
// byte and byte by byte (RunEveryWay).
struct ParseCase {
  const char* name;  // the test's name
  ToolCallFormat format;
  std::string output;
  std::string content;      // the content it leaves
  std::vector<Call> calls;  // the calls it finds (ids aside)
  int max_calls = 1 << 30;  // parallel_tool_calls: false gives 1
};

std::ostream& operator<<(std::ostream& os, const ParseCase& c) { return os << c.name; }

class ToolCallParserCaseTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ToolCallParserCaseTest, WholeCutAndByteByByte) {
  const ParseCase& c = GetParam();
  const Parsed p = RunEveryWay(c.format, c.output, c.max_calls);
  EXPECT_EQ(p.content, c.content);
  EXPECT_EQ(p.calls, c.calls);
  // A call that closed has arguments that are JSON (one cut short need not).
  for (size_t i = 0; i < p.calls.size() && i < c.calls.size(); ++i) {
    if (nlohmann::json::accept(c.calls[i].arguments)) {
      EXPECT_TRUE(nlohmann::json::accept(p.calls[i].arguments)) << p.calls[i];
    }
  }
}

// Text that is not a call in `format`: content byte for byte, no calls.
ParseCase NotACall(const char* name, ToolCallFormat format, const std::string& output) {
  return {name, format, output, output, {}};
}

constexpr ToolCallFormat kHermes = ToolCallFormat::kHermes;
constexpr ToolCallFormat kLlama3 = ToolCallFormat::kLlama3Json;
constexpr ToolCallFormat kMistral = ToolCallFormat::kMistral;

constexpr char kQwenCallAfterContent[] =
    "Let me check the weather.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
constexpr char kQwenParallelCalls[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
    "\"Europe/Paris\"}}\n</tool_call>\n";

// --- Hermes 2 Pro / Qwen2.5 / Qwen3 ---
INSTANTIATE_TEST_SUITE_P(
    Hermes, ToolCallParserCaseTest,
    ::testing::Values(
        ParseCase{"QwenCallAfterContent", kHermes, kQwenCallAfterContent,
                  "Let me check the weather.",
                  {{"", "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}},
        // Parallel calls drop the whitespace between them.
        ParseCase{"QwenParallelCalls", kHermes, kQwenParallelCalls, "",
                  {{"", "get_weather", "{\"city\": \"Paris\"}"},
                   {"", "get_time", "{\"tz\": \"Europe/Paris\"}"}}},
        ParseCase{"QwenParallelCallsMaxOneKeepsTheFirst", kHermes, kQwenParallelCalls, "",
                  {{"", "get_weather", "{\"city\": \"Paris\"}"}}, /*max_calls=*/1},
        // Hermes 2 Pro's template asks for {"arguments": ..., "name": ...}.
        ParseCase{"HermesArgumentsBeforeNameAndNestedValues", kHermes,
                  "<tool_call>\n{\"arguments\": {\"query\": \"a \\\"quoted\\\" {brace}\", "
                  "\"filters\": [1, 2.5e3, {\"x\": null}], \"deep\": true}, \"name\": "
                  "\"search\"}\n</tool_call>",
                  "",
                  {{"", "search",
                    "{\"query\": \"a \\\"quoted\\\" {brace}\", \"filters\": [1, 2.5e3, {\"x\": "
                    "null}], \"deep\": true}"}}},
        NotACall("NotACallTagInProse", kHermes, "I would use <tool_call> tags, but not now.\n"),
        NotACall("NotACallNotJson", kHermes, "<tool_call>\nnot json at all\n</tool_call> done"),
        NotACall("NotACallNoName", kHermes,
                 "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>"),
        NotACall("NotACallNameNotAString", kHermes, "<tool_call>{\"name\": 12}</tool_call>"),
        NotACall("NotACallCutMarker", kHermes, "  spaces, <tool_ca and a cut marker  \n"),
        NotACall("NotACallMarkersOnly", kHermes, "<tool_call><tool_call><tool_cal"),
        NotACall("NotACallEmpty", kHermes, ""),
        NotACall("NotACallNewlines", kHermes, "\n\n"),
        ParseCase{"FailedAttemptThenARealCall", kHermes,
                  "<tool_call>oops</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                  "{}}\n</tool_call>",
                  "<tool_call>oops</tool_call>", {{"", "f", "{}"}}},
        ParseCase{"CallWithoutArguments", kHermes,
                  "<tool_call>\n{\"name\": \"now\"}\n</tool_call>", "", {{"", "now", "{}"}}},
        // max_tokens cut the call: it keeps what it had.
        ParseCase{"CallCutShort", kHermes,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa", "",
                  {{"", "get_weather", "{\"city\": \"Pa"}}},
        // Arguments sent as a JSON string are the text they hold.
        ParseCase{"ArgumentsAsAJsonString", kHermes,
                  "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
                  "", {{"", "f", "{\"a\": 1}"}}}),
    [](const ::testing::TestParamInfo<ParseCase>& info) { return info.param.name; });

// --- Llama 3.x ---
INSTANTIATE_TEST_SUITE_P(
    Llama3, ToolCallParserCaseTest,
    ::testing::Values(
        ParseCase{"Llama3JsonCall", kLlama3,
                  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, "
                  "CA\"}}",
                  "", {{"", "get_weather", "{\"city\": \"San Francisco, CA\"}"}}},
        ParseCase{"Llama3PythonTagTypeFunctionAndSeveralCalls", kLlama3,
                  "<|python_tag|>{\"type\": \"function\", \"name\": \"get_weather\", "
                  "\"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", "
                  "\"parameters\": {}}",
                  "",
                  {{"", "get_weather", "{\"city\": \"Paris\"}"}, {"", "get_time", "{}"}}},
        // The tag after some text.
        ParseCase{"Llama3PythonTagAfterContent", kLlama3,
                  "Checking.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}",
                  "Checking.", {{"", "f", "{\"x\": [1, 2]}"}}},
        NotACall("Llama3FirstKeyIsNotName", kLlama3, "{\"answer\": 42, \"name\": \"x\"}"),
        NotACall("Llama3NotAtTheStart", kLlama3, "The answer is {\"name\": \"f\"}"),
        NotACall("Llama3PythonTagBuiltinCall", kLlama3,
                 "<|python_tag|>brave_search.call(query=\"x\")"),
        NotACall("Llama3LoneBrace", kLlama3, "{"),
        // A call whose object never closes but has a name: it is a call, cut short (what
        // follows its arguments is content).
        ParseCase{"Llama3UnclosedCallWithTrailingText", kLlama3,
                  "  {\"name\": \"f\", \"parameters\": {\"a\": 1} trailing", "trailing",
                  {{"", "f", "{\"a\": 1}"}}}),
    [](const ::testing::TestParamInfo<ParseCase>& info) { return info.param.name; });

// --- Mistral ---
INSTANTIATE_TEST_SUITE_P(
    Mistral, ToolCallParserCaseTest,
    ::testing::Values(
        ParseCase{"MistralNemoList", kMistral,
                  "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                  "\"Paris\"}, \"id\": \"a1b2c3d4e\"}, {\"name\": \"get_time\", \"arguments\": "
                  "{\"tz\": \"CET\"}, \"id\": \"f5g6h7i8j\"}]",
                  "",
                  {{"", "get_weather", "{\"city\": \"Paris\"}"},
                   {"", "get_time", "{\"tz\": \"CET\"}"}}},
        ParseCase{"MistralNameArgsFormat", kMistral,
                  "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time"
                  "[CALL_ID]abc123XYZ[ARGS]{}",
                  "Sure.",
                  {{"", "get_weather", "{\"city\": \"Paris\"}"}, {"", "get_time", "{}"}}},
        NotACall("MistralNotAName", kMistral, "[TOOL_CALLS]not a name[ARGS]{}"),
        NotACall("MistralNoName", kMistral, "[TOOL_CALLS][ARGS]{}"),
        NotACall("MistralEmptyList", kMistral, "[TOOL_CALLS][]"),
        NotACall("MistralCutMarker", kMistral, "[TOOL_CALLS")),
    [](const ::testing::TestParamInfo<ParseCase>& info) { return info.param.name; });

// Streamed byte by byte, the arguments come in many fragments, not at the end.
TEST(ToolCallParserTest, QwenArgumentsStreamInManyFragments) {
  std::vector<std::string> bytes;
  for (char c : std::string(kQwenCallAfterContent)) bytes.emplace_back(1, c);
  EXPECT_GT(Parse(ToolCallFormat::kHermes, bytes).num_deltas, 20);
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
