// Byte mapping, BPE merging and the byte-level Tokenizer on small hand-made vocabularies.
// (The real vocabularies are checked against llama.cpp's vectors in
// services/worker/model/gguf_vocab_test.cc.)
#include "common/tokenizer/bpe.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/tokenizer/byte_unicode.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/random_text.h"
#include "common/tokenizer/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteUnicodeTest, MapsEveryByteToItsOwnPrintableCodePoint) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string_view mapped = byte_unicode::ByteToUtf8(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(std::string(mapped)).second) << b;
    std::string back;
    ASSERT_TRUE(byte_unicode::Decode(mapped, &back)) << b;
    EXPECT_EQ(back, std::string(1, static_cast<char>(b)));
  }
  EXPECT_EQ(byte_unicode::ByteToUtf8(' '), "\xC4\xA0");   // Ġ U+0120
  EXPECT_EQ(byte_unicode::ByteToUtf8('\n'), "\xC4\x8A");  // Ċ U+010A
  EXPECT_EQ(byte_unicode::ByteToUtf8('a'), "a");
  EXPECT_EQ(byte_unicode::ByteToUtf8(0xE9), "\xC3\xA9");  // é stays é
  EXPECT_EQ(byte_unicode::ByteToUtf8(0xAD), "\xC5\x83");  // soft hyphen -> U+0143, the last
}

TEST(ByteUnicodeTest, RoundTripsAndRejectsOutsideTheMapping) {
  const std::string text = "caf\xC3\xA9 \xF0\x9F\xA6\x99\n\t";  // "café 🦙\n\t"
  std::string mapped, back;
  byte_unicode::Encode(text, &mapped);
  ASSERT_TRUE(byte_unicode::Decode(mapped, &back));
  EXPECT_EQ(back, text);
  std::string out;
  EXPECT_FALSE(byte_unicode::Decode("\xE2\x82\xAC", &out));  // € (3 bytes) is no byte
  EXPECT_FALSE(byte_unicode::Decode("\xC5\x84", &out));      // U+0144: one past the end
  EXPECT_FALSE(byte_unicode::Decode("\xC1\xA1", &out));      // overlong 'a'
  EXPECT_FALSE(byte_unicode::Decode("\xC4", &out));          // truncated
}

// pieces: 0 a, 1 b, 2 c, 3 ab, 4 bc, 5 abc
std::vector<std::string> AbcPieces() { return {"a", "b", "c", "ab", "bc", "abc"}; }

std::vector<int32_t> EncodeWord(const BpeModel& m, std::string_view word) {
  std::vector<int32_t> ids;
  m.EncodeWord(word, &ids);
  return ids;
}

TEST(BpeModelTest, MergesLowestRankFirst) {
  absl::StatusOr<BpeModel> ab_first =
      BpeModel::Create(AbcPieces(), {{0, 1}, {3, 2}, {1, 2}}, IgnoreMerges::kNo);
  ASSERT_TRUE(ab_first.ok()) << ab_first.status();
  EXPECT_THAT(EncodeWord(*ab_first, "abc"), ElementsAre(5));
  EXPECT_THAT(EncodeWord(*ab_first, "bc"), ElementsAre(4));
  EXPECT_THAT(EncodeWord(*ab_first, "cab"), ElementsAre(2, 3));

  // (b, c) ranks first: "abc" becomes a + bc, which has no merge.
  absl::StatusOr<BpeModel> bc_first =
      BpeModel::Create(AbcPieces(), {{1, 2}, {0, 1}, {3, 2}}, IgnoreMerges::kNo);
  ASSERT_TRUE(bc_first.ok());
  EXPECT_THAT(EncodeWord(*bc_first, "abc"), ElementsAre(0, 4));
}

TEST(BpeModelTest, TiesGoToTheLeftmostPair) {
  // "aaa" with only (a, a): the left pair merges, the right a stays.
  absl::StatusOr<BpeModel> m = BpeModel::Create({"a", "aa"}, {{0, 0}}, IgnoreMerges::kNo);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(EncodeWord(*m, "aaa"), ElementsAre(1, 0));
  EXPECT_THAT(EncodeWord(*m, "aaaa"), ElementsAre(1, 1));
}

TEST(BpeModelTest, IgnoreMergesEmitsWholeEntries) {
  absl::StatusOr<BpeModel> plain = BpeModel::Create(AbcPieces(), {}, IgnoreMerges::kNo);
  absl::StatusOr<BpeModel> whole = BpeModel::Create(AbcPieces(), {}, IgnoreMerges::kYes);
  ASSERT_TRUE(plain.ok() && whole.ok());
  EXPECT_THAT(EncodeWord(*plain, "abc"), ElementsAre(0, 1, 2));
  EXPECT_THAT(EncodeWord(*whole, "abc"), ElementsAre(5));
  EXPECT_THAT(EncodeWord(*whole, "abca"), ElementsAre(0, 1, 2, 0));  // not an entry: merge
}

TEST(BpeModelTest, UnknownCharactersFallBackToSingleBytesOrNothing) {
  // "é" (C3 A9) is no entry; neither are its bytes: nothing is emitted for it.
  absl::StatusOr<BpeModel> m = BpeModel::Create(AbcPieces(), {}, IgnoreMerges::kNo);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(EncodeWord(*m, "a\xC3\xA9" "b"), ElementsAre(0, 1));
}

TEST(BpeModelTest, RefusesBadMerges) {
  absl::StatusOr<BpeModel> out_of_range =
      BpeModel::Create(AbcPieces(), {{0, 9}}, IgnoreMerges::kNo);
  EXPECT_TRUE(absl::IsInvalidArgument(out_of_range.status()));
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("merge 0 (0, 9)"));
  absl::StatusOr<BpeModel> not_entry = BpeModel::Create(AbcPieces(), {{2, 0}}, IgnoreMerges::kNo);
  EXPECT_TRUE(absl::IsInvalidArgument(not_entry.status()));
  EXPECT_THAT(not_entry.status().message(), HasSubstr("forms 'ca'"));
}

// A byte-level vocabulary: the 256 mapped bytes (ids 0..255), merges for "Ġt", "he",
// "Ġthe", then <|endoftext|> (control) and <tool> (user-defined).
Vocab ByteLevelVocab() {
  Vocab v;
  v.kind = TokenizerKind::kByteLevelBpe;
  for (int b = 0; b < 256; ++b) v.pieces.emplace_back(byte_unicode::ByteToUtf8(b));
  const std::string sp(byte_unicode::ByteToUtf8(' '));
  auto id = [&](std::string_view p) {
    for (size_t i = 0; i < v.pieces.size(); ++i) {
      if (v.pieces[i] == p) return static_cast<int32_t>(i);
    }
    return -1;
  };
  v.pieces.push_back(sp + "t");  // 256
  v.merges.emplace_back(id(sp), id("t"));
  v.pieces.push_back("he");      // 257
  v.merges.emplace_back(id("h"), id("e"));
  v.pieces.push_back(sp + "the");  // 258
  v.merges.emplace_back(256, 257);
  v.pieces.push_back("<|endoftext|>");  // 259
  v.pieces.push_back("<tool>");         // 260
  v.types.assign(v.pieces.size(), TokenType::kNormal);
  v.types[259] = TokenType::kControl;
  v.types[260] = TokenType::kUserDefined;
  v.scores.assign(v.pieces.size(), 0.0f);
  v.bos_id = v.eos_id = 259;
  v.unk_id = -1;
  v.add_bos = false;
  v.add_dummy_prefix = false;
  v.pre_tokenizer = "gpt-2";
  return v;
}

TEST(ByteLevelTokenizerTest, EncodesDecodesAndSplitsSpecialTokens) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(ByteLevelVocab());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*t->Encode(" the", AddBos::kNo), ElementsAre(258));
  // gpt-2 pre-tokenizer: "the" and " the" are separate words.
  EXPECT_THAT(*t->Encode("the the", AddBos::kNo), ElementsAre('t', 257, 258));
  // Control tokens only with ParseSpecial::kYes; user-defined ones always.
  EXPECT_THAT(*t->Encode("a<|endoftext|>", AddBos::kNo, ParseSpecial::kYes),
              ElementsAre('a', 259));
  EXPECT_EQ(t->Encode("a<|endoftext|>", AddBos::kNo, ParseSpecial::kNo)->size(), 14u);
  EXPECT_THAT(*t->Encode("a<tool>b", AddBos::kNo, ParseSpecial::kNo),
              ElementsAre('a', 260, 'b'));
  // Bytes: "é" is two tokens, each half a character; they decode back together.
  const std::vector<int32_t> e = *t->Encode("\xC3\xA9", AddBos::kNo);
  EXPECT_THAT(e, ElementsAre(0xC3, 0xA9));
  EXPECT_EQ(*t->Decode(e), "\xC3\xA9");
  EXPECT_EQ(*t->Decode(std::vector<int32_t>{0xC3}), "\xEF\xBF\xBD");  // half a character: U+FFFD
  EXPECT_EQ(*t->Decode(std::vector<int32_t>{'a', 259, 260, 258}), "a<tool> the");  // control: nothing
  EXPECT_TRUE(t->IsEndOfGeneration(259));
  EXPECT_FALSE(t->IsEndOfGeneration(258));
}

TEST(ByteLevelTokenizerTest, RefusesUnknownPreTokenizerAndInvalidUtf8) {
  Vocab v = ByteLevelVocab();
  v.pre_tokenizer = "no-such-thing";
  absl::StatusOr<Tokenizer> bad = Tokenizer::Create(v);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("'no-such-thing'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("llama-bpe"));
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(ByteLevelVocab());
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::vector<int32_t>> ids = t->Encode("ab\xFF", AddBos::kNo);
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status()));
  EXPECT_THAT(ids.status().message(), HasSubstr("byte offset 2"));
}

TEST(ByteLevelTokenizerTest, RoundTripsRandomUnicodeAndStreamsValidUtf8) {
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(ByteLevelVocab());
  ASSERT_TRUE(t.ok());
  std::mt19937 rng(16);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = testing::RandomUnicode(rng, 24);
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(text, AddBos::kNo);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(*t->Decode(*ids), text);
  }
  // Random id sequences: every delta is valid UTF-8 and the deltas add up to Decode.
  std::uniform_int_distribution<int32_t> any_id(0, t->vocab_size() - 1);
  for (int i = 0; i < 2000; ++i) {
    std::vector<int32_t> ids(rng() % 12);
    for (int32_t& id : ids) id = any_id(rng);
    IncrementalDecoder decoder(*t);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string delta = *decoder.Add(id);
      ASSERT_TRUE(testing::IsValidUtf8(delta));
      streamed += delta;
    }
    streamed += decoder.Flush();
    ASSERT_EQ(streamed, *t->Decode(ids));
  }
}

}  // namespace
}  // namespace folio
