#include "common/structured/grammar.h"

#include <string>

#include "absl/status/status.h"
#include "common/structured/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::structured {
namespace {

using ::testing::HasSubstr;

TEST(GrammarTest, LiteralsClassesAndOperators) {
  const char* g = R"(
    # a comment
    root ::= "ab" [0-9]+ ("x" | "y")? tail
    tail ::= "." | ""
  )";
  EXPECT_TRUE(GrammarMatches(g, "ab1"));
  EXPECT_TRUE(GrammarMatches(g, "ab123x."));
  EXPECT_TRUE(GrammarMatches(g, "ab9y"));
  EXPECT_FALSE(GrammarMatches(g, "ab"));
  EXPECT_FALSE(GrammarMatches(g, "ab1xy"));
  EXPECT_FALSE(GrammarMatches(g, "abx"));
}

TEST(GrammarTest, BoundedRepetition) {
  const char* g = R"(root ::= "a"{2,4} "b"{3} "c"{1,})";
  EXPECT_FALSE(GrammarMatches(g, "abbbc"));
  EXPECT_TRUE(GrammarMatches(g, "aabbbc"));
  EXPECT_TRUE(GrammarMatches(g, "aaaabbbccc"));
  EXPECT_FALSE(GrammarMatches(g, "aaaaabbbc"));
  EXPECT_FALSE(GrammarMatches(g, "aabbc"));
  EXPECT_FALSE(GrammarMatches(g, "aabbb"));
}

TEST(GrammarTest, UnicodeClassesLowerToUtf8) {
  const char* g = R"(root ::= [α-ω]+ [^a-z] .)";
  EXPECT_TRUE(GrammarMatches(g, "αβγ!x"));
  EXPECT_TRUE(GrammarMatches(g, "ω€😀"));
  EXPECT_FALSE(GrammarMatches(g, "αbx"));
  EXPECT_FALSE(GrammarMatches(g, "a!x"));
  // Invalid UTF-8 never matches a class.
  EXPECT_FALSE(GrammarMatches(g, "α\xC3x"));
  EXPECT_FALSE(GrammarMatches(g, "α!\xED\xA0\x80"));  // a surrogate
}

TEST(GrammarTest, EscapesAndMultilineRules) {
  const char* g = "root ::= \"\\\"\" [\\n\\t\\x41\\u00e9]\n   \"\\\\\"\nother ::= \"z\"";
  EXPECT_TRUE(GrammarMatches(g, "\"\n\\"));
  EXPECT_TRUE(GrammarMatches(g, "\"A\\"));
  EXPECT_TRUE(GrammarMatches(g, "\"\xC3\xA9\\"));
  EXPECT_FALSE(GrammarMatches(g, "\"B\\"));
}

TEST(GrammarTest, RecursionWithoutLeftRecursion) {
  const char* g = R"(
    root ::= list
    list ::= "[" (item ("," item)*)? "]"
    item ::= [0-9] | list
  )";
  EXPECT_TRUE(GrammarMatches(g, "[]"));
  EXPECT_TRUE(GrammarMatches(g, "[1,[2,[3,[]]],4]"));
  EXPECT_FALSE(GrammarMatches(g, "[1,]"));
  EXPECT_FALSE(GrammarMatches(g, "[[1]"));
}

absl::Status ParseError(std::string_view text) { return Grammar::Parse(text).status(); }

TEST(GrammarTest, ErrorsNameTheProblem) {
  EXPECT_THAT(ParseError("").message(), HasSubstr("empty"));
  EXPECT_THAT(ParseError("a ::= \"x\"").message(), HasSubstr("no \"root\" rule"));
  EXPECT_THAT(ParseError("root ::= foo").message(), HasSubstr("undefined rule \"foo\""));
  EXPECT_THAT(ParseError("root ::= \"x").message(), HasSubstr("unterminated literal"));
  EXPECT_THAT(ParseError("root ::= [a-").message(), HasSubstr("unterminated character class"));
  EXPECT_THAT(ParseError("root ::= [z-a]").message(), HasSubstr("out of order"));
  EXPECT_THAT(ParseError("root ::= (\"a\"").message(), HasSubstr("unbalanced"));
  EXPECT_THAT(ParseError("root ::= \"a\")").message(), HasSubstr("unbalanced"));
  EXPECT_THAT(ParseError("root ::= root \"a\" | \"b\"").message(),
              HasSubstr("rule \"root\" is left-recursive"));
  EXPECT_THAT(ParseError("root ::= (\"a\"?)*").message(), HasSubstr("left-recursive"));
  EXPECT_THAT(ParseError("root ::= \"a\"{3,2}").message(), HasSubstr("n < m"));
  EXPECT_THAT(ParseError("root ::= \"a\"{99999}").message(), HasSubstr("limit"));
  EXPECT_THAT(ParseError("root ::= \"\\q\"").message(), HasSubstr("unknown escape"));
  EXPECT_THAT(ParseError("root ::= \"a\"\nroot ::= \"b\"").message(), HasSubstr("defined twice"));
  EXPECT_THAT(ParseError("root ::= [^\\x00-\\U0010FFFF]").message(), HasSubstr("matches nothing"));
  EXPECT_THAT(ParseError("root ::= \"a\"\n\nfoo :: \"b\"").message(), HasSubstr("line 3 column"));
  EXPECT_EQ(ParseError("root ::= @").code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrammarTest, GbnfLiteralRoundTrips) {
  const std::string text = "a\"b\\c\nd\te\x01 é";
  EXPECT_TRUE(GrammarMatches("root ::= " + GbnfLiteral(text), text));
}

TEST(GrammarTest, RenameRuleRenamesDefinitionAndUsesOnly) {
  const std::string g =
      "root ::= \"root\" [r-t] root-x | \"(\" root \")\"  # root, in a comment\n"
      "root-x ::= \"\\\"root\"\n";
  absl::StatusOr<std::string> renamed = RenameRule(g, "root", "answer");
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(*renamed,
            "answer ::= \"root\" [r-t] root-x | \"(\" answer \")\"  # root, in a comment\n"
            "root-x ::= \"\\\"root\"\n");
  // Still the same language, under the new start rule.
  const std::string wrapped = "root ::= \"<\" answer \">\"\n" + *renamed;
  EXPECT_TRUE(GrammarMatches(wrapped, "<(roots\"root)>"));
  EXPECT_FALSE(GrammarMatches(wrapped, "(roots\"root)"));

  EXPECT_THAT(RenameRule(g, "root", "root-x").status().message(), HasSubstr("root-x"));
  EXPECT_FALSE(RenameRule(g, "root", "a b").ok());
  EXPECT_FALSE(RenameRule(g, "root", "").ok());
}

}  // namespace
}  // namespace folio::structured
