// ReadGgufVocab + Tokenizer against llama.cpp's own tokenizer test vectors
// (models/ggml-vocab-*.gguf with .inp/.out, as tests/test-tokenizer-0.cpp reads them:
// add_special = false, parse_special = false), and the loader's errors on bad files.
#include "services/worker/model/gguf_vocab.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/byte_unicode.h"
#include "common/tokenizer/incremental_decoder.h"
#include "common/tokenizer/random_text.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/vocab_test_util.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

struct VectorCase {
  std::string input;
  std::vector<int32_t> want;
};

// Splits llama.cpp's .inp/.out pair into cases, as test-tokenizer-0.cpp does.
std::vector<VectorCase> ReadVectors(const std::string& base) {
  std::ifstream inp(base + ".inp", std::ios::binary), out(base + ".out");
  std::stringstream raw;
  raw << inp.rdbuf();
  const std::string text = raw.str();
  std::vector<std::string> inputs;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < text.size();) {
    const size_t next = text.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(text.substr(pos));
      break;
    }
    inputs.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VectorCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VectorCase c;
    c.input = i < inputs.size() ? inputs[i] : "";
    for (absl::string_view t : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      c.want.push_back(std::stoi(std::string(t)));
    }
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), inputs.size()) << base;
  return cases;
}

class LlamaCppVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVectorsTest, MatchesExactly) {
  const std::string path = VocabTestFile(GetParam());
  if (!std::ifstream(path).good()) {
    const std::string why = absl::StrCat(path, " not found: ", ReferenceHint());
    if (ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  absl::StatusOr<Vocab> vocab = LoadGgufVocab(path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<VectorCase> cases = ReadVectors(path);
  ASSERT_FALSE(cases.empty());
  int failures = 0;
  for (const VectorCase& c : cases) {
    absl::StatusOr<std::vector<int32_t>> got =
        tokenizer->Encode(c.input, AddBos::kNo, ParseSpecial::kNo);
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got != c.want && ++failures <= 10) {
      ADD_FAILURE() << GetParam() << ": '" << c.input << "'\n  want "
                    << absl::StrJoin(c.want, " ") << "\n  got  " << absl::StrJoin(*got, " ");
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases.size() << " vectors differ";
}

INSTANTIATE_TEST_SUITE_P(
    Vocabs, LlamaCppVectorsTest,
    ::testing::Values("llama-bpe", "qwen2", "qwen35", "gpt-2", "llama-spm", "phi-3",
                      "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact",
                      "command-r", "mpt"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string name = info.param;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

class ByteLevelVocabTest : public ::testing::TestWithParam<std::string> {};

// decode(encode(text)) == text on random Unicode, and streamed decoding of random ids
// only ever emits valid UTF-8 that adds up to Decode.
TEST_P(ByteLevelVocabTest, RoundTripsAndStreamsValidUtf8) {
  const std::string path = VocabTestFile(GetParam());
  if (!std::ifstream(path).good()) {
    const std::string why = absl::StrCat(path, " not found: ", ReferenceHint());
    if (ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  absl::StatusOr<Vocab> vocab = LoadGgufVocab(path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  ASSERT_EQ(vocab->kind, TokenizerKind::kByteLevelBpe);
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*vocab);
  ASSERT_TRUE(t.ok()) << t.status();
  // Some vocabularies lack tokens for a few bytes (falcon: 0xF2 and some controls;
  // starcoder and refact: 0xF1; all three: bytes that never occur in UTF-8). Text with
  // those bytes cannot be represented, here as in llama.cpp, which drops them too; their
  // characters are left out of the round-trip texts.
  std::vector<bool> missing(256, false);
  int num_missing = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string piece(byte_unicode::ByteToUtf8(static_cast<uint8_t>(b)));
    const auto it = std::find(vocab->pieces.begin(), vocab->pieces.end(), piece);
    if (it == vocab->pieces.end()) {
      missing[b] = true;
      ++num_missing;
    }
  }
  std::mt19937 rng(7);
  int64_t num_chars_dropped = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string random = testing::RandomUnicode(rng, 40);
    std::string text;
    for (size_t pos = 0; pos < random.size();) {
      const size_t len = utf8::ClassifyPrefix(std::string_view(random).substr(pos)).length;
      const std::string_view ch = std::string_view(random).substr(pos, len);
      pos += len;
      if (std::any_of(ch.begin(), ch.end(), [&](char c) { return missing[uint8_t(c)]; })) {
        ++num_chars_dropped;
      } else {
        text.append(ch);
      }
    }
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(text, AddBos::kNo, ParseSpecial::kNo);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(*t->Decode(*ids), text) << absl::StrJoin(*ids, " ");
  }
  if (num_missing > 0) {
    std::cout << GetParam() << ": " << num_missing << " bytes have no token; "
              << num_chars_dropped << " random characters left out\n";
  }
  std::uniform_int_distribution<int32_t> any_id(0, t->vocab_size() - 1);
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> ids(rng() % 16);
    for (int32_t& id : ids) id = any_id(rng);
    IncrementalDecoder decoder(*t);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string delta = *decoder.Add(id);
      ASSERT_TRUE(utf8::FindInvalid(delta) == std::string_view::npos);
      streamed += delta;
    }
    streamed += decoder.Flush();
    ASSERT_EQ(streamed, *t->Decode(ids));
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, ByteLevelVocabTest,
                         ::testing::Values("llama-bpe", "qwen2", "qwen35", "gpt-2",
                                           "deepseek-llm", "deepseek-coder", "falcon",
                                           "starcoder", "refact", "command-r", "mpt"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// A small gpt2 vocabulary file a test can perturb: "a", "b", "ab", "Ġ", "Ġa" with merges
// "a b" and "Ġ a", and <|endoftext|> (control) as EOS.
struct BpeFile {
  std::string pre = "gpt-2";
  bool with_pre = true;
  std::vector<std::string> merges = {"a b", "\xC4\xA0 a"};
  int64_t eos = 5;
  std::vector<int32_t> types = {1, 1, 1, 1, 1, 3, 3};
};

absl::StatusOr<Vocab> ReadBpe(const BpeFile& b) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  if (b.with_pre) w.AddString("tokenizer.ggml.pre", b.pre);
  w.AddStringArray("tokenizer.ggml.tokens",
                   std::vector<std::string>{"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "a",
                                            "<|endoftext|>", "<|im_end|>"});
  w.AddInt32Array("tokenizer.ggml.token_type", b.types);
  w.AddStringArray("tokenizer.ggml.merges", b.merges);
  w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(b.eos));
  w.AddUint32("tokenizer.ggml.bos_token_id", 5);
  const std::string bytes = w.Serialize();
  absl::StatusOr<GgufFile> f = GgufFile::Parse(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      "bpe.gguf");
  if (!f.ok()) return f.status();
  return ReadGgufVocab(*f);
}

TEST(GgufVocabTest, ReadsAByteLevelVocabulary) {
  absl::StatusOr<Vocab> v = ReadBpe(BpeFile{});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->kind, TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(v->pre_tokenizer, "gpt-2");
  EXPECT_EQ(v->merges, (std::vector<std::pair<int32_t, int32_t>>{{0, 1}, {3, 0}}));
  EXPECT_EQ(v->unk_id, -1);
  EXPECT_FALSE(v->add_bos);
  EXPECT_FALSE(v->add_dummy_prefix);
  EXPECT_EQ(v->eog_ids, (std::vector<int32_t>{5, 6}));  // EOS and <|im_end|> by its text
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*v);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Encode("ab a", AddBos::kNo), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(*t->Encode("a<|im_end|>", AddBos::kNo, ParseSpecial::kYes),
            (std::vector<int32_t>{0, 6}));
}

TEST(GgufVocabTest, MissingPreTokenizerFallsBackToDefault) {
  BpeFile b;
  b.with_pre = false;
  absl::StatusOr<Vocab> v = ReadBpe(b);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->pre_tokenizer, "default");
}

TEST(GgufVocabTest, RefusesBadFilesNamingFileAndKey) {
  BpeFile b;
  b.pre = "llama-9";
  absl::Status s = ReadBpe(b).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("bpe.gguf: key 'tokenizer.ggml.pre'"));
  EXPECT_THAT(s.message(), HasSubstr("unknown pre-tokenizer 'llama-9'"));
  EXPECT_THAT(s.message(), HasSubstr("llama-bpe"));

  b = BpeFile{};
  b.merges = {"a b", "a zz"};
  s = ReadBpe(b).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("bpe.gguf: key 'tokenizer.ggml.merges'"));
  EXPECT_THAT(s.message(), HasSubstr("merge 1 'a zz' names 'zz'"));

  b = BpeFile{};
  b.merges = {"b a"};  // "ba" is not a token
  s = ReadBpe(b).status();
  EXPECT_THAT(s.message(), HasSubstr("forms 'ba'"));

  b = BpeFile{};
  b.merges = {"ab"};
  EXPECT_THAT(ReadBpe(b).status().message(), HasSubstr("not two pieces"));

  b = BpeFile{};
  b.eos = 7;
  s = ReadBpe(b).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("bpe.gguf: key 'tokenizer.ggml.eos_token_id'"));
  EXPECT_THAT(s.message(), HasSubstr("7 is not a token"));
}

TEST(GgufVocabTest, RefusesUnsupportedTokenizerModels) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "bert");
  const std::string bytes = w.Serialize();
  absl::StatusOr<GgufFile> f = GgufFile::Parse(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      "b.gguf");
  ASSERT_TRUE(f.ok());
  absl::Status s = ReadGgufVocab(*f).status();
  EXPECT_TRUE(absl::IsUnimplemented(s));
  EXPECT_THAT(s.message(), HasSubstr("'bert'"));
  EXPECT_THAT(s.message(), HasSubstr("'gpt2'"));
}

}  // namespace
}  // namespace folio::worker
