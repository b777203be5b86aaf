#include "services/frontend/chat/reasoning_parser.h"

#include <string>
#include <string_view>
#include <vector>

#include "common/structured/grammar.h"
#include "common/structured/json_schema.h"
#include "common/structured/test_util.h"
#include "gtest/gtest.h"

namespace folio::frontend {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
  bool saw_reasoning = false;
  bool operator==(const Split& o) const {
    return reasoning == o.reasoning && content == o.content && saw_reasoning == o.saw_reasoning;
  }
};

std::ostream& operator<<(std::ostream& os, const Split& s) {
  return os << "{reasoning: \"" << s.reasoning << "\", content: \"" << s.content
            << "\", saw: " << s.saw_reasoning << "}";
}

Split Run(ReasoningStart start, const std::vector<std::string_view>& pieces) {
  ReasoningParser parser(start);
  Split s;
  for (std::string_view p : pieces) {
    ReasoningDelta d = parser.Feed(p);
    s.reasoning += d.reasoning;
    s.content += d.content;
  }
  ReasoningDelta d = parser.Finish();
  s.reasoning += d.reasoning;
  s.content += d.content;
  s.saw_reasoning = parser.saw_reasoning();
  return s;
}

Split Whole(ReasoningStart start, std::string_view text) { return Run(start, {text}); }

std::vector<std::string_view> Bytes(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size(); ++i) out.push_back(text.substr(i, 1));
  return out;
}

// Every one-cut and byte-by-byte feeding gives what the whole text gives.
void ExpectSplitsAgree(ReasoningStart start, std::string_view text, const Split& want) {
  EXPECT_EQ(Whole(start, text), want) << text;
  EXPECT_EQ(Run(start, Bytes(text)), want) << text << " byte by byte";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(Run(start, {text.substr(0, cut), text.substr(cut)}), want)
        << text << " cut at " << cut;
  }
}

TEST(ReasoningParserTest, SplitsReasoningFromTheAnswer) {
  ExpectSplitsAgree(ReasoningStart::kOutside, "<think>\nLet me see.\n</think>\n\nIt is 4.",
                    {"\nLet me see.\n", "It is 4.", true});
}

TEST(ReasoningParserTest, LeadingWhitespaceBeforeTheTagIsDropped) {
  ExpectSplitsAgree(ReasoningStart::kOutside, " \n<think>hm</think>ok", {"hm", "ok", true});
}

TEST(ReasoningParserTest, NoTagsIsAllContentByteForByte) {
  for (std::string_view text : {"", "   ", "Hello", " Hello <think>x</think>", "\n\n<thin",
                                "<thinking>no</thinking>", "<", " <think", "a</think>b"}) {
    ExpectSplitsAgree(ReasoningStart::kOutside, text, {"", std::string(text), false});
  }
}

TEST(ReasoningParserTest, StartsInsideWhenThePromptOpenedTheReasoning) {
  ExpectSplitsAgree(ReasoningStart::kInside, "Thinking...\n</think>\n\nDone.",
                    {"Thinking...\n", "Done.", true});
  // A <think> in the reasoning is reasoning text then.
  ExpectSplitsAgree(ReasoningStart::kInside, "<think>x</think>y", {"<think>x", "y", true});
}

TEST(ReasoningParserTest, AnOutputCutInsideTheReasoningIsAllReasoning) {
  ExpectSplitsAgree(ReasoningStart::kOutside, "<think>still going", {"still going", "", true});
  ExpectSplitsAgree(ReasoningStart::kInside, "still going </thi", {"still going </thi", "", true});
  ExpectSplitsAgree(ReasoningStart::kInside, "", {"", "", true});
}

TEST(ReasoningParserTest, PartialTagsInTheReasoningStayReasoning) {
  ExpectSplitsAgree(ReasoningStart::kOutside, "<think>a < b, </th x <</think>ok",
                    {"a < b, </th x <", "ok", true});
  ExpectSplitsAgree(ReasoningStart::kOutside, "<think><</</t</think>", {"<</</t", "", true});
}

TEST(ReasoningParserTest, OnlyWhitespaceRightAfterTheEndTagIsDropped) {
  ExpectSplitsAgree(ReasoningStart::kOutside, "<think>r</think> \n\t x \n<think>y</think>",
                    {"r", "x \n<think>y</think>", true});
  ExpectSplitsAgree(ReasoningStart::kOutside, "<think></think>\n\n", {"", "", true});
}

TEST(ReasoningParserTest, StreamedDeltasComeOutAsSoonAsTheyAreKnown) {
  ReasoningParser parser(ReasoningStart::kOutside);
  ReasoningDelta d = parser.Feed("<thi");
  EXPECT_TRUE(d.empty());
  d = parser.Feed("nk>abc</thi");
  EXPECT_EQ(d.reasoning, "abc");
  EXPECT_EQ(d.content, "");
  d = parser.Feed("nk>\n");
  EXPECT_TRUE(d.empty());
  d = parser.Feed("\nAnswer");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer");
  EXPECT_TRUE(parser.Finish().empty());

  ReasoningParser plain(ReasoningStart::kOutside);
  d = plain.Feed("Hi");
  EXPECT_EQ(d.content, "Hi");  // not held: it cannot open a tag
}

TEST(ReasoningParserTest, ThePromptDecidesWhereTheOutputStarts) {
  EXPECT_EQ(ReasoningStartOfPrompt("<|im_start|>assistant\n<think>\n"), ReasoningStart::kInside);
  EXPECT_EQ(ReasoningStartOfPrompt("<｜Assistant｜><think>"), ReasoningStart::kInside);
  EXPECT_EQ(ReasoningStartOfPrompt("<|im_start|>assistant\n"), ReasoningStart::kOutside);
  EXPECT_EQ(ReasoningStartOfPrompt("assistant\n<think>\n\n</think>\n\n"),
            ReasoningStart::kOutside);
  EXPECT_EQ(ReasoningStartOfPrompt(""), ReasoningStart::kOutside);
}

TEST(ReasoningParserTest, ModesByName) {
  EXPECT_EQ(*ReasoningParserModeByName("auto"), ReasoningParserMode::kAuto);
  EXPECT_EQ(*ReasoningParserModeByName("none"), ReasoningParserMode::kNone);
  EXPECT_EQ(*ReasoningParserModeByName("think"), ReasoningParserMode::kThink);
  // vLLM's names: the same tags; the prompt tells where the output starts.
  EXPECT_EQ(*ReasoningParserModeByName("qwen3"), ReasoningParserMode::kThink);
  EXPECT_EQ(*ReasoningParserModeByName("deepseek_r1"), ReasoningParserMode::kThink);
  EXPECT_FALSE(ReasoningParserModeByName("granite").ok());
}

TEST(ReasoningParserTest, CountsTheReasoningsTokens) {
  ReasoningParser parser(ReasoningStart::kOutside);
  parser.Feed(" ", 1);      // whitespace: may still open <think>
  parser.Feed("<thi", 1);   // a partial tag
  parser.Feed("nk>a", 1);   // opened: the three so far are reasoning
  parser.Feed(" b", 1);
  parser.Feed("</think>", 1);
  parser.Feed("\n\nAnswer", 2);  // the answer's
  EXPECT_EQ(parser.reasoning_tokens(), 5);

  ReasoningParser plain(ReasoningStart::kOutside);
  plain.Feed(" ", 1);
  plain.Feed("Hi", 1);
  plain.Feed(" there", 1);
  EXPECT_EQ(plain.reasoning_tokens(), 0);

  ReasoningParser inside(ReasoningStart::kInside);
  inside.Feed("x", 1);
  inside.Feed("</think>Answer", 2);  // one event ending the reasoning and going on: whole
  inside.Feed(" more", 1);
  EXPECT_EQ(inside.reasoning_tokens(), 3);
}

// The answer grammar (here a JSON schema's) holds only after the reasoning.
TEST(AfterReasoningGrammarTest, TheAnswerIsConstrainedAfterTheReasoningOnly) {
  absl::StatusOr<std::string> answer = structured::JsonSchemaToGrammar(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})", {});
  ASSERT_TRUE(answer.ok()) << answer.status();
  absl::StatusOr<std::string> inside = AfterReasoningGrammar(*answer, ReasoningStart::kInside);
  ASSERT_TRUE(inside.ok()) << inside.status();
  const std::string json_answer = R"({"a": 1})";
  EXPECT_TRUE(structured::GrammarMatches(*inside, "So, a is one.</think>\n\n" + json_answer));
  // Tags' prefixes and other tags inside the reasoning are reasoning.
  EXPECT_TRUE(structured::GrammarMatches(
      *inside, "<</thin </think <think> a<b </thinkk></think>" + json_answer));
  EXPECT_TRUE(structured::GrammarMatches(*inside, "</think>" + json_answer));  // no reasoning
  EXPECT_FALSE(structured::GrammarMatches(*inside, json_answer));  // never closed
  EXPECT_FALSE(structured::GrammarMatches(*inside, "hmm</think>\n\nno json"));
  EXPECT_FALSE(structured::GrammarMatches(*inside, "a</think>b</think>" + json_answer));
  // A long reasoning (the matcher's stack stays flat: the automaton recurses in tail position).
  std::string long_reasoning;
  for (int i = 0; i < 4000; ++i) long_reasoning += "step <b> é ";
  EXPECT_TRUE(structured::GrammarMatches(*inside, long_reasoning + "</think>" + json_answer));

  absl::StatusOr<std::string> outside = AfterReasoningGrammar(*answer, ReasoningStart::kOutside);
  ASSERT_TRUE(outside.ok()) << outside.status();
  EXPECT_TRUE(structured::GrammarMatches(*outside, json_answer));  // no reasoning at all
  EXPECT_TRUE(structured::GrammarMatches(*outside, "\n<think>\nfine</think>\n\n" + json_answer));
  EXPECT_FALSE(structured::GrammarMatches(*outside, "fine</think>" + json_answer));
  EXPECT_FALSE(structured::GrammarMatches(*outside, "<think>fine</think>nope"));
}

TEST(AfterReasoningGrammarTest, NamesTheWrapperTakesAreRefused) {
  EXPECT_FALSE(AfterReasoningGrammar("root ::= reasoning-answer\nreasoning-answer ::= \"x\"",
                                     ReasoningStart::kInside)
                   .ok());
  absl::StatusOr<std::string> g = AfterReasoningGrammar(
      "root ::= reasoning-think-3\nreasoning-think-3 ::= \"x\"", ReasoningStart::kInside);
  ASSERT_TRUE(g.ok());  // the text is made; compiling it names the rule defined twice
  EXPECT_FALSE(structured::Grammar::Parse(*g).ok());
}

}  // namespace
}  // namespace folio::frontend
