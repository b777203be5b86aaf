#include "common/tokenizer/tokenizer.h"

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/llama2c_vocab.h"
#include "common/tokenizer/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kSp[] = "\xE2\x96\x81";  // "▁"

// A small vocab: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then `pieces`
// with scores -1, -2, ... in order (earlier pieces merge first).
Vocab SmallVocab(const std::vector<std::string>& pieces, bool with_bytes = true) {
  Vocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      v.pieces.push_back(name);
      v.types.push_back(TokenType::kByte);
    }
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  for (size_t i = 0; i < pieces.size(); ++i) {
    v.pieces.push_back(pieces[i]);
    v.types.push_back(TokenType::kNormal);
    v.scores.push_back(-1.0f - static_cast<float>(i));
  }
  return v;
}

Tokenizer MakeTokenizer(Vocab v) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(std::move(v));
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// Id of `piece` in a SmallVocab built from `pieces`.
int32_t IdOf(const Tokenizer& t, std::string_view piece) {
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (*t.TokenToPiece(id) == piece) return id;
  }
  ADD_FAILURE() << "no piece " << piece;
  return -1;
}

TEST(TokenizerCreateTest, RejectsBrokenVocabs) {
  auto expect_invalid = [](Vocab v, std::string_view what) {
    absl::StatusOr<Tokenizer> t = Tokenizer::Create(std::move(v));
    ASSERT_FALSE(t.ok()) << what;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(t.status().message(), HasSubstr(what));
  };
  expect_invalid(Vocab{}, "empty");
  Vocab v = SmallVocab({"a"});
  v.scores.pop_back();
  expect_invalid(v, "sizes disagree");
  v = SmallVocab({"a"});
  v.bos_id = v.size();
  expect_invalid(v, "bos_id");
  v = SmallVocab({"a"});
  v.unk_id = -1;
  expect_invalid(v, "unk_id");
  v = SmallVocab({"a"});
  v.unk_id = 1;
  expect_invalid(v, "want kUnknown");
  expect_invalid(SmallVocab({"a", "b", "a"}), "appears as both");
  v = SmallVocab({"a"});
  v.pieces[3] = "<0xZZ>";
  expect_invalid(v, "<0xXX>");
  v = SmallVocab({"a"});
  v.pieces[4] = "<0x00>";
  expect_invalid(v, "appears as both");
  v = SmallVocab({"a"});
  v.types[10] = TokenType::kNormal;
  expect_invalid(v, "255 byte tokens");
  v = SmallVocab({"a", ""});
  expect_invalid(v, "is empty");
  v = SmallVocab({"a"});
  v.pre_tokenizer = "metaspace-sometimes";
  expect_invalid(v, "pre-tokenizer \"metaspace-sometimes\" is unknown");
  v = SmallVocab({"a"});
  v.pre_tokenizer = "metaspace-never";  // add_dummy_prefix is true
  expect_invalid(v, "does not agree with add_dummy_prefix true");
  v = SmallVocab({"a"});
  v.pre_tokenizer = "metaspace-first-split";
  v.add_dummy_prefix = false;
  expect_invalid(v, "does not agree with add_dummy_prefix false");
}

// Where the dummy prefix goes (SentencePiecePrefix), on the engine itself: llama.cpp's
// rule after every special token, Metaspace's only where no space leads, "first" only at
// the start of the text; "-split" stops merges into a following "▁...".
TEST(TokenizerTest, SentencePiecePrefixRules) {
  auto make = [](const char* rule) {
    Vocab v = SmallVocab({"a" + std::string(kSp), kSp + std::string("a"), kSp, "a"});
    v.pre_tokenizer = rule;
    return MakeTokenizer(v);
  };
  const Tokenizer llama = make("default"), first = make("metaspace-first"),
                  always = make("metaspace-always"), split = make("metaspace-always-split");
  auto ids = [](const Tokenizer& t, std::string_view text) {
    return *t.Encode(text, AddBos::kNo, ParseSpecial::kYes);
  };
  const int32_t sa = IdOf(llama, std::string(kSp) + "a"), as = IdOf(llama, "a" + std::string(kSp)),
                sp = IdOf(llama, kSp), a = IdOf(llama, "a"), eos = 2;
  EXPECT_THAT(ids(llama, " a"), ElementsAre(sp, sa));
  EXPECT_THAT(ids(first, " a"), ElementsAre(sa));
  EXPECT_THAT(ids(llama, "a</s>a"), ElementsAre(sa, eos, sa));
  EXPECT_THAT(ids(first, "a</s>a"), ElementsAre(sa, eos, a));
  EXPECT_THAT(ids(always, "a</s>a"), ElementsAre(sa, eos, sa));
  EXPECT_THAT(ids(always, "</s> a"), ElementsAre(eos, sa));
  // "aa a" -> "▁aa▁a": "a▁" outscores "▁a", so unsplit the second "a" takes the "▁"
  // after it; split never merges into a "▁".
  EXPECT_THAT(ids(always, "aa a"), ElementsAre(sa, as, a));
  EXPECT_THAT(ids(split, "aa a"), ElementsAre(sa, a, sa));
}

TEST(TokenizerTest, MergesHighestScoreFirst) {
  // "▁abc": no "▁a", so "▁" stays alone; "ab" outscores "bc".
  Tokenizer t = MakeTokenizer(SmallVocab({"ab", "bc", kSp, "a", "b", "c"}));
  EXPECT_THAT(*t.Encode("abc", AddBos::kNo),
              ElementsAre(IdOf(t, kSp), IdOf(t, "ab"), IdOf(t, "c")));
  Tokenizer u = MakeTokenizer(SmallVocab({"bc", "ab", kSp, "a", "b", "c"}));
  EXPECT_THAT(*u.Encode("abc", AddBos::kNo),
              ElementsAre(IdOf(u, kSp), IdOf(u, "a"), IdOf(u, "bc")));
}

TEST(TokenizerTest, MergesOnlyThroughKnownPieces) {
  // "abcd" is reachable only via "ab" + "cd", not via "bc".
  Tokenizer t = MakeTokenizer(SmallVocab({"bc", "ab", "cd", "abcd", "a", "b", "c", "d"}));
  Vocab v = t.vocab();
  v.add_dummy_prefix = false;
  t = MakeTokenizer(v);
  // "bc" wins first, then nothing joins "a"+"bc" or "bc"+"d".
  EXPECT_THAT(*t.Encode("abcd", AddBos::kNo),
              ElementsAre(IdOf(t, "a"), IdOf(t, "bc"), IdOf(t, "d")));
}

TEST(TokenizerTest, EqualScoresMergeLeftmostFirst) {
  Vocab v = SmallVocab({"aa", "a"});
  v.add_dummy_prefix = false;
  Tokenizer t = MakeTokenizer(v);
  EXPECT_THAT(*t.Encode("aaa", AddBos::kNo), ElementsAre(IdOf(t, "aa"), IdOf(t, "a")));
  EXPECT_THAT(*t.Encode("aaaa", AddBos::kNo), ElementsAre(IdOf(t, "aa"), IdOf(t, "aa")));
}

TEST(TokenizerTest, ByteFallbackAndUnknown) {
  Tokenizer t = MakeTokenizer(SmallVocab({kSp, "a"}));
  // "é" is C3 A9: byte tokens are 3 + byte value.
  EXPECT_THAT(*t.Encode("aé", AddBos::kYes),
              ElementsAre(1, IdOf(t, kSp), IdOf(t, "a"), 3 + 0xC3, 3 + 0xA9));
  Tokenizer no_bytes = MakeTokenizer(SmallVocab({kSp, "a"}, /*with_bytes=*/false));
  EXPECT_FALSE(no_bytes.has_byte_fallback());
  EXPECT_THAT(*no_bytes.Encode("aé", AddBos::kNo),
              ElementsAre(IdOf(no_bytes, kSp), IdOf(no_bytes, "a"), 0));
}

TEST(TokenizerTest, BosPolicyAndEmptyText) {
  Vocab v = SmallVocab({kSp, "a"});
  Tokenizer t = MakeTokenizer(v);
  EXPECT_THAT(*t.Encode("", AddBos::kNo), IsEmpty());
  EXPECT_THAT(*t.Encode("", AddBos::kYes), ElementsAre(1));
  EXPECT_THAT(*t.Encode("", AddBos::kVocabDefault), ElementsAre(1));
  v.add_bos = false;
  EXPECT_THAT(*MakeTokenizer(v).Encode("a", AddBos::kVocabDefault),
              ElementsAre(IdOf(t, kSp), IdOf(t, "a")));
}

TEST(TokenizerTest, InvalidUtf8NamesTheOffset) {
  Tokenizer t = MakeTokenizer(SmallVocab({"a"}));
  const std::pair<std::string, std::string> cases[] = {
      {"ab\xFF" "cd", "offset 2"},           // impossible byte
      {"abc\xE2\x82", "offset 3"},            // truncated at the end
      {"\xC0\x80", "offset 0"},               // overlong NUL
      {"x\xED\xA0\x80", "offset 1"},          // surrogate
      {"xy\xF4\x90\x80\x80", "offset 2"},     // above U+10FFFF
      {"\x80", "offset 0"},                   // lone continuation byte
  };
  for (const auto& [text, offset] : cases) {
    absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, AddBos::kYes);
    ASSERT_FALSE(ids.ok()) << offset;
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ids.status().message(), HasSubstr(offset));
  }
}

TEST(TokenizerTest, DecodeRules) {
  Tokenizer t = MakeTokenizer(SmallVocab({std::string(kSp) + "a", kSp, "a", "b"}));
  const int32_t sp_a = IdOf(t, std::string(kSp) + "a");
  const int32_t sp = IdOf(t, kSp);
  const int32_t b = IdOf(t, "b");
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{1, sp_a, sp_a}), "a a");
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{sp_a, sp_a}), " a a");  // no BOS: keep
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{1, sp, sp_a}), " a");  // strips one only
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{1, 2, sp_a, 2}), "a");  // controls invisible
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{1, b, sp_a}), "b a");
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{1, 3 + ' ', sp_a}), "  a");  // byte: no strip
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{0}), " \xE2\x81\x87 ");     // " ⁇ "
  // 😀 is F0 9F 98 80; a broken run yields one U+FFFD per byte.
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}),
            "\xF0\x9F\x98\x80");
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{3 + 0xF0, 3 + 0x9F, b}),
            "\xEF\xBF\xBD\xEF\xBF\xBD" "b");
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{3 + 0xF0, 3 + 'A'}), "\xEF\xBF\xBD" "A");
  // A non-byte token ends a run even if the next bytes would have completed it.
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{3 + 0xC3, 2, 3 + 0xA9}),
            "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerTest, OutOfRangeIdsAreErrors) {
  Tokenizer t = MakeTokenizer(SmallVocab({"a"}));
  absl::StatusOr<std::string> text = t.Decode(std::vector<int32_t>{1, t.vocab_size()});
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(text.status().message(), HasSubstr("at position 1"));
  EXPECT_FALSE(t.Decode(std::vector<int32_t>{-1}).ok());
  EXPECT_FALSE(t.TokenToPiece(-1).ok());
  EXPECT_FALSE(t.Surface(t.vocab_size()).ok());
  EXPECT_EQ(*t.TokenToPiece(1), "<s>");
  EXPECT_EQ(*t.TokenToPiece(3 + 0x0A), "<0x0A>");
}

// ---- stories260K (llama2.c tok512.bin) ----

TEST(Stories260KTokenizerTest, EncodesOnceUponATime) {
  const std::optional<std::string> path = testing::ModelPath("stories260K/tok512.bin");
  if (!path) GTEST_SKIP() << testing::kSetModelsDir;
  absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(*path, 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  Tokenizer t = MakeTokenizer(*std::move(vocab));
  EXPECT_THAT(*t.Encode("Once upon a time", AddBos::kYes), ElementsAre(1, 403, 407, 261, 378));
  EXPECT_THAT(*t.Encode("Once upon a time", AddBos::kNo), ElementsAre(403, 407, 261, 378));
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{1, 403, 407, 261, 378}), "Once upon a time");
  EXPECT_EQ(*t.Decode(std::vector<int32_t>{403, 407, 261, 378}), " Once upon a time");

  // Round trip of real text: the golden llama2.c output, line by line.
  std::ifstream golden(*testing::ModelPath("stories260K/expected_run_c_t0_n200.txt"));
  ASSERT_TRUE(golden.good());
  std::stringstream text;
  text << golden.rdbuf();
  ASSERT_FALSE(text.str().empty());
  const std::string extra = "Naïve café 🙂 costs 3€.\n\ttab  two  spaces";
  for (const std::string& s : {text.str(), extra}) {
    absl::StatusOr<std::vector<int32_t>> ids = t.Encode(s, AddBos::kYes);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*t.Decode(*ids), s);
  }
}

// ---- Llama 2 SentencePiece model, against libsentencepiece ----

class Llama2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sp_ = testing::SentencePieceReference::LoadLlama2();
    if (sp_ == nullptr) GTEST_SKIP() << testing::kSetModelsDir;
    absl::StatusOr<Tokenizer> t = Tokenizer::Create(sp_->ToVocab());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::make_unique<Tokenizer>(*std::move(t));
  }

  // Compares Encode with libsentencepiece (plus BOS) and checks both decodes.
  void ExpectSameAsSentencePiece(const std::string& text) {
    std::vector<int32_t> expected = sp_->Encode(text);
    expected.insert(expected.begin(), sp_->bos_id());
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, AddBos::kYes);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, expected) << "text: \"" << text << "\"";
    const std::string sp_text = sp_->Decode(expected);
    EXPECT_EQ(*tokenizer_->Decode(*ids), sp_text);
    // A literal "▁" in the input is encoded as a space, so it cannot round-trip.
    if (text.find(kSp) == std::string::npos) {
      EXPECT_EQ(sp_text, text);
    }
  }

  std::unique_ptr<testing::SentencePieceReference> sp_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Llama2TokenizerTest, MatchesSentencePieceOnCorpus) {
  const std::vector<std::string> corpus = {
      "",
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog.",
      " leading space",
      "trailing space ",
      "   several   spaces   ",
      " ",
      "  ",
      "line one\nline two\n\nline four\n",
      "\ttabs\tand\t\ttabs",
      "\r\nwindows\r\n",
      "Numbers: 0 1 12 123 1234 3.14159 -42 1e10 2024-11-29",
      "Punctuation!? ... -- (brackets) [more] {braces} <angle> @#$%^&*_+=|\\/~`'\"",
      "Accents: café, naïve, Ångström, façade, jalapeño, Zürich, Łódź, ĳ",
      "Ελληνικά και русский текст",
      "中文测试：你好，世界！日本語のテキスト。한국어 텍스트",
      "Emoji: 😀🎉👍🏽 👨‍👩‍👧 🇫🇷 and rare 𐍈 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
      "mixed: abc中😀def\n\t 𝕏",
      "\xEF\xBF\xBD replacement char",
      "a\xC2\xA0non-breaking space and zero\xE2\x80\x8Bwidth",
      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
      "<s> </s> <unk> <0x41> look like special tokens but are text",
      "▁ the space symbol itself",
  };
  for (const std::string& text : corpus) ExpectSameAsSentencePiece(text);
}

TEST_F(Llama2TokenizerTest, MatchesSentencePieceOnLongText) {
  std::string text;
  std::mt19937 rng(7);
  const std::vector<std::string> words = {"the", "tokenizer", " ", "  ", "\n", "é", "中文",
                                          "😀", "42", ",", "Llama", "serving", "x"};
  while (text.size() < 200000) text += words[rng() % words.size()] + " ";
  ExpectSameAsSentencePiece(text);
}

TEST_F(Llama2TokenizerTest, MatchesSentencePieceOnRandomStrings) {
  // Characters from many scripts, spaces and controls, in random strings.
  const std::vector<std::string> chars = {
      "a", "b", "e", "t", "h", "n", "s", " ", " ", " ", "\n", "\t", "0", "7", ".", ",",
      "'", "-", "é", "ß", "ñ", "ø", "Ж", "λ", "中", "文", "日", "の", "한", "ع", "ह",
      "😀", "🎉", "🏽", "\xE2\x80\x8D", "𝔘", "\xC2\xA0", "\xE2\x96\x81", "~", "A", "Z"};
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000; ++i) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) text += chars[rng() % chars.size()];
    ExpectSameAsSentencePiece(text);
    if (HasFailure()) break;
  }
}

TEST_F(Llama2TokenizerTest, DecodeMatchesSentencePieceOnRandomIds) {
  // BOS then random non-control ids, a third of them byte tokens. (Decode differs
  // from SentencePiece by design only for sequences that do not start with BOS.)
  std::mt19937 rng(99);
  for (int i = 0; i < 2000; ++i) {
    std::vector<int32_t> ids = {sp_->bos_id()};
    const int len = 1 + static_cast<int>(rng() % 30);
    while (static_cast<int>(ids.size()) < len) {
      const int32_t id = rng() % 3 == 0 ? 3 + static_cast<int32_t>(rng() % 256)
                                        : static_cast<int32_t>(rng() % sp_->size());
      if (!sp_->IsControl(id)) ids.push_back(id);
    }
    const std::string expected = sp_->Decode(ids);
    absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
    ASSERT_TRUE(text.ok()) << text.status();
    ASSERT_EQ(*text, expected) << "sequence " << i;
  }
}

}  // namespace
}  // namespace folio
