#include "services/worker/model/hf_tokenizer.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "glog/logging.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/hf_checkpoint.h"
#include "services/worker/model/random_hf_model.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

// A tokenizer over `v`, whose EOS (tokenizer.json names none) is its last token.
Tokenizer MakeTokenizer(Vocab v) {
  if (v.eos_id < 0) v.eos_id = v.size() - 1;
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(v);
  CHECK(t.ok()) << t.status();
  return *std::move(t);
}

TEST(HfTokenizerTest, ByteLevelTokenizerJsonEncodesAndDecodes) {
  absl::StatusOr<Vocab> v = ParseHfTokenizerJson(MakeByteLevelTokenizerJson(), "tokenizer.json");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->kind, TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(v->pre_tokenizer, "llama3");
  EXPECT_TRUE(v->ignore_merges);
  EXPECT_TRUE(v->add_bos);
  EXPECT_EQ(v->pieces[v->bos_id], "<|begin_of_text|>");
  EXPECT_EQ(v->types[v->bos_id], TokenType::kControl);
  EXPECT_EQ(v->normalizer, "");
  const Tokenizer t = MakeTokenizer(*v);
  absl::StatusOr<std::vector<int32_t>> ids =
      t.Encode("hello world<|eot_id|>", AddBos::kVocabDefault, ParseSpecial::kYes);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 4u);  // BOS, "hello", " world", <|eot_id|>
  EXPECT_EQ(v->pieces[(*ids)[1]], "hello");
  EXPECT_EQ(v->pieces[(*ids)[2]], "\xc4\xa0world");  // "Ġworld"
  EXPECT_EQ(v->pieces[(*ids)[3]], "<|eot_id|>");
  const std::vector<int32_t> words = {(*ids)[1], (*ids)[2]};
  EXPECT_EQ(*t.Decode(words), "hello world");
}

// A tokenizer.json edited by `edit`, then parsed.
absl::StatusOr<Vocab> Edited(const std::function<void(json&)>& edit) {
  json j = json::parse(MakeByteLevelTokenizerJson());
  edit(j);
  return ParseHfTokenizerJson(j.dump(), "/m/tokenizer.json");
}

absl::StatusOr<Vocab> EditedSentencePiece(const std::function<void(json&)>& edit) {
  json j = json::parse(MakeSentencePieceTokenizerJson());
  edit(j);
  return ParseHfTokenizerJson(j.dump(), "/m/tokenizer.json");
}

TEST(HfTokenizerTest, SentencePieceTokenizerJsonEncodesAndDecodes) {
  absl::StatusOr<Vocab> v = ParseHfTokenizerJson(MakeSentencePieceTokenizerJson(), "tokenizer.json");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->kind, TokenizerKind::kSentencePiece);
  EXPECT_TRUE(v->add_dummy_prefix);
  EXPECT_TRUE(v->add_bos);
  EXPECT_EQ(v->pieces[v->bos_id], "<s>");
  EXPECT_EQ(v->types[v->unk_id], TokenType::kUnknown);
  EXPECT_EQ(v->types[3], TokenType::kByte);  // <0x00>
  EXPECT_TRUE(v->merges.empty());            // ranks became scores
  const Tokenizer t = MakeTokenizer(*v);
  EXPECT_TRUE(t.has_byte_fallback());
  auto piece = [&](int32_t id) { return v->pieces[id]; };
  // BOS, "▁hello", "▁world", </s>: the dummy prefix, spaces as ▁, a special token.
  absl::StatusOr<std::vector<int32_t>> ids =
      t.Encode("hello world</s>", AddBos::kVocabDefault, ParseSpecial::kYes);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 4u);
  EXPECT_EQ(piece((*ids)[1]), "\u2581hello");
  EXPECT_EQ(piece((*ids)[2]), "\u2581world");
  EXPECT_EQ(piece((*ids)[3]), "</s>");
  EXPECT_EQ(*t.Decode(*ids), "hello world");
  // A character outside the vocabulary falls back to its UTF-8 bytes.
  ids = t.Encode("\u00e9", AddBos::kNo, ParseSpecial::kNo);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);  // ▁, <0xC3>, <0xA9>
  EXPECT_EQ(piece((*ids)[1]), "<0xC3>");
  EXPECT_EQ(piece((*ids)[2]), "<0xA9>");
  // Merged by rank into one piece.
  ids = t.Encode("the", AddBos::kNo, ParseSpecial::kNo);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 1u);
  EXPECT_EQ(piece((*ids)[0]), "\u2581the");
  // Without Prepend: no dummy prefix.
  absl::StatusOr<Vocab> no_prefix =
      EditedSentencePiece([](json& j) { j["normalizer"]["normalizers"].erase(0); });
  ASSERT_TRUE(no_prefix.ok()) << no_prefix.status();
  EXPECT_FALSE(no_prefix->add_dummy_prefix);
  ids = MakeTokenizer(*no_prefix).Encode("hello world", AddBos::kNo, ParseSpecial::kNo);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ(piece((*ids)[0]), "hello");
}

absl::StatusOr<Vocab> MetaspaceVocab(const std::string& scheme, bool split,
                                     const std::function<void(json&)>& edit = nullptr) {
  json j = json::parse(MakeSentencePieceTokenizerJson());
  if (edit) edit(j);
  absl::StatusOr<std::string> text = MetaspaceTokenizerJson(j.dump(), scheme, split);
  if (!text.ok()) return text.status();
  return ParseHfTokenizerJson(*text, "/m/tokenizer.json");
}

// The pieces of `text` encoded (no BOS, special tokens parsed), joined by '|'.
std::string Pieces(const Vocab& v, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids =
      MakeTokenizer(v).Encode(text, AddBos::kNo, ParseSpecial::kYes);
  if (!ids.ok()) return std::string(ids.status().message());
  std::string out;
  for (int32_t id : *ids) absl::StrAppend(&out, out.empty() ? "" : "|", v.pieces[id]);
  return out;
}

// The Metaspace form (legacy false): where the dummy "▁" goes, by prepend_scheme, and
// split. The expected pieces follow tokenizers' Metaspace rules (metaspace.rs): spaces
// become "▁", then "▁" is prepended unless the stretch already starts with one, for
// "first" only at offset 0 of the text; split cuts before every "▁".
TEST(HfTokenizerTest, MetaspacePrependSchemesAndSplit) {
  absl::StatusOr<Vocab> first = MetaspaceVocab("first", false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->pre_tokenizer, "metaspace-first");
  EXPECT_TRUE(first->add_dummy_prefix);
  absl::StatusOr<Vocab> always = MetaspaceVocab("always", false);
  ASSERT_TRUE(always.ok()) << always.status();
  EXPECT_EQ(always->pre_tokenizer, "metaspace-always");
  absl::StatusOr<Vocab> never = MetaspaceVocab("never", false);
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_EQ(never->pre_tokenizer, "metaspace-never");
  EXPECT_FALSE(never->add_dummy_prefix);
  absl::StatusOr<Vocab> legacy = ParseHfTokenizerJson(MakeSentencePieceTokenizerJson(), "t");
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->pre_tokenizer, "default");

  const std::string s = "\u2581";
  EXPECT_EQ(Pieces(*first, "hello world"), s + "hello|" + s + "world");
  // A leading space is the prefix itself (legacy prepends another one).
  EXPECT_EQ(Pieces(*first, " hello"), s + "hello");
  EXPECT_EQ(Pieces(*always, " hello"), s + "hello");
  EXPECT_EQ(Pieces(*legacy, " hello"), s + "|" + s + "hello");
  // So does a literal "▁".
  EXPECT_EQ(Pieces(*first, s + "hello"), s + "hello");
  // After a special token: "first" never prepends, "always" does unless a space is there,
  // the legacy rule (llama.cpp's) always does.
  EXPECT_EQ(Pieces(*first, "</s>hello"), "</s>|hello");
  EXPECT_EQ(Pieces(*first, "hello</s>hello</s> hello"),
            s + "hello|</s>|hello|</s>|" + s + "hello");
  EXPECT_EQ(Pieces(*always, "</s>hello"), "</s>|" + s + "hello");
  EXPECT_EQ(Pieces(*always, "</s> hello"), "</s>|" + s + "hello");
  EXPECT_EQ(Pieces(*legacy, "</s> hello"), "</s>|" + s + "|" + s + "hello");
  EXPECT_EQ(Pieces(*never, "hello world"), "hello|" + s + "world");
  EXPECT_EQ(Pieces(*never, "</s>hello"), "</s>|hello");

  // split: a merge across a "▁" (here "o" + "▁w", given the best rank) is taken only
  // without it.
  auto cross = [](json& j) {
    json& vocab = j["model"]["vocab"];
    vocab["o\u2581w"] = static_cast<int>(vocab.size());
    j["model"]["merges"].insert(j["model"]["merges"].begin(), "o \u2581w");
  };
  absl::StatusOr<Vocab> joined = MetaspaceVocab("first", false, cross);
  ASSERT_TRUE(joined.ok()) << joined.status();
  absl::StatusOr<Vocab> split = MetaspaceVocab("first", true, cross);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->pre_tokenizer, "metaspace-first-split");
  EXPECT_EQ(Pieces(*joined, "hello world").find("o" + s + "w") != std::string::npos, true)
      << Pieces(*joined, "hello world");
  EXPECT_EQ(Pieces(*split, "hello world"), s + "hello|" + s + "world");
  // The older spelling: add_prefix_space without prepend_scheme or split means "always",
  // split (tokenizers' defaults).
  absl::StatusOr<Vocab> old = ParseHfTokenizerJson(
      [] {
        json j = json::parse(MakeSentencePieceTokenizerJson());
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                              {"add_prefix_space", true}, {"str_rep", "\u2581"}};
        return j.dump();
      }(),
      "t");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->pre_tokenizer, "metaspace-always-split");
  // A Metaspace decoder is read too (decoded by the same rules).
  absl::StatusOr<Vocab> metaspace_decoder = MetaspaceVocab("first", false, [](json& j) {
    j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"},
                    {"split", false}};
  });
  ASSERT_TRUE(metaspace_decoder.ok()) << metaspace_decoder.status();
  // Decoding is the legacy form's: the decoder is the same Sequence.
  absl::StatusOr<std::vector<int32_t>> ids =
      MakeTokenizer(*first).Encode("hello  world", AddBos::kVocabDefault, ParseSpecial::kNo);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*MakeTokenizer(*first).Decode(*ids), "hello  world");
}

// A piece that no merge forms is never produced, as in tokenizers: with the merge that
// forms "▁hello" removed, "hello" stops at the longest pieces the other merges reach.
TEST(HfTokenizerTest, SentencePiecePieceWithoutMergeIsNeverProduced) {
  absl::StatusOr<Vocab> v = EditedSentencePiece([](json& j) {
    json kept = json::array();
    for (const json& m : j["model"]["merges"]) {
      if (m != "\u2581hell o") kept.push_back(m);
    }
    j["model"]["merges"] = kept;
  });
  ASSERT_TRUE(v.ok()) << v.status();
  const Tokenizer t = MakeTokenizer(*v);
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode("hello", AddBos::kNo, ParseSpecial::kNo);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ(v->pieces[(*ids)[0]], "\u2581hell");
  EXPECT_EQ(v->pieces[(*ids)[1]], "o");
}

TEST(HfTokenizerTest, AddedTokensSpecialUserDefinedLstripRstrip) {
  absl::StatusOr<Vocab> v = Edited([](json& j) {
    const int32_t next = j["added_tokens"].back()["id"].get<int32_t>() + 1;
    j["added_tokens"].push_back({{"id", next}, {"content", "<think>"}, {"special", false},
                                 {"lstrip", false}, {"rstrip", true}, {"normalized", false},
                                 {"single_word", false}});
    j["added_tokens"].push_back({{"id", next + 1}, {"content", "[MASK]"}, {"special", true},
                                 {"lstrip", true}, {"rstrip", false}, {"normalized", true},
                                 {"single_word", false}});
  });
  ASSERT_TRUE(v.ok()) << v.status();
  const int32_t think = v->size() - 2, mask = v->size() - 1;
  EXPECT_EQ(v->types[think], TokenType::kUserDefined);
  EXPECT_EQ(v->types[mask], TokenType::kControl);
  EXPECT_EQ(v->rstrip_ids, std::vector<int32_t>{think});
  EXPECT_EQ(v->lstrip_ids, std::vector<int32_t>{mask});
  const Tokenizer t = MakeTokenizer(*v);
  // A user-defined token matches even without parse_special; rstrip eats the spaces after.
  absl::StatusOr<std::vector<int32_t>> a = t.Encode("<think>   hello", AddBos::kNo, ParseSpecial::kNo);
  absl::StatusOr<std::vector<int32_t>> b = t.Encode("<think>hello", AddBos::kNo, ParseSpecial::kNo);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->front(), think);
  // lstrip eats the spaces before.
  absl::StatusOr<std::vector<int32_t>> c = t.Encode("hello   [MASK]", AddBos::kNo, ParseSpecial::kYes);
  absl::StatusOr<std::vector<int32_t>> d = t.Encode("hello[MASK]", AddBos::kNo, ParseSpecial::kYes);
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(*c, *d);
  EXPECT_EQ(c->back(), mask);
}

TEST(HfTokenizerTest, NfcNormalizerComposesBeforeEncoding) {
  absl::StatusOr<Vocab> v = Edited([](json& j) { j["normalizer"] = {{"type", "NFC"}}; });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->normalizer, "NFC");
  const Tokenizer t = MakeTokenizer(*v);
  absl::StatusOr<std::vector<int32_t>> decomposed = t.Encode("e\u0301", AddBos::kNo, ParseSpecial::kYes);
  absl::StatusOr<std::vector<int32_t>> composed = t.Encode("\u00e9", AddBos::kNo, ParseSpecial::kYes);
  ASSERT_TRUE(decomposed.ok() && composed.ok());
  EXPECT_EQ(*decomposed, *composed);
  // Without the normalizer the two differ (3 bytes vs 2).
  absl::StatusOr<Vocab> plain = ParseHfTokenizerJson(MakeByteLevelTokenizerJson(), "t");
  const Tokenizer u = MakeTokenizer(*plain);
  EXPECT_NE(*u.Encode("e\u0301", AddBos::kNo, ParseSpecial::kYes),
            *u.Encode("\u00e9", AddBos::kNo, ParseSpecial::kYes));
}

TEST(HfTokenizerTest, ConfigAndGenerationConfig) {
  absl::StatusOr<Vocab> v = ParseHfTokenizerJson(MakeByteLevelTokenizerJson(), "tokenizer.json");
  ASSERT_TRUE(v.ok());
  const int32_t eot = v->size() - 1, end = v->size() - 2, begin = v->size() - 3;
  ASSERT_TRUE(ApplyHfTokenizerConfig(
                  R"({"bos_token": {"content": "<|begin_of_text|>"}, "eos_token": "<|eot_id|>",
                      "add_bos_token": false,
                      "chat_template": [{"name": "default", "template": "{{ x }}"},
                                        {"name": "tool_use", "template": "{{ y }}"}]})",
                  "tokenizer_config.json", &*v)
                  .ok());
  EXPECT_EQ(v->bos_id, begin);
  EXPECT_EQ(v->eos_id, eot);
  EXPECT_FALSE(v->add_bos);
  EXPECT_EQ(v->chat_template, "{{ x }}");
  ASSERT_EQ(v->named_chat_templates.size(), 1u);
  EXPECT_EQ(v->named_chat_templates[0].first, "tool_use");
  ASSERT_TRUE(ApplyHfGenerationConfig(absl::StrCat(R"({"eos_token_id": [)", end, ", ", eot, "]}"),
                                      "generation_config.json", &*v)
                  .ok());
  EXPECT_EQ(v->eog_ids, (std::vector<int32_t>{end, eot}));
  ASSERT_TRUE(ApplyHfGenerationConfig(absl::StrCat(R"({"eos_token_id": )", begin, "}"),
                                      "generation_config.json", &*v)
                  .ok());
  EXPECT_EQ(v->eog_ids, (std::vector<int32_t>{begin, end, eot}));
  absl::Status bad = ApplyHfGenerationConfig(R"({"eos_token_id": [999999]})", "/m/generation_config.json", &*v);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("/m/generation_config.json: key 'eos_token_id'"));
  bad = ApplyHfTokenizerConfig(R"({"eos_token": "<nope>"})", "/m/tokenizer_config.json", &*v);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("key 'eos_token'"));
}

struct Refusal {
  const char* name;
  std::function<void(json&)> edit;
  absl::StatusCode code;
  std::string part;
  bool sentencepiece = false;  // edits MakeSentencePieceTokenizerJson() instead
};

class HfTokenizerRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(HfTokenizerRefusalTest, NamesTheFileAndKey) {
  absl::StatusOr<Vocab> v = GetParam().sentencepiece ? EditedSentencePiece(GetParam().edit)
                                                     : Edited(GetParam().edit);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), GetParam().code) << v.status();
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("/m/tokenizer.json"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr(GetParam().part));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HfTokenizerRefusalTest,
    ::testing::Values(
        Refusal{"Unigram", [](json& j) { j["model"]["type"] = "Unigram"; },
                absl::StatusCode::kUnimplemented, "key 'model.type'"},
        Refusal{"ByteFallback", [](json& j) { j["model"]["byte_fallback"] = true; },
                absl::StatusCode::kUnimplemented, "model.byte_fallback"},
        Refusal{"UnknownSplit",
                [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; },
                absl::StatusCode::kUnimplemented, "Split expression"},
        Refusal{"NfkcNormalizer", [](json& j) { j["normalizer"] = {{"type", "NFKC"}}; },
                absl::StatusCode::kUnimplemented, "key 'normalizer'"},
        Refusal{"MergeOfUnknownPiece", [](json& j) { j["model"]["merges"].push_back("zz qq"); },
                absl::StatusCode::kInvalidArgument, "not in model.vocab"},
        Refusal{"GapInIds", [](json& j) { j["added_tokens"][0]["id"] = 100000; },
                absl::StatusCode::kInvalidArgument, "key 'added_tokens[0]'"},
        Refusal{"DuplicateId", [](json& j) { j["model"]["vocab"]["!"] = 1; },
                absl::StatusCode::kInvalidArgument, "given twice"},
        Refusal{"NoVocab", [](json& j) { j["model"].erase("vocab"); },
                absl::StatusCode::kInvalidArgument, "key 'model.vocab'"},
        Refusal{"WordPieceDecoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; },
                absl::StatusCode::kUnimplemented, "key 'decoder'"},
        Refusal{"BadPostProcessorToken",
                [](json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<x>"; },
                absl::StatusCode::kInvalidArgument, "post_processor.single"},
        Refusal{"TypeConfusion", [](json& j) { j["model"]["vocab"] = 5; },
                absl::StatusCode::kInvalidArgument, "key 'model.vocab'"},
        // SentencePiece style.
        // Metaspace: with a normalizer, another replacement, an unknown scheme or key,
        // add_prefix_space against prepend_scheme, inside a Sequence, a Metaspace decoder.
        Refusal{"SpmMetaspaceWithNormalizer",
                [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}}; },
                absl::StatusCode::kUnimplemented, "key 'normalizer'", true},
        Refusal{"SpmMetaspaceReplacement",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
                },
                absl::StatusCode::kUnimplemented, "Metaspace replacement", true},
        Refusal{"SpmMetaspaceScheme",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                                        {"prepend_scheme", "sometimes"}};
                },
                absl::StatusCode::kInvalidArgument, "prepend_scheme must be", true},
        Refusal{"SpmMetaspaceAddPrefixSpaceDisagrees",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                                        {"add_prefix_space", false}, {"prepend_scheme", "first"}};
                },
                absl::StatusCode::kInvalidArgument, "add_prefix_space false does not match", true},
        Refusal{"SpmMetaspaceUnknownKey",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                                        {"legacy", false}};
                },
                absl::StatusCode::kUnimplemented, "Metaspace key 'legacy'", true},
        Refusal{"SpmMetaspaceSplitNotBool",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                                        {"split", "no"}};
                },
                absl::StatusCode::kInvalidArgument, "split is not true or false", true},
        Refusal{"SpmMetaspaceInSequence",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Sequence"},
                                        {"pretokenizers",
                                         {{{"type", "Metaspace"}, {"replacement", "\u2581"}}}}};
                },
                absl::StatusCode::kUnimplemented, "or a Metaspace pre-tokenizer", true},
        Refusal{"SpmMetaspaceDecoderReplacement",
                [](json& j) {
                  j["normalizer"] = nullptr;
                  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
                  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "_"}};
                },
                absl::StatusCode::kUnimplemented, "key 'decoder': ", true},
        Refusal{"SpmLowercase",
                [](json& j) { j["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}}); },
                absl::StatusCode::kUnimplemented, "key 'normalizer'", true},
        Refusal{"SpmPreTokenizer",
                [](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; },
                absl::StatusCode::kUnimplemented, "key 'pre_tokenizer'", true},
        Refusal{"SpmDecoder",
                [](json& j) { j["decoder"]["decoders"].erase(1); },
                absl::StatusCode::kUnimplemented, "key 'decoder'", true},
        Refusal{"SpmNoUnk", [](json& j) { j["model"]["unk_token"] = nullptr; },
                absl::StatusCode::kInvalidArgument, "key 'model.unk_token'", true},
        Refusal{"SpmIgnoreMerges", [](json& j) { j["model"]["ignore_merges"] = true; },
                absl::StatusCode::kUnimplemented, "key 'model.ignore_merges'", true},
        Refusal{"SpmFuseUnkWithoutByteFallback",
                [](json& j) { j["model"]["byte_fallback"] = false; },
                absl::StatusCode::kUnimplemented, "key 'model.fuse_unk'", true},
        Refusal{"SpmMissingBytePiece",
                [](json& j) {
                  j["model"]["vocab"]["<0x4G>"] = j["model"]["vocab"]["<0x41>"];
                  j["model"]["vocab"].erase("<0x41>");
                },
                absl::StatusCode::kInvalidArgument, "255 of the 256 pieces", true}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.name; });

TEST(HfTokenizerTest, FolderWithoutBosOrEosTokenTakesGenerationConfigs) {
  const std::string dir = ::testing::TempDir() + "/hf_tokenizer_no_bos";
  RandomHfOptions o;
  absl::StatusOr<Vocab> plain = ParseHfTokenizerJson(MakeByteLevelTokenizerJson(), "t");
  ASSERT_TRUE(plain.ok());
  // No post-processor BOS, no bos_token/eos_token: as Qwen's folders are.
  json j = json::parse(MakeByteLevelTokenizerJson());
  j["post_processor"] = nullptr;
  o.tokenizer_json = j.dump();
  o.bos_token = o.eos_token = "";
  o.eos_token_ids = {plain->size() - 1, plain->size() - 2};
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, dir).ok());
  absl::StatusOr<Vocab> v = LoadHfVocab(dir);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->eos_id, plain->size() - 2);  // the lowest listed id
  EXPECT_EQ(v->bos_id, v->eos_id);
  EXPECT_FALSE(v->add_bos);
  EXPECT_EQ(v->eog_ids, (std::vector<int32_t>{plain->size() - 2, plain->size() - 1}));
  // Neither an eos_token nor a generation_config: refused.
  o.eos_token_ids.clear();
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, dir).ok());
  v = LoadHfVocab(dir);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("no end-of-sequence token"));
}

// The fuzz target's seed tokenizer.json files are accepted, so that the fuzzer starts
// inside both engines' paths.
TEST(HfTokenizerTest, FuzzSeedsAreAccepted) {
  const std::string dir = std::string(FOLIO_MODEL_SOURCE_DIR) + "/hf_tokenizer_fuzz_corpus";
  int kinds[2] = {0, 0};
  for (const char* name : {"tiny_tokenizer.json", "gpt2_pairs_tokenizer.json", "spm_tokenizer.json",
                           "metaspace_tokenizer.json"}) {
    absl::StatusOr<std::string> text = ReadTextFile(dir + "/" + name, 1 << 20);
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<Vocab> v = ParseHfTokenizerJson(*text, name);
    ASSERT_TRUE(v.ok()) << v.status();
    ++kinds[static_cast<int>(v->kind)];
    MakeTokenizer(*v);
    if (std::string(name) == "metaspace_tokenizer.json") {
      EXPECT_EQ(v->pre_tokenizer, "metaspace-first");
    }
  }
  EXPECT_EQ(kinds[static_cast<int>(TokenizerKind::kSentencePiece)], 2);
  EXPECT_EQ(kinds[static_cast<int>(TokenizerKind::kByteLevelBpe)], 2);
}

TEST(HfTokenizerTest, PadVocab) {
  absl::StatusOr<Vocab> v = ParseHfTokenizerJson(MakeByteLevelTokenizerJson(), "t");
  ASSERT_TRUE(v.ok());
  const int32_t n = v->size();
  ASSERT_TRUE(PadVocab(n + 5, "t", &*v).ok());
  EXPECT_EQ(v->size(), n + 5);
  EXPECT_EQ(v->types.back(), TokenType::kUnused);
  v->eos_id = n - 1;
  EXPECT_TRUE(Tokenizer::Create(*v).ok());
  EXPECT_FALSE(PadVocab(n, "t", &*v).ok());
}

}  // namespace
}  // namespace folio::worker
