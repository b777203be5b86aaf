// The matcher's ambiguity bounds (grammar_matcher.h): equal parse stacks are merged, a
// grammar whose distinct parses stay few works however many ways its rules can be
// walked, and one that keeps too many alive is refused (at compile when the probe
// reaches it, else at the mask or byte that goes over), never a hang.
#include <string>
#include <vector>

#include "common/structured/grammar_matcher.h"
#include "common/structured/regex.h"
#include "common/structured/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::structured {
namespace {

using ::testing::HasSubstr;

// A vocabulary with multi-byte tokens (the walk goes deeper than one byte), like the
// grammar fuzzer's.
std::shared_ptr<const TokenVocabulary> SmallVocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"ab", "abc", "aaaa", "EEE", "dd", "d+", "@d", "\xC3\xA9"}) {
    bytes.push_back(t);
  }
  bytes.push_back("");  // EOS
  const int32_t eos = static_cast<int32_t>(bytes.size()) - 1;
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::vector<int32_t>{eos});
}

// Walks `text` byte by byte; at each step the mask must equal the brute force.
void ExpectMasksMatchAlong(const std::shared_ptr<const CompiledGrammar>& g,
                           const std::string& text) {
  GrammarMatcher m(g);
  ASSERT_TRUE(m.last_error().ok()) << m.last_error();
  for (size_t i = 0; i <= text.size(); ++i) {
    std::vector<uint32_t> mask(BitmaskWords(g->vocab().size()));
    absl::Status s = m.FillNextTokenBitmask(absl::MakeSpan(mask));
    ASSERT_TRUE(s.ok()) << s << " at byte " << i;
    ASSERT_EQ(mask, BruteForceMask(m)) << "at byte " << i;
    if (i < text.size()) {
      ASSERT_TRUE(m.AcceptBytes(text.substr(i, 1))) << "at byte " << i;
    }
  }
}

// The fuzzer's known timeout (was common/structured/fuzz_known_timeouts/, now in
// grammar_fuzz_corpus/): a regex whose alternation has empty branches, repeated {8},
// reached one point by ~5^8 paths and multiplied the walk's stacks. It now compiles and
// its masks come from a walk that expands each point once.
TEST(GrammarAmbiguityTest, KnownFuzzTimeoutFinishes) {
  const std::string regex = "(]:d|||||o#do0t%|d+|[^x>]*E){8}@dabc@d}@d+42]+\\]{3e.`!||d$";
  absl::StatusOr<std::string> text = RegexToGrammar(regex);
  ASSERT_TRUE(text.ok()) << text.status();
  auto g = CompiledGrammar::Create(*text, SmallVocabulary());
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectMasksMatchAlong(*g, "EEEdd]:dEE@dabc@d}@ddd42]]]{3ex`!");
  EXPECT_TRUE(GrammarMatches(*text, "EEEdd]:dEEo#do0t%d]:d]:d@dabc@d}@d42]]{3e.`!"));
  EXPECT_TRUE(GrammarMatches(*text, "d"));
  EXPECT_TRUE(GrammarMatches(*text, ""));
  EXPECT_FALSE(GrammarMatches(*text, "ddEEEE@dabc@d}@d42]{3e.`!"));  // ]+\\] needs two
}

// Twenty nullable groups in a row: 4^20 ways to reach "b" without a byte, one stack.
TEST(GrammarAmbiguityTest, NullableAlternativesExpandOnce) {
  std::string text = "g ::= \"a\" | \"\" | \"\" | \"\"\nroot ::=";
  for (int i = 0; i < 20; ++i) text += " g";
  text += " \"b\"";
  auto g = CompiledGrammar::Create(text, SmallVocabulary());
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectMasksMatchAlong(*g, "aaaaab");
  EXPECT_TRUE(GrammarMatches(text, "b"));
  EXPECT_TRUE(GrammarMatches(text, std::string(20, 'a') + "b"));
  EXPECT_FALSE(GrammarMatches(text, std::string(21, 'a') + "b"));
}

// Ambiguous but bounded: each text has a few parses at a time; these keep working.
TEST(GrammarAmbiguityTest, AmbiguousButBoundedGrammarsWork) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {*RegexToGrammar("[a-z]*[a-z]{3}e"), "abcdeabcde"},
      {*RegexToGrammar("(a|ab)(c|bcd)(d*)"), "abcdd"},
      {*RegexToGrammar("(a*a){8}b"), "aaaaaaaaaaaab"},
      {"x ::= \"a\"* \"a\"*\nroot ::= x x x \"b\"", "aaaaaaab"},
  };
  for (const auto& [text, walk] : cases) {
    auto g = CompiledGrammar::Create(text, SmallVocabulary());
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
    ExpectMasksMatchAlong(*g, walk);
    EXPECT_TRUE(GrammarMatches(text, walk)) << text;
  }
  EXPECT_FALSE(GrammarMatches(*RegexToGrammar("(a*a){8}b"), "aaaaaaab"));
}

// Two frames per byte: 2^k distinct stacks after k "a"s. The compile-time probe reaches
// it, and names the bytes.
constexpr const char* kExponential = "r ::= \"a\" r \"b\" | \"a\" r \"c\" | \"a\"\n";

TEST(GrammarAmbiguityTest, RefusedAtCompileWhenTheProbeReachesIt) {
  auto g = CompiledGrammar::Create(std::string(kExponential) + "root ::= r", SmallVocabulary());
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("grammar too ambiguous"));
  EXPECT_THAT(g.status().message(), HasSubstr("parse stacks alive at once"));
  EXPECT_THAT(g.status().message(), HasSubstr("after the bytes \"aaaaaaaa"));
}

// Behind a prefix longer than the probe goes, the bound is met by the matcher: the mask
// whose walk goes over is an error (and all zeros), and so is the byte.
TEST(GrammarAmbiguityTest, RefusedAtTheMaskOrByteThatGoesOver) {
  const std::string text = std::string(kExponential) + "root ::= \"x\"{600} r";
  auto g = CompiledGrammar::Create(text, SmallVocabulary());
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  ASSERT_TRUE(m.AcceptBytes(std::string(600, 'x')));
  std::vector<uint32_t> mask(BitmaskWords((*g)->vocab().size()), 0);
  int k = 0;  // "a"s accepted
  absl::Status s;
  for (; k < 16; ++k) {
    s = m.FillNextTokenBitmask(absl::MakeSpan(mask));
    if (!s.ok()) break;
    ASSERT_TRUE(BitmaskTest(mask, 'a'));
    ASSERT_TRUE(m.AcceptBytes("a")) << m.last_error();
  }
  EXPECT_GE(k, 3) << s;  // 2^k stacks; the walk looks 4 bytes ahead (the token "aaaa")
  EXPECT_LT(k, 12);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("grammar too ambiguous"));
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
  // Byte by byte, the matcher goes over within the next 4 bytes.
  GrammarMatcher fork = m;
  int more = 0;
  while (more < 8 && fork.AcceptBytes("a")) ++more;
  EXPECT_LE(more, 4);
  EXPECT_THAT(fork.last_error().message(), HasSubstr("grammar too ambiguous"));
  EXPECT_TRUE(m.AcceptBytes("b"));  // a plain step still works
  EXPECT_TRUE(m.last_error().ok());
  EXPECT_FALSE(m.AcceptBytes("x"));  // a plain refusal is no error
  EXPECT_TRUE(m.last_error().ok());
}

}  // namespace
}  // namespace folio::structured
