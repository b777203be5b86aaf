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
#include "services/worker/model/vocab_test_util.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

const std::vector<std::string>& Corpus() {
  static const auto* corpus = new std::vector<std::string>{
      "The quick brown fox jumps over the lazy dog.",
      "  leading spaces, trailing spaces   ",
      "tabs\tand\t\tnewlines\n\n\nand\r\nCRLF\r\n",
      "          ten spaces then text",
      "\n\n\n\n",
      "Numbers: 0 7 42 1234 12345678 3.14159 -17 1,000,000 2024-12-01 0x1F",
      "Deutsch: Größenwahn, Äpfel, Straße. Français : l'été, où ça ? Español: ¿Qué tal? ñandú",
      "Русский текст: Съешь же ещё этих мягких французских булок.",
      "中文：我能吞下玻璃而不伤身体。日本語：私はガラスを食べられます。한국어: 나는 유리를 먹을 수 있어요.",
      "العربية: أنا قادر على أكل الزجاج. עברית: אני יכול לאכול זכוכית. हिन्दी: मैं काँच खा सकता हूँ।",
      "Tiếng Việt: Cửa Việt, Đà Nẵng. ελληνικά: Μπορώ να φάω σπασμένα γυαλιά.",
      "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🦙 🤷‍♀️ 1️⃣",
      "int main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  return v[0] + 0x2A;\n}\n",
      "def f(x):\n    return [i ** 2 for i in range(x) if i % 3 == 0]  # comment\n",
      "<div class=\"x\">&amp; &lt;tag&gt;</div> {\"key\": [1, 2.5e-3, null, true]}",
      "I'm sure you'll see they'd've DONE it; it's OK'd. 'quoted' \"double\"",
      "mixedCASEWords camelCaseIdentifier snake_case_name SCREAMING_CASE HTTPServerError",
      "a\u00a0non-breaking space, a\u2009thin space, zero\u200bwidth, soft\u00adhyphen",
      "combining: e\u0301 a\u0308 n\u0303 (decomposed) vs é ä ñ",
      "",
      " ",
      "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
  };
  return *corpus;
}

// Corpus texts with the vocabulary's own special tokens written inside: the first few
// control and user-defined tokens, and the usual markers where the vocabulary has them.
std::vector<std::string> SpecialTexts(const Vocab& v) {
  std::vector<std::string> specials;
  int control = 0, user = 0;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.types[id] == TokenType::kControl && control < 4) {
      specials.push_back(v.pieces[id]);
      ++control;
    } else if (v.types[id] == TokenType::kUserDefined && user < 4) {
      specials.push_back(v.pieces[id]);
      ++user;
    }
  }
  for (const char* marker : {"<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>",
                             "<|begin_of_text|>", "<s>", "</s>", "<unk>"}) {
    specials.emplace_back(marker);
  }
  std::vector<std::string> texts;
  for (const std::string& s : specials) {
    texts.push_back(absl::StrCat(s, "user\nHello", s, " world ", s, s, "\n"));
    texts.push_back(absl::StrCat("x", s, "y ", s));
  }
  return texts;
}

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
