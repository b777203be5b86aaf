#include "common/structured/grammar_matcher.h"

#include <random>
#include <string>
#include <vector>

#include "common/structured/json_schema.h"
#include "common/structured/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::structured {
namespace {

// A vocabulary of multi-byte tokens that share prefixes, as real ones do, with an EOS.
std::shared_ptr<const TokenVocabulary> MixedVocabulary(std::mt19937* rng) {
  std::vector<std::string> bytes{""};  // id 0: a control token (EOS)
  const std::string alphabet = "{}[]\":, \n0123456789-.eEtrufalsnabcxyz\\";
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back("\xC3\xA9");  // é
  bytes.push_back("\xC3");      // half of it
  std::uniform_int_distribution<int> len(2, 6), pick(0, alphabet.size() - 1);
  for (int i = 0; i < 600; ++i) {
    std::string t;
    for (int n = len(*rng); n > 0; --n) t += alphabet[pick(*rng)];
    bytes.push_back(t);
  }
  for (const char* t : {"true", "false", "null", "\": \"", "\", \"", "{\"", "\"}", "  ", "\n  "}) {
    bytes.push_back(t);
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::vector<int32_t>{0});
}

TEST(GrammarMatcherTest, TrieHoldsEveryNonEmptyTokenOnce) {
  std::mt19937 rng(1);
  auto vocab = MixedVocabulary(&rng);
  std::vector<int> seen(vocab->size(), 0);
  for (size_t node = 0; node < vocab->trie().size(); ++node) {
    for (int32_t id : vocab->trie_tokens(node)) {
      ++seen[id];
      EXPECT_EQ(static_cast<int32_t>(vocab->bytes(id).size()), vocab->trie()[node].depth);
    }
  }
  for (int32_t id = 0; id < vocab->size(); ++id) {
    EXPECT_EQ(seen[id], vocab->bytes(id).empty() ? 0 : 1) << id;
  }
}

// Random walks through several grammars: at every step the mask equals the brute force,
// and the walk takes a random allowed token until the grammar terminates.
TEST(GrammarMatcherTest, MaskEqualsBruteForceOnRandomWalks) {
  std::mt19937 rng(7);
  auto vocab = MixedVocabulary(&rng);
  std::vector<std::string> grammars = {
      JsonObjectGrammar(),
      *JsonSchemaToGrammar(R"({"type":"object","properties":{"a":{"type":"integer"},
          "b":{"type":"array","items":{"type":"string"},"maxItems":3},
          "c":{"enum":["x","yz",null,true]}},"required":["a"]})", {}),
      "root ::= [a-c]+ (\"\\\\\" [0-9]{2,3})? \".\"",
      "root ::= (\"é\" | \"e\")* \"x\"",
  };
  int steps = 0;
  for (const std::string& text : grammars) {
    auto g = CompiledGrammar::Create(text, vocab);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
    for (int walk = 0; walk < 8; ++walk) {
      GrammarMatcher m(*g);
      for (int step = 0; step < 60 && !m.IsTerminated(); ++step, ++steps) {
        std::vector<uint32_t> mask(BitmaskWords(vocab->size()));
        ASSERT_TRUE(m.FillNextTokenBitmask(absl::MakeSpan(mask)).ok());
        ASSERT_EQ(mask, BruteForceMask(m)) << text << " walk " << walk << " step " << step;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (BitmaskTest(mask, id)) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty()) << "a live state always allows something";
        int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        if (id == 0) break;  // EOS
        ASSERT_TRUE(m.AcceptToken(id));
      }
    }
    EXPECT_GT((*g)->num_memoized_masks(), 0);
  }
  EXPECT_GT(steps, 200);
}

TEST(GrammarMatcherTest, CompleteTerminatedAndEos) {
  auto vocab = ByteVocabulary();
  auto g = CompiledGrammar::Create("root ::= \"ab\" \"c\"?", vocab);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  EXPECT_FALSE(m.IsComplete());
  EXPECT_FALSE(m.AcceptToken(256));  // EOS before the end
  EXPECT_FALSE(m.AcceptToken('b'));
  EXPECT_TRUE(m.AcceptToken('a'));
  EXPECT_TRUE(m.AcceptToken('b'));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.IsTerminated());
  std::vector<uint32_t> mask(BitmaskWords(vocab->size()));
  ASSERT_TRUE(m.FillNextTokenBitmask(absl::MakeSpan(mask)).ok());
  EXPECT_TRUE(BitmaskTest(mask, 256));
  EXPECT_TRUE(BitmaskTest(mask, 'c'));
  EXPECT_FALSE(BitmaskTest(mask, 'a'));
  GrammarMatcher fork = m;
  EXPECT_TRUE(fork.AcceptToken('c'));
  EXPECT_TRUE(fork.IsTerminated());
  EXPECT_FALSE(m.IsTerminated());  // the fork has its own state
  EXPECT_TRUE(m.AcceptToken(256));
}

TEST(GrammarMatcherTest, ReplayGivesTheSameState) {
  std::mt19937 rng(3);
  auto vocab = MixedVocabulary(&rng);
  auto g = CompiledGrammar::Create(JsonObjectGrammar(), vocab);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  std::vector<int32_t> taken;
  for (int step = 0; step < 30 && !m.IsTerminated(); ++step) {
    std::vector<uint32_t> mask(BitmaskWords(vocab->size()));
    ASSERT_TRUE(m.FillNextTokenBitmask(absl::MakeSpan(mask)).ok());
    std::vector<int32_t> allowed;
    for (int32_t id = 1; id < vocab->size(); ++id) {
      if (BitmaskTest(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    int32_t id = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.AcceptToken(id));
    taken.push_back(id);
  }
  GrammarMatcher replay(*g);
  for (int32_t id : taken) ASSERT_TRUE(replay.AcceptToken(id));
  std::vector<uint32_t> a(BitmaskWords(vocab->size())), b(a.size());
  ASSERT_TRUE(m.FillNextTokenBitmask(absl::MakeSpan(a)).ok());
  ASSERT_TRUE(replay.FillNextTokenBitmask(absl::MakeSpan(b)).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(m.IsComplete(), replay.IsComplete());
}

TEST(GrammarMatcherTest, CacheCompilesOnce) {
  GrammarCache cache(ByteVocabulary(), 2);
  auto a = cache.Get("root ::= \"a\"");
  auto b = cache.Get("root ::= \"a\"");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_FALSE(cache.Get("root ::= (").ok());
  ASSERT_TRUE(cache.Get("root ::= \"b\"").ok());
  ASSERT_TRUE(cache.Get("root ::= \"c\"").ok());  // evicts "a"
  auto again = cache.Get("root ::= \"a\"");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->get(), a->get());
}

}  // namespace
}  // namespace folio::structured
