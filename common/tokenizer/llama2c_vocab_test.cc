#include "common/tokenizer/llama2c_vocab.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/test_models_dir.h"
#include "common/tokenizer/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio {
namespace {

using ::testing::HasSubstr;

// Builds a llama2.c tokenizer file in memory.
class FileBuilder {
 public:
  explicit FileBuilder(int32_t max_token_length) { AppendInt(max_token_length); }
  FileBuilder& Token(float score, std::string_view bytes) {
    AppendRaw(&score, sizeof(score));
    AppendInt(static_cast<int32_t>(bytes.size()));
    data_.append(bytes);
    return *this;
  }
  FileBuilder& AppendInt(int32_t v) {
    AppendRaw(&v, sizeof(v));
    return *this;
  }
  const std::string& data() const { return data_; }

 private:
  void AppendRaw(const void* p, size_t n) { data_.append(static_cast<const char*>(p), n); }
  std::string data_;
};

std::string WriteTemp(std::string_view name, std::string_view contents) {
  const std::string path = ::testing::TempDir() + "/" + std::string(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// <unk>, <s>, </s> as llama2.c writes them, then " a" and "b".
FileBuilder SmallFile() {
  FileBuilder b(7);
  b.Token(0, "<unk>").Token(0, "\n<s>\n").Token(0, "\n</s>\n");
  b.Token(-1, " a").Token(-2, "b").Token(0, "<0x41>");
  return b;
}

TEST(Llama2cVocabTest, LoadsASmallFile) {
  const std::string path = WriteTemp("small.bin", SmallFile().data());
  absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(path, 6);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->pieces,
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b", "<0x41>"}));
  EXPECT_EQ(vocab->scores, (std::vector<float>{0, 0, 0, -1, -2, 0}));
  EXPECT_EQ(vocab->types, (std::vector<TokenType>{TokenType::kUnknown, TokenType::kControl,
                                                  TokenType::kControl, TokenType::kNormal,
                                                  TokenType::kNormal, TokenType::kByte}));
  EXPECT_EQ(vocab->bos_id, 1);
  EXPECT_EQ(vocab->eos_id, 2);
  EXPECT_EQ(vocab->unk_id, 0);
}

TEST(Llama2cVocabTest, RejectsMalformedFiles) {
  struct Case {
    std::string name;
    std::string contents;
    int32_t vocab_size;
    std::string error;
  };
  std::vector<Case> cases = {
      {"empty.bin", "", 6, "truncated: header max_token_length"},
      {"zero_max.bin", FileBuilder(0).data(), 6, "max_token_length is 0"},
      {"short.bin", SmallFile().data(), 7, "truncated: token 6 score"},
      {"long_tok.bin", FileBuilder(2).Token(0, "<unk>").data(), 1, "vocab_size 1"},
      {"too_long.bin", FileBuilder(2).Token(0, "<unk>").data(), 3, "token 0 has length 5"},
      {"trailing.bin", SmallFile().data() + "xx", 6, "2 bytes left after token 5"},
      {"nan.bin", FileBuilder(7).Token(std::nanf(""), "<unk>").data(), 3, "NaN score"},
  };
  // A negative length: score, then length -1.
  FileBuilder negative(7);
  negative.Token(0, "<unk>");
  negative.AppendInt(0).AppendInt(-1);
  cases.push_back({"negative.bin", negative.data(), 3, "token 1 has length -1"});
  for (const Case& c : cases) {
    const std::string path = WriteTemp(c.name, c.contents);
    absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(path, c.vocab_size);
    ASSERT_FALSE(vocab.ok()) << c.name;
    EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(vocab.status().message(), HasSubstr(c.error)) << c.name;
    EXPECT_THAT(vocab.status().message(), HasSubstr(path)) << c.name;
  }
}

TEST(Llama2cVocabTest, MissingFileIsNotFound) {
  absl::StatusOr<Vocab> vocab =
      LoadLlama2cVocab(::testing::TempDir() + "/does_not_exist.bin", 512);
  ASSERT_FALSE(vocab.ok());
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(vocab.status().message(), HasSubstr("does_not_exist.bin"));
}

TEST(Llama2cVocabTest, EveryTruncationOfASmallFileIsAnError) {
  const std::string full = SmallFile().data();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string path = WriteTemp("trunc_small.bin", full.substr(0, n));
    absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(path, 6);
    ASSERT_FALSE(vocab.ok()) << "prefix of " << n << " bytes";
    EXPECT_THAT(vocab.status().message(), HasSubstr("truncated")) << n;
  }
}

// ---- the real stories260K tokenizer ----

TEST(Stories260KVocabTest, LoadsTok512) {
  const std::optional<std::string> path = testing::ModelPath("stories260K/tok512.bin");
  if (!path) GTEST_SKIP() << testing::kSetModelsDir;
  absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(*path, 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  ASSERT_EQ(vocab->size(), 512);
  EXPECT_EQ(vocab->pieces[1], "<s>");
  EXPECT_EQ(vocab->pieces[2], "</s>");
  for (int id = 3; id <= 258; ++id) {
    EXPECT_EQ(vocab->types[id], TokenType::kByte) << id;
  }
  EXPECT_EQ(vocab->pieces[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(vocab->pieces[403], "\xE2\x96\x81" "Once");  // " Once" in the file
  EXPECT_EQ(vocab->pieces[410], "\xE2\x96\x81");         // " " in the file
  EXPECT_EQ(vocab->types[403], TokenType::kNormal);
  EXPECT_FLOAT_EQ(vocab->scores[403], -144.0f);
  for (const std::string& piece : vocab->pieces) {
    EXPECT_EQ(piece.find(' '), std::string::npos) << "plain space left in " << piece;
  }
  EXPECT_TRUE(Tokenizer::Create(*std::move(vocab)).ok());

  // The wrong vocab size is caught either way.
  EXPECT_THAT(LoadLlama2cVocab(*path, 511).status().message(), HasSubstr("bytes left"));
  EXPECT_THAT(LoadLlama2cVocab(*path, 513).status().message(), HasSubstr("truncated"));
}

TEST(Stories260KVocabTest, EveryTruncationIsAnErrorNotACrash) {
  const std::optional<std::string> path = testing::ModelPath("stories260K/tok512.bin");
  if (!path) GTEST_SKIP() << testing::kSetModelsDir;
  const std::string full = ReadFileOrEmpty(*path);
  ASSERT_GT(full.size(), 4u);
  const std::string copy = ::testing::TempDir() + "/tok512_truncated.bin";
  // Every cut in the header and the first tokens, then a stride through the rest
  // (each cut is a file write, kept few so the test stays fast on a busy disk).
  for (size_t n = 0; n < full.size(); n += (n < 256 ? 1 : 17)) {
    {
      std::ofstream out(copy, std::ios::binary | std::ios::trunc);
      out.write(full.data(), static_cast<std::streamsize>(n));
    }
    absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(copy, 512);
    ASSERT_FALSE(vocab.ok()) << "prefix of " << n << " bytes loaded";
    ASSERT_THAT(vocab.status().message(), HasSubstr("truncated")) << n;
    ASSERT_THAT(vocab.status().message(), HasSubstr(copy)) << n;
  }
  // Corrupting a length field is caught too.
  std::string corrupt = full;
  const int32_t huge = 1 << 30;
  std::memcpy(corrupt.data() + 4 + 4, &huge, sizeof(huge));  // token 0's length
  absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(WriteTemp("tok512_corrupt.bin", corrupt), 512);
  ASSERT_FALSE(vocab.ok());
  EXPECT_THAT(vocab.status().message(), HasSubstr("token 0 has length 1073741824"));
}

}  // namespace
}  // namespace folio
