#include "common/tokenizer/incremental_decoder.h"

#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/test_util.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::ElementsAre;

constexpr char kSp[] = "\xE2\x96\x81";        // "▁"
constexpr char kFffd[] = "\xEF\xBF\xBD";      // U+FFFD
constexpr int32_t kByte0 = 3;                 // id of <0x00> in SmallTokenizer

// <unk> <s> </s>, byte tokens 3..258, then "▁a" (259), "▁" (260), "b" (261).
Tokenizer SmallTokenizer() {
  Vocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.pieces.push_back(name);
    v.types.push_back(TokenType::kByte);
  }
  for (const std::string& p : {std::string(kSp) + "a", std::string(kSp), std::string("b")}) {
    v.pieces.push_back(p);
    v.types.push_back(TokenType::kNormal);
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(std::move(v));
  CHECK(t.ok()) << t.status();
  return *std::move(t);
}

// Feeds `ids` one at a time; returns every delta, the Flush() output last.
std::vector<std::string> Deltas(const Tokenizer& t, const std::vector<int32_t>& ids) {
  IncrementalDecoder decoder(t);
  std::vector<std::string> deltas;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> delta = decoder.Add(id);
    EXPECT_TRUE(delta.ok()) << delta.status();
    deltas.push_back(delta.value_or(""));
  }
  deltas.push_back(decoder.Flush());
  return deltas;
}

TEST(IncrementalDecoderTest, HoldsBytesUntilTheCharacterCompletes) {
  Tokenizer t = SmallTokenizer();
  // 😀 = F0 9F 98 80 as four byte tokens, between two text tokens.
  EXPECT_THAT(Deltas(t, {1, 259, kByte0 + 0xF0, kByte0 + 0x9F, kByte0 + 0x98, kByte0 + 0x80,
                         261}),
              ElementsAre("", "a", "", "", "", "\xF0\x9F\x98\x80", "b", ""));
}

TEST(IncrementalDecoderTest, ReplacesBytesThatCanNoLongerComplete) {
  Tokenizer t = SmallTokenizer();
  // An impossible continuation releases the held bytes at once.
  EXPECT_THAT(Deltas(t, {kByte0 + 0xE2, kByte0 + 0x82, kByte0 + 'A'}),
              ElementsAre("", "", std::string(kFffd) + kFffd + "A", ""));
  // A lone continuation byte is invalid immediately.
  EXPECT_THAT(Deltas(t, {kByte0 + 0x80}), ElementsAre(kFffd, ""));
  // A text token ends the byte run.
  EXPECT_THAT(Deltas(t, {kByte0 + 0xC3, 261}), ElementsAre("", std::string(kFffd) + "b", ""));
  // A control token ends it too, even if a later byte would have fitted.
  EXPECT_THAT(Deltas(t, {kByte0 + 0xC3, 2, kByte0 + 0xA9}),
              ElementsAre("", kFffd, kFffd, ""));
  // Flush releases an unfinished character at the very end.
  EXPECT_THAT(Deltas(t, {kByte0 + 0xF0, kByte0 + 0x9F}),
              ElementsAre("", "", std::string(kFffd) + kFffd));
}

TEST(IncrementalDecoderTest, StripsTheSpaceAfterBos) {
  Tokenizer t = SmallTokenizer();
  EXPECT_THAT(Deltas(t, {1, 259, 259}), ElementsAre("", "a", " a", ""));
  EXPECT_THAT(Deltas(t, {259, 259}), ElementsAre(" a", " a", ""));
  EXPECT_THAT(Deltas(t, {1, 2, 259}), ElementsAre("", "", "a", ""));
  EXPECT_THAT(Deltas(t, {1, 260, 259}), ElementsAre("", "", " a", ""));
  EXPECT_THAT(Deltas(t, {1, kByte0 + ' ', 259}), ElementsAre("", " ", " a", ""));
}

TEST(IncrementalDecoderTest, OutOfRangeIdLeavesStateUnchanged) {
  Tokenizer t = SmallTokenizer();
  IncrementalDecoder decoder(t);
  ASSERT_EQ(*decoder.Add(kByte0 + 0xC3), "");
  absl::StatusOr<std::string> bad = decoder.Add(t.vocab_size());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(decoder.Add(-5).ok());
  EXPECT_EQ(decoder.num_pending_bytes(), 1u);
  EXPECT_EQ(*decoder.Add(kByte0 + 0xA9), "\xC3\xA9");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(IncrementalDecoderTest, FlushResetsForANewSequence) {
  Tokenizer t = SmallTokenizer();
  IncrementalDecoder decoder(t);
  ASSERT_EQ(*decoder.Add(1), "");
  EXPECT_EQ(decoder.Flush(), "");
  EXPECT_EQ(*decoder.Add(259), " a");  // the BOS belonged to the previous sequence
}

// ---- Llama 2 vocab: real pieces, random sequences ----

class Llama2IncrementalDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sp_ = testing::SentencePieceReference::LoadLlama2();
    if (sp_ == nullptr) GTEST_SKIP() << testing::kSetModelsDir;
    absl::StatusOr<Tokenizer> t = Tokenizer::Create(sp_->ToVocab());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::make_unique<Tokenizer>(*std::move(t));
  }

  // Decodes `ids` incrementally and checks every delta and their concatenation.
  void ExpectDeltasMatchDecode(const std::vector<int32_t>& ids) {
    std::string joined;
    for (const std::string& delta : Deltas(*tokenizer_, ids)) {
      ASSERT_TRUE(testing::IsValidUtf8(delta)) << "delta is not UTF-8";
      joined += delta;
    }
    absl::StatusOr<std::string> whole = tokenizer_->Decode(ids);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(joined, *whole);
  }

  std::unique_ptr<testing::SentencePieceReference> sp_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Llama2IncrementalDecoderTest, EncodedTextStreamsBackExactly) {
  for (const std::string text :
       {"Hello world", "  spaces\n\ttabs ", "emoji 😀🎉👨‍👩‍👧 and 𝔘𝔫𝔦", "中文 日本語 한국어",
        "🙂"}) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, AddBos::kYes);
    ASSERT_TRUE(ids.ok());
    std::string joined;
    int emitted_nonempty = 0;
    for (const std::string& delta : Deltas(*tokenizer_, *ids)) {
      ASSERT_TRUE(testing::IsValidUtf8(delta));
      joined += delta;
      emitted_nonempty += delta.empty() ? 0 : 1;
    }
    EXPECT_EQ(joined, text);
    EXPECT_GT(emitted_nonempty, 0);
  }
}

TEST_F(Llama2IncrementalDecoderTest, RandomSequencesMatchDecode) {
  std::mt19937 rng(2024);
  const int32_t n = tokenizer_->vocab_size();
  for (int i = 0; i < 3000; ++i) {
    std::vector<int32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 48);
    for (int k = 0; k < len; ++k) {
      switch (rng() % 8) {
        case 0:
        case 1:
        case 2:  // byte tokens, often continuation or lead bytes
          ids.push_back(3 + static_cast<int32_t>(rng() % 256));
          break;
        case 3:  // <unk>, <s>, </s>
          ids.push_back(static_cast<int32_t>(rng() % 3));
          break;
        default:
          ids.push_back(static_cast<int32_t>(rng() % n));
      }
    }
    ExpectDeltasMatchDecode(ids);
    if (HasFailure()) {
      ADD_FAILURE() << "failing sequence #" << i;
      break;
    }
  }
}

TEST_F(Llama2IncrementalDecoderTest, ValidByteSequencesOfEveryLength) {
  // Every character length split over byte tokens, after BOS and mid-text.
  for (const std::string ch : {"A", "é", "€", "😀"}) {
    std::vector<int32_t> ids = {1};
    for (char c : ch) ids.push_back(3 + static_cast<uint8_t>(c));
    ids.push_back(sp_->PieceToId(std::string(kSp) + "the"));
    ExpectDeltasMatchDecode(ids);
    EXPECT_EQ(*tokenizer_->Decode(ids), ch + " the");
  }
}

}  // namespace
}  // namespace folio
