// folio-make-model's files, judged by llama.cpp: at every vocabulary size users
// meet, llama.cpp loads the file (weights and all) and tokenizes a sample text
// exactly as Folio's tokenizer does on the same vocabulary, and its logits are
// finite and not flat.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/model/random_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

namespace ref = folio::reference;

class RandomModelReferenceTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(RandomModelReferenceTest, LlamaCppLoadsAndTokenizesLikeFolio) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  RandomModelOptions o;
  o.vocab_size = GetParam();
  o.dim = 32;
  o.hidden_dim = 64;
  o.num_layers = 1;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.context_length = 128;
  o.weight_std = 0.1f;
  const std::string path =
      ::testing::TempDir() + "/random_vocab_" + std::to_string(o.vocab_size) + ".gguf";
  ASSERT_TRUE(WriteRandomModel(o, path).ok());

  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> m =
      ref::LlamaModel::Load(path, ref::LlamaModelOptions{.n_ctx = 64});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->n_vocab(), o.vocab_size);

  absl::StatusOr<Tokenizer> folio = Tokenizer::Create(MakeRandomModelVocab(o.vocab_size));
  ASSERT_TRUE(folio.ok()) << folio.status();
  for (const char* text : {"Once upon a time, the little dog said hello to the big cat.",
                           "zebra quiz: 42 + 17 = 59! {json} \xc3\xa9t\xc3\xa9 "
                           "\xf0\x9f\xa6\x99"}) {
    absl::StatusOr<std::vector<int32_t>> want =
        (*m)->Tokenize(text, ref::TokenizeOptions{.add_special = true, .parse_special = false});
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<std::vector<int32_t>> got = folio->Encode(text, AddBos::kVocabDefault);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, *want) << "vocab " << o.vocab_size << ": " << text;
    EXPECT_GT(want->size(), 5u);
  }

  absl::StatusOr<std::vector<std::vector<float>>> logits = (*m)->Logits({1, 300, 301, 302});
  ASSERT_TRUE(logits.ok()) << logits.status();
  float lo = logits->back()[0], hi = lo;
  for (float v : logits->back()) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 0.01f);
}

// vocab_from: llama.cpp's llama-bpe vocabulary copied into a random model is the same
// vocabulary (Folio's loader and llama.cpp read it so), and llama.cpp runs the model.
TEST(RandomModelVocabFromTest, CopiesTheTokenizerKeysOfAVocabularyFile) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string vocab_file = ref::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf";
  RandomModelOptions o;
  o.vocab_from = vocab_file;
  o.vocab_size = 7;  // ignored
  o.dim = 32;
  o.hidden_dim = 64;
  o.num_layers = 1;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.context_length = 64;
  o.dtype = DType::kF16;
  o.tied_embeddings = true;
  const std::string path = ::testing::TempDir() + "/random_vocab_from.gguf";
  ASSERT_TRUE(WriteRandomModel(o, path).ok());
  absl::StatusOr<Vocab> want = LoadGgufVocab(vocab_file);
  absl::StatusOr<Vocab> got = LoadGgufVocab(path);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  EXPECT_EQ(got->pieces, want->pieces);
  EXPECT_EQ(got->types, want->types);
  EXPECT_EQ(got->merges, want->merges);
  EXPECT_EQ(got->pre_tokenizer, want->pre_tokenizer);
  EXPECT_EQ(got->bos_id, want->bos_id);
  EXPECT_EQ(got->eos_id, want->eos_id);
  EXPECT_EQ(got->eog_ids, want->eog_ids);
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> m =
      ref::LlamaModel::Load(path, ref::LlamaModelOptions{.n_ctx = 32});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->n_vocab(), 128256);
  absl::StatusOr<std::vector<std::vector<float>>> logits = (*m)->Logits({128000, 9906, 1917});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->back().size(), 128256u);


  // rename_tokens: Llama 3.0's reserved control token 5 named as Llama 3.1 names it; the
  // rest of the vocabulary as it was.
  o.rename_tokens = {{128010, "<|python_tag|>"}};
  ASSERT_TRUE(WriteRandomModel(o, path).ok());
  absl::StatusOr<Vocab> renamed = LoadGgufVocab(path);
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->pieces[128010], "<|python_tag|>");
  EXPECT_EQ(want->pieces[128010], "<|reserved_special_token_5|>");
  renamed->pieces[128010] = want->pieces[128010];
  EXPECT_EQ(renamed->pieces, want->pieces);
  EXPECT_EQ(renamed->types, want->types);
  o.rename_tokens = {{128256, "x"}};
  absl::StatusOr<std::string> outside = MakeRandomModelGguf(o);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("rename_tokens: token 128256 is outside"),
            std::string::npos) << outside.status();
  o.rename_tokens.clear();

  o.vocab_from = ::testing::TempDir() + "/no_such_vocab.gguf";
  EXPECT_FALSE(MakeRandomModelGguf(o).ok());
  o.vocab_from.clear();
  o.vocab_size = 512;
  o.rename_tokens = {{3, "x"}};
  EXPECT_FALSE(MakeRandomModelGguf(o).ok());  // rename_tokens needs vocab_from
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(VocabSizes, RandomModelReferenceTest,
                         ::testing::Values(512, 4096, 32000, 128256));

}  // namespace
}  // namespace folio::worker
