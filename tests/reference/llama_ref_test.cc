// The reference itself: llama.cpp through folio_llama_ref reproduces
// llama.cpp's own tokenizer vectors, decodes a real model, and quantizes it.
#include "tests/reference/llama_ref.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/test_models_dir.h"

namespace folio::reference {
namespace {

// llama.cpp's vectors: inputs separated by "\n__ggml_vocab_test__\n", one line
// of ids each.
TEST(LlamaRefTest, ReproducesLlamaCppTokenizerVectors) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2"}) {
    const std::string base = LlamaCppSourceDir() + "/models/ggml-vocab-" + name + ".gguf";
    absl::StatusOr<std::unique_ptr<LlamaModel>> m =
        LlamaModel::Load(base, LlamaModelOptions{.vocab_only = true});
    ASSERT_TRUE(m.ok()) << m.status();
    std::vector<std::string> inputs =
        absl::StrSplit(ReadFileOrEmpty(base + ".inp"), "\n__ggml_vocab_test__\n");
    std::vector<std::string> outputs = absl::StrSplit(ReadFileOrEmpty(base + ".out"), '\n');
    ASSERT_GE(inputs.size(), 30u) << name;
    ASSERT_GE(outputs.size(), inputs.size()) << name;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<int32_t> want;
      for (absl::string_view t : absl::StrSplit(outputs[i], ' ', absl::SkipEmpty())) {
        int32_t id = 0;
        ASSERT_TRUE(absl::SimpleAtoi(t, &id)) << t;
        want.push_back(id);
      }
      absl::StatusOr<std::vector<int32_t>> got =
          (*m)->Tokenize(inputs[i], TokenizeOptions{.add_special = false, .parse_special = false});
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, want) << name << " vector " << i << ": '" << inputs[i] << "'";
    }
  }
}

// stories260K (embedded in the repository) through llama.cpp: its greedy text
// from BOS is the golden text, and llama.cpp's own Q8_0 quantization of it
// stays close in logits.
TEST(LlamaRefTest, DecodesAndQuantizesARealModel) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::string model = std::string(FOLIO_SOURCE_DIR) + "/models/stories260K/stories260K.gguf";
  absl::StatusOr<std::unique_ptr<LlamaModel>> f32 = LlamaModel::Load(model, {});
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_EQ((*f32)->n_vocab(), 512);
  ASSERT_EQ((*f32)->bos(), 1);

  // The first 20 greedy tokens from BOS, rendered, are the golden text's
  // opening.
  absl::StatusOr<std::vector<int32_t>> greedy = (*f32)->Greedy({1}, 20);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  std::string text;
  for (int32_t t : *greedy) text += (*f32)->TokenToPiece(t, {});
  const std::string golden =
      ReadFileOrEmpty(std::string(FOLIO_SOURCE_DIR) +
                      "/models/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_GE(text.size(), 20u);
  // llama2.c's run.c strips the space of the first piece after BOS.
  const std::string opening = text[0] == ' ' ? text.substr(1) : text;
  EXPECT_EQ(golden.substr(0, opening.size()), opening);
  // Decoded token by token on the KV cache: the same tokens.
  double seconds = -1;
  absl::StatusOr<std::vector<int32_t>> incremental = (*f32)->GreedyIncremental({1}, 20, &seconds);
  ASSERT_TRUE(incremental.ok()) << incremental.status();
  EXPECT_EQ(*incremental, *greedy);
  EXPECT_GT(seconds, 0.0);
  EXPECT_FALSE((*f32)->GreedyIncremental({1}, 600, nullptr).ok()) << "past n_ctx";

  const std::string q8 = testing::TempDir() + "/stories260K-q8_0.gguf";
  ASSERT_TRUE(Quantize(model, q8, "Q8_0", 2).ok());
  EXPECT_FALSE(Quantize(model, q8, "Q9_9", 2).ok());
  absl::StatusOr<std::unique_ptr<LlamaModel>> quant = LlamaModel::Load(q8, {});
  ASSERT_TRUE(quant.ok()) << quant.status();
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  auto a = (*f32)->Logits(prompt);
  auto b = (*quant)->Logits(prompt);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), prompt.size());
  float max_abs = 0, max_diff = 0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    ASSERT_EQ((*a)[p].size(), 512u);
    for (size_t v = 0; v < 512; ++v) {
      max_abs = std::max(max_abs, std::fabs((*a)[p][v]));
      max_diff = std::max(max_diff, std::fabs((*a)[p][v] - (*b)[p][v]));
    }
  }
  EXPECT_GT(max_abs, 1.0f);             // real logits, not zeros
  EXPECT_GT(max_diff, 0.0f);            // the file really was quantized
  EXPECT_LT(max_diff, 0.1f * max_abs);  // and Q8_0 stays close
  EXPECT_FALSE(LlamaModel::Load(testing::TempDir() + "/no-such.gguf", {}).ok());
}

}  // namespace
}  // namespace folio::reference
