#include "common/structured/regex.h"

#include <string>

#include "common/structured/grammar.h"
#include "common/structured/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::structured {
namespace {

using ::testing::HasSubstr;

bool R(std::string_view pattern, std::string_view text) {
  absl::StatusOr<std::string> g = RegexToGrammar(pattern);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() && GrammarMatches(*g, text);
}

TEST(RegexTest, MatchesWholeText) {
  EXPECT_TRUE(R("ab+c", "abbbc"));
  EXPECT_FALSE(R("ab+c", "xabbbc"));
  EXPECT_TRUE(R("^(cat|dog)s?$", "dogs"));
  EXPECT_FALSE(R("(cat|dog)s?", "cow"));
  EXPECT_TRUE(R("\\d{3}-\\d{4}", "555-1234"));
  EXPECT_FALSE(R("\\d{3}-\\d{4}", "555-123"));
  EXPECT_TRUE(R("[A-Za-z_]\\w*", "_x9"));
  EXPECT_TRUE(R("[^0-9]+", "héllo"));
  EXPECT_FALSE(R("[^0-9]+", "h3"));
  EXPECT_TRUE(R("a.c", "a€c"));
  EXPECT_FALSE(R("a.c", "a\nc"));
  EXPECT_TRUE(R("(?:ab){2,}", "ababab"));
  EXPECT_FALSE(R("(?:ab){2,}", "ab"));
  EXPECT_TRUE(R("x{2}y{0,1}?", "xx"));
  EXPECT_TRUE(R("\\.\\*\\(\\)", ".*()"));
  EXPECT_TRUE(R("a{,3}", "a{,3}"));  // not a quantifier: literal, as in Python
  EXPECT_TRUE(R("\\s\\S", " x"));
  EXPECT_TRUE(R("(\\+|-)?[0-9]+(\\.[0-9]+)?", "-3.25"));
  EXPECT_TRUE(R("", ""));
}

std::string Err(std::string_view pattern) {
  absl::StatusOr<std::string> g = RegexToGrammar(pattern);
  EXPECT_FALSE(g.ok()) << pattern;
  return std::string(g.status().message());
}

TEST(RegexTest, RefusalsNameTheProblem) {
  EXPECT_THAT(Err("(ab"), HasSubstr("unbalanced"));
  EXPECT_THAT(Err("ab)"), HasSubstr("unbalanced"));
  EXPECT_THAT(Err("[ab"), HasSubstr("unterminated character class"));
  EXPECT_THAT(Err("*a"), HasSubstr("nothing to repeat"));
  EXPECT_THAT(Err("a**"), HasSubstr("multiple repeat"));
  EXPECT_THAT(Err("(a)\\1"), HasSubstr("unsupported escape"));
  EXPECT_THAT(Err("(?=a)"), HasSubstr("lookaround"));
  EXPECT_THAT(Err("a\\b"), HasSubstr("word boundaries"));
  EXPECT_THAT(Err("a^b"), HasSubstr("only at the start"));
  EXPECT_THAT(Err("a{5,2}"), HasSubstr("n < m"));
  EXPECT_THAT(Err("a++"), HasSubstr("possessive"));
  EXPECT_THAT(Err("[z-a]"), HasSubstr("out of order"));
  EXPECT_THAT(Err("(ab"), HasSubstr("offset"));
  // Found by grammar_fuzz: a 4-byte sequence past U+10FFFF was taken as a character.
  EXPECT_THAT(Err("a\xF7\x82\xBF\xA4"), HasSubstr("invalid UTF-8"));
  EXPECT_THAT(Err("\xC0\x80"), HasSubstr("invalid UTF-8"));
}

}  // namespace
}  // namespace folio::structured

namespace folio::structured {
namespace {

// Found by grammar_fuzz: a starred group that can match nothing compiles to a grammar the
// parser refuses (left recursion), an InvalidArgument rather than a crash.
TEST(RegexTest, NullableRepetitionIsRefusedByTheGrammar) {
  absl::StatusOr<std::string> g = RegexToGrammar("(|a)*");
  ASSERT_TRUE(g.ok());
  absl::Status parsed = Grammar::Parse(*g).status();
  EXPECT_EQ(parsed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.message()), HasSubstr("left-recursive"));
}

}  // namespace
}  // namespace folio::structured
