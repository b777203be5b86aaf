// PreTokenizer expressions and special-token splitting on hand-picked texts.
#include "common/tokenizer/pre_tokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/special_tokens.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

std::vector<std::string> Split(const std::string& name, std::string_view text) {
  absl::StatusOr<PreTokenizer> p = PreTokenizer::Create(name);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {};
  std::vector<std::string_view> words;
  EXPECT_TRUE(p->Split(text, &words).ok());
  return std::vector<std::string>(words.begin(), words.end());
}

TEST(PreTokenizerTest, KnowsTheNamesTheIssueListsAndRefusesOthers) {
  EXPECT_THAT(PreTokenizer::SupportedNames(),
              IsSupersetOf({"default", "llama-bpe", "llama3", "qwen2", "qwen35", "tekken",
                            "gpt-2", "deepseek-llm", "deepseek-coder", "deepseek-v3",
                            "deepseek-r1-qwen", "smollm", "falcon", "starcoder", "refact",
                            "command-r", "mpt", "phi-2"}));
  absl::StatusOr<PreTokenizer> bad = PreTokenizer::Create("llama4-maybe");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown pre-tokenizer 'llama4-maybe'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("qwen2"));
  EXPECT_TRUE(PreTokenizer::Create("llama-bpe")->traits().ignore_merges);
  EXPECT_FALSE(PreTokenizer::Create("qwen2")->traits().ignore_merges);
}

TEST(PreTokenizerTest, Gpt2KeepsOneSpaceBeforeWordsAndSplitsContractions) {
  EXPECT_THAT(Split("gpt-2", "Hello world's  123"),
              ElementsAre("Hello", " world", "'s", " ", " 123"));
  EXPECT_THAT(Split("gpt-2", "a   "), ElementsAre("a", "   "));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThreeAndLettersWithAPrefix) {
  EXPECT_THAT(Split("llama-bpe", "12345 x"), ElementsAre("123", "45", " x"));
  EXPECT_THAT(Split("llama-bpe", "I'M ok\n\n  yes"),
              ElementsAre("I", "'M", " ok", "\n\n", " ", " yes"));
  // Unicode letters (UCP): Vietnamese and Cyrillic stay whole words.
  EXPECT_THAT(Split("llama-bpe", "C\xE1\xBB\xAD" "a \xD0\xBD\xD0\xB0"),
              ElementsAre("C\xE1\xBB\xAD" "a", " \xD0\xBD\xD0\xB0"));
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_THAT(Split("qwen2", "x 2024"), ElementsAre("x", " ", "2", "0", "2", "4"));
}

TEST(PreTokenizerTest, TekkenSplitsCamelCase) {
  EXPECT_THAT(Split("tekken", "HelloWorld ok"), ElementsAre("Hello", "World", " ok"));
}

TEST(PreTokenizerTest, ExpressionsApplyInTurnAndKeepTheGaps) {
  // deepseek-coder: [\r\n] first, then \s?\p{L}+, \s?\p{P}+, CJK runs, each digit.
  EXPECT_THAT(Split("deepseek-coder", "ab\n12, cd"),
              ElementsAre("ab", "\n", "1", "2", ",", " cd"));
}

TEST(PreTokenizerTest, WordsAlwaysCoverTheText) {
  std::mt19937 rng(3);
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "7",
                                             "'s", "!", "\xC3\xA9", "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\xC2\xA0"};
  for (const std::string& name : PreTokenizer::SupportedNames()) {
    absl::StatusOr<PreTokenizer> p = PreTokenizer::Create(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    for (int i = 0; i < 200; ++i) {
      std::string text;
      for (int n = rng() % 20; n > 0; --n) text += alphabet[rng() % alphabet.size()];
      std::vector<std::string_view> words;
      ASSERT_TRUE(p->Split(text, &words).ok());
      std::string joined;
      for (std::string_view w : words) {
        ASSERT_FALSE(w.empty()) << name;
        joined += w;
      }
      ASSERT_EQ(joined, text) << name;
    }
  }
}

Vocab SpecialVocab() {
  Vocab v;
  v.pieces = {"<unk>", "<s>", "<|im_start|>", "<|im", "<tool>", "x"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
             TokenType::kControl, TokenType::kUserDefined, TokenType::kNormal};
  v.scores.assign(v.pieces.size(), 0.0f);
  return v;
}

std::vector<std::pair<std::string, int32_t>> Fragments(std::string_view text, ParseSpecial p) {
  std::vector<TextFragment> fragments;
  SpecialTokenSplitter(SpecialVocab()).Split(text, p, &fragments);
  std::vector<std::pair<std::string, int32_t>> out;
  for (const TextFragment& f : fragments) out.emplace_back(std::string(f.text), f.id);
  return out;
}

TEST(SpecialTokenSplitterTest, LongestFirstControlOnlyWhenParsing) {
  using P = std::pair<std::string, int32_t>;
  EXPECT_THAT(Fragments("a<|im_start|>b<|im<s>", ParseSpecial::kYes),
              ElementsAre(P{"a", -1}, P{"<|im_start|>", 2}, P{"b", -1}, P{"<|im", 3},
                          P{"<s>", 1}));
  EXPECT_THAT(Fragments("a<|im_start|><tool><unk>", ParseSpecial::kNo),
              ElementsAre(P{"a<|im_start|>", -1}, P{"<tool>", 4}, P{"<unk>", -1}));
  EXPECT_THAT(Fragments("<s><s>", ParseSpecial::kYes), ElementsAre(P{"<s>", 1}, P{"<s>", 1}));
  EXPECT_TRUE(Fragments("", ParseSpecial::kYes).empty());
}

TEST(EndOfGenerationTest, FindsEosAndKnownTurnMarkers) {
  Vocab v;
  v.pieces = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "hi",
              "<|im_end|>"};
  v.types = {TokenType::kControl, TokenType::kControl, TokenType::kControl,
             TokenType::kControl, TokenType::kNormal, TokenType::kNormal};
  v.scores.assign(v.pieces.size(), 0.0f);
  v.eos_id = 1;
  EXPECT_THAT(FindEndOfGenerationIds(&v, {-1, 4}), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_EQ(v.types[5], TokenType::kControl);  // made control, as llama.cpp does
  EXPECT_EQ(v.types[4], TokenType::kNormal);
}

}  // namespace
}  // namespace folio
