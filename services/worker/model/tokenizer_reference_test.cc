// Folio's tokenizers against llama.cpp's own (llama_tokenize through folio_llama_ref) on
// a corpus of our own: multilingual text, code, emoji with joiners and flags, whitespace
// runs, numbers, and each vocabulary's special tokens written inside text; with
// parse_special on and off, and with and without the vocabulary's BOS/EOS. Also the
// end-of-generation set, token by token.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/model/tokenizer_corpus.h"
#include "services/worker/model/vocab_test_util.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

using testing::Corpus;
using testing::SpecialTexts;

class TokenizerReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerReferenceTest, MatchesLlamaTokenize) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string path = VocabTestFile(GetParam());
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> ref =
      reference::LlamaModel::Load(path, reference::LlamaModelOptions{.vocab_only = true});
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<Vocab> vocab = LoadGgufVocab(path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*vocab);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->vocab_size(), (*ref)->n_vocab());

  std::vector<std::string> texts = Corpus();
  for (std::string& s : SpecialTexts(*vocab)) texts.push_back(std::move(s));
  int compared = 0, failures = 0;
  for (const std::string& text : texts) {
    for (const bool parse_special : {false, true}) {
      for (const bool add_special : {false, true}) {
        absl::StatusOr<std::vector<int32_t>> want = (*ref)->Tokenize(
            text, {.add_special = add_special, .parse_special = parse_special});
        ASSERT_TRUE(want.ok()) << want.status();
        absl::StatusOr<std::vector<int32_t>> got =
            t->Encode(text, add_special ? AddBos::kVocabDefault : AddBos::kNo,
                      parse_special ? ParseSpecial::kYes : ParseSpecial::kNo);
        ASSERT_TRUE(got.ok()) << got.status();
        ++compared;
        if (*got != *want && ++failures <= 8) {
          ADD_FAILURE() << GetParam() << " parse_special=" << parse_special
                        << " add_special=" << add_special << ": '" << text << "'\n  want "
                        << absl::StrJoin(*want, " ") << "\n  got  " << absl::StrJoin(*got, " ");
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << compared << " encodings differ";

  // The same tokens end generation.
  std::vector<int32_t> want_eog;
  for (int32_t id = 0; id < t->vocab_size(); ++id) {
    if ((*ref)->IsEndOfGeneration(id)) want_eog.push_back(id);
  }
  EXPECT_EQ(t->eog_ids(), want_eog) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(
    Vocabs, TokenizerReferenceTest,
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
