#include "services/frontend/completion_text.h"

#include <string>
#include <vector>

#include "common/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "services/frontend/test_tokenizer.h"

namespace folio::frontend {
namespace {

class CompletionTextTest : public ::testing::Test {
 protected:
  CompletionTextTest() : tokenizer_(testing::TestTokenizer()) {}

  std::vector<int32_t> Encode(const std::string& text) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_.Encode(text, AddBos::kNo);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
  int32_t Byte(int b) { return 3 + b; }

  Tokenizer tokenizer_;
};

TEST_F(CompletionTextTest, TokenByTokenEqualsDecode) {
  const std::vector<int32_t> ids = Encode("the cat sat on the mat");
  ASSERT_GT(ids.size(), 4u);
  CompletionText text(tokenizer_, {});
  std::string out;
  for (int32_t id : ids) {
    absl::StatusOr<CompletionText::Delta> d = text.AddTokens({&id, 1});
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->num_tokens_used, 1);
    out += d->text;
  }
  out += text.Finish().text;
  EXPECT_EQ(out, *tokenizer_.Decode(ids));
  EXPECT_EQ(text.num_tokens(), static_cast<int32_t>(ids.size()));
}

TEST_F(CompletionTextTest, StopStringAcrossTokensStopsAtTheCompletingToken) {
  // " cat" and " sat" are single tokens; the stop "t s" spans them.
  const std::vector<int32_t> ids = Encode("the cat sat on the mat");
  CompletionText text(tokenizer_, {"t s"});
  absl::StatusOr<CompletionText::Delta> d = text.AddTokens(ids);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->stopped);
  EXPECT_EQ(d->text, " the ca");
  EXPECT_EQ(d->num_tokens_used, 3);  // " the", " cat", " sat"
  EXPECT_EQ(text.num_tokens(), 3);
  // Later tokens are ignored.
  absl::StatusOr<CompletionText::Delta> more = text.AddTokens(ids);
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(more->stopped);
  EXPECT_EQ(more->num_tokens_used, 0);
  EXPECT_EQ(more->text, "");
}

TEST_F(CompletionTextTest, ByteTokensCompleteACharacterBeforeAStopMatches) {
  // "é" is not a piece: it arrives as the bytes C3 A9. The stop "é" must match only when
  // the second byte arrives, and nothing before it leaks half a character.
  CompletionText text(tokenizer_, {"\u00e9"});
  const std::vector<int32_t> ids = Encode("the");
  absl::StatusOr<CompletionText::Delta> d = text.AddTokens(ids);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->text, " the");
  const int32_t first = Byte(0xC3);
  d = text.AddTokens({&first, 1});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->text, "");
  EXPECT_FALSE(d->stopped);
  const int32_t second = Byte(0xA9);
  d = text.AddTokens({&second, 1});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->stopped);
  EXPECT_EQ(d->text, "");
}

TEST_F(CompletionTextTest, EveryDeltaIsValidUtf8) {
  // 日 is a piece; 語 too; ü arrives as two byte tokens.
  std::vector<int32_t> ids = Encode("\u65e5\u672c\u8a9e");
  ids.push_back(Byte(0xC3));
  ids.push_back(Byte(0xBC));
  CompletionText text(tokenizer_, {"\u672c\u8a9e!"});  // never completes
  std::string out;
  for (int32_t id : ids) {
    absl::StatusOr<CompletionText::Delta> d = text.AddTokens({&id, 1});
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(utf8::FindInvalid(d->text), std::string::npos);
    out += d->text;
  }
  CompletionText::Delta end = text.Finish();
  EXPECT_FALSE(end.stopped);
  out += end.text;
  EXPECT_EQ(out, *tokenizer_.Decode(ids));
}

TEST_F(CompletionTextTest, FinishFlushesAnIncompleteCharacterAndHeldText) {
  CompletionText text(tokenizer_, {"the end"});
  std::vector<int32_t> ids = Encode("the");
  ids.push_back(Byte(0xE6));
  absl::StatusOr<CompletionText::Delta> d = text.AddTokens(ids);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->text, " ");  // "the" may start "the end"
  CompletionText::Delta end = text.Finish();
  EXPECT_FALSE(end.stopped);
  EXPECT_EQ(end.text, "the\uFFFD");
}

TEST_F(CompletionTextTest, BadTokenIdIsAnErrorAndConsumesNothing) {
  CompletionText text(tokenizer_, {});
  const std::vector<int32_t> ids = {Byte('a'), 99999};
  absl::StatusOr<CompletionText::Delta> d = text.AddTokens(ids);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.num_tokens(), 0);
}

TEST_F(CompletionTextTest, TokenDisplayText) {
  const std::vector<int32_t> ids = Encode("the");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(TokenDisplayText(tokenizer_, ids[0]), " the");
  EXPECT_EQ(TokenDisplayText(tokenizer_, Byte(0xE6)), "<0xE6>");
  EXPECT_EQ(TokenDisplayText(tokenizer_, 2), "</s>");
  EXPECT_EQ(TokenDisplayText(tokenizer_, -3), "<invalid id -3>");
}

}  // namespace
}  // namespace folio::frontend

namespace folio::frontend {
namespace {

TEST(CompletionTextBosTest, ACompletionRightAfterBosDropsItsLeadingSpace) {
  Tokenizer tokenizer = testing::TestTokenizer();
  const std::vector<int32_t> ids = *tokenizer.Encode("the cat", AddBos::kNo);
  auto run = [&](std::vector<int32_t> prompt) {
    CompletionText text(tokenizer, {}, prompt);
    std::string out = text.AddTokens(ids)->text;
    return out + text.Finish().text;
  };
  EXPECT_EQ(run({tokenizer.bos_id()}), "the cat");
  EXPECT_EQ(run({tokenizer.bos_id(), ids[0]}), " the cat") << "a continuation keeps it";
  EXPECT_EQ(run({}), " the cat");
}

}  // namespace
}  // namespace folio::frontend
