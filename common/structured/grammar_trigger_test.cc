#include "common/structured/grammar_trigger.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace folio::structured {
namespace {

// Feeds `pieces` as tokens 100, 101, ...; returns (index of the firing token, fed bytes),
// or (-1, "") when none fires.
std::pair<int, std::string> Watch(const std::vector<GrammarTrigger>& triggers,
                                  const std::vector<std::string>& pieces) {
  TriggerWatch watch(triggers);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (std::optional<std::string> fed = watch.Accept(100 + static_cast<int32_t>(i), pieces[i])) {
      EXPECT_TRUE(watch.fired());
      return {static_cast<int>(i), *fed};
    }
    EXPECT_FALSE(watch.fired());
  }
  return {-1, ""};
}

TEST(TriggerWatchTest, TextAcrossTokenBoundaries) {
  const std::vector<GrammarTrigger> t = {{.text = "<tool_call>"}};
  EXPECT_EQ(Watch(t, {"Let me check. <to", "ol_c", "all>\n{\"na", "me"}),
            (std::pair<int, std::string>{2, "<tool_call>\n{\"na"}));
  EXPECT_EQ(Watch(t, {"<tool_call>"}), (std::pair<int, std::string>{0, "<tool_call>"}));
  EXPECT_EQ(Watch(t, {"<", "t", "o", "o", "l", "_", "c", "a", "l", "l", ">"}),
            (std::pair<int, std::string>{10, "<tool_call>"}));
  // A near miss and a marker broken by other text never fire.
  EXPECT_EQ(Watch(t, {"<tool_cal", "l >", "<tool_", "x", "call>"}).first, -1);
  // Long free text before it: the window keeps only what a trigger may start in.
  std::vector<std::string> long_text(500, "word ");
  long_text.push_back("<tool_");
  long_text.push_back("call>");
  EXPECT_EQ(Watch(t, long_text), (std::pair<int, std::string>{501, "<tool_call>"}));
}

TEST(TriggerWatchTest, EarliestTriggerWins) {
  const std::vector<GrammarTrigger> t = {{.text = "[B]"}, {.text = "[A]"}};
  EXPECT_EQ(Watch(t, {"x [A", "] [B]"}), (std::pair<int, std::string>{1, "[A] [B]"}));
  EXPECT_EQ(Watch(t, {"x [B] [A]"}), (std::pair<int, std::string>{0, "[B] [A]"}));
}

TEST(TriggerWatchTest, AtStartOnlyOpensTheOutput) {
  const std::vector<GrammarTrigger> t = {{.text = "{\"name\"", .at_start = true}};
  EXPECT_EQ(Watch(t, {"\n ", " {\"", "name", "\": \"f"}),
            (std::pair<int, std::string>{3, "{\"name\": \"f"}));
  EXPECT_EQ(Watch(t, {"{\"name\""}), (std::pair<int, std::string>{0, "{\"name\""}));
  EXPECT_EQ(Watch(t, {"Sure: ", "{\"name\""}).first, -1);
  EXPECT_EQ(Watch(t, {"{\"nom\"", "{\"name\""}).first, -1);
  // Only whitespace for a long while keeps the start open.
  std::vector<std::string> spaces(300, " ");
  spaces.push_back("{\"name\"");
  EXPECT_EQ(Watch(t, spaces).first, 300);
}

TEST(TriggerWatchTest, TokenTriggerStandsForItsText) {
  const std::vector<GrammarTrigger> t = {{.text = "<|python_tag|>", .token_id = 102},
                                         {.text = "{\"name\"", .at_start = true}};
  // Token 102 is the control token; its bytes (empty) do not matter.
  EXPECT_EQ(Watch(t, {"Calling ", "now", ""}), (std::pair<int, std::string>{2, "<|python_tag|>"}));
  // The text of a token trigger alone, written as text, does not fire it.
  EXPECT_EQ(Watch(std::vector<GrammarTrigger>{{.text = "<|python_tag|>", .token_id = 7}}, {"<|python_tag|>"}).first, -1);
}

TEST(TriggerWatchTest, CopyForksAndDoneAfterFiring) {
  const std::vector<GrammarTrigger> t = {{.text = "<tool_call>"}};
  TriggerWatch a(t);
  EXPECT_FALSE(a.Accept(1, "ab <tool").has_value());
  TriggerWatch b = a;
  EXPECT_EQ(a.Accept(2, "_call>"), "<tool_call>");
  EXPECT_FALSE(b.Accept(2, "_cal").has_value());
  EXPECT_EQ(b.Accept(3, "l>x"), "<tool_call>x");
  EXPECT_FALSE(a.Accept(4, "<tool_call>").has_value());  // fired once; the grammar has it now
}

TEST(TriggerWatchTest, ValidationNamesTheTrigger) {
  EXPECT_TRUE(ValidateGrammarTriggers({{.text = "<tool_call>"}, {.text = "x", .token_id = 3}}, 10)
                  .ok());
  const absl::Status empty = ValidateGrammarTriggers({{.text = "a"}, {.text = ""}}, 10);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("grammar_triggers[1].text is empty"), std::string::npos) << empty;
  const absl::Status id = ValidateGrammarTriggers({{.text = "a", .token_id = 10}}, 10);
  EXPECT_NE(id.message().find("grammar_triggers[0].token_id 10 is outside"), std::string::npos)
      << id;
  EXPECT_FALSE(ValidateGrammarTriggers({{.text = std::string(65, 'x')}}, 10).ok());
  EXPECT_FALSE(ValidateGrammarTriggers(std::vector<GrammarTrigger>(17, {.text = "a"}), 10).ok());
  EXPECT_FALSE(ValidateGrammarTriggers({{.text = "a", .token_id = 1, .at_start = true}}, 10).ok());
}

}  // namespace
}  // namespace folio::structured
