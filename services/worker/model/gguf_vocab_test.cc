// ReadGgufVocab + Tokenizer against llama.cpp's own tokenizer test vectors
// (models/ggml-vocab-*.gguf with .inp/.out, as tests/test-tokenizer-0.cpp reads them:
// add_special = false, parse_special = false), and the loader's errors on bad files.
#include "services/worker/model/gguf_vocab.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/tokenizer.h"
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

}  // namespace
}  // namespace folio::worker
