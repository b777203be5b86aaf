// Loading each architecture's GGUF form (folio-make-model's random models): the config
// and optional tensors per architecture, and the refusals naming file and key/tensor.
#include "services/worker/model/architecture.h"

#include <cmath>
#include <string>

#include <gmock/gmock.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#include "services/worker/model/dequant.h"
#include "services/worker/model/gguf_model.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/model_test_util.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

RandomModelOptions Small(const std::string& arch) {
  RandomModelOptions o;
  o.architecture = arch;
  o.dim = 64;
  o.hidden_dim = 96;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 300;
  return o;
}

std::string Write(const RandomModelOptions& o, const std::string& file) {
  const std::string path = testing::MakeTempDir("architecture_test") + "/" + file;
  absl::Status s = WriteRandomModel(o, path);
  CHECK(s.ok()) << s;
  return path;
}

// The file with every occurrence of `from` replaced by `to` (same length).
std::string Patched(const std::string& path, const std::string& from, const std::string& to) {
  CHECK_EQ(from.size(), to.size());
  std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  std::string s(bytes.begin(), bytes.end());
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + 1)) {
    s.replace(at, from.size(), to);
  }
  const std::string out = path + ".patched.gguf";
  testing::WriteFileBytes(out, s.data(), s.size());
  return out;
}

TEST(ArchitectureTest, TableNamesTheSupportedArchitectures) {
  EXPECT_EQ(FindArchitecture("qwen2")->rope_style, RopeStyle::kNeox);
  EXPECT_EQ(FindArchitecture("llama")->rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(FindArchitecture("gpt2"), nullptr);
  EXPECT_EQ(SupportedArchitectures(),
            "'llama', 'qwen2', 'qwen3', 'qwen3moe', 'gemma2', 'gemma3', 'phi3'");
}

TEST(ArchitectureTest, Llama3FormLoads) {
  RandomModelOptions o = Small("llama");
  o.rope_theta = 500000.0f;
  o.rope_freqs = true;
  o.tied_embeddings = true;
  o.head_dim = 32;  // attention.key_length != dim / heads (Mistral-Nemo style)
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(o, "llama3.gguf"));
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(c.rope_freq_factors);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(w->rope_freqs.shape, std::vector<int64_t>({16}));
  EXPECT_EQ(w->layers[0].wq.shape, std::vector<int64_t>({128, 64}));
  EXPECT_EQ(w->layers[1].wo.shape, std::vector<int64_t>({64, 128}));
}

TEST(ArchitectureTest, LinearRopeScalingIsReadAsAFrequencyScale) {
  RandomModelOptions o = Small("llama");
  o.rope_scaling_factor = 4.0f;
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(o, "linear.gguf"));
  EXPECT_EQ(w->config.rope_freq_scale, 0.25f);
}

TEST(ArchitectureTest, Qwen2HasBiasesAndNeoxRope) {
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(Small("qwen2"), "qwen2.gguf"));
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(w->layers[1].bq.shape, std::vector<int64_t>({64}));
  EXPECT_EQ(w->layers[1].bk.shape, std::vector<int64_t>({32}));
  EXPECT_NE(w->layers[1].bv.data, nullptr);
}

TEST(ArchitectureTest, Qwen3HasQkNorms) {
  RandomModelOptions o = Small("qwen3");
  o.head_dim = 32;  // Qwen3: head_dim 128 over dim 1024 / 16 heads
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(o, "qwen3.gguf"));
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(w->layers[0].q_norm.shape, std::vector<int64_t>({32}));
  EXPECT_EQ(w->layers[0].k_norm.shape, std::vector<int64_t>({32}));
}

TEST(ArchitectureTest, Gemma2ReadsItsDefaultsAsLlamaCppDoes) {
  RandomModelOptions o = Small("gemma2");
  o.num_layers = 4;
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(o, "gemma2.gguf"));
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_TRUE(c.gelu_mlp);
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f);   // the keys absent: llama.cpp's defaults
  EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.local_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 4.0f);  // 1 / sqrt(head_dim 16)
  EXPECT_FLOAT_EQ(c.rope_theta_local, c.rope_theta);
  EXPECT_EQ(w->layers[3].post_ffn_norm.shape, std::vector<int64_t>({64}));
}

TEST(ArchitectureTest, Gemma3HasFiveLocalLayersToOneGlobalWhenItHasAWindow) {
  RandomModelOptions o = Small("gemma3");
  o.num_layers = 7;
  o.sliding_window = 16;
  o.rope_theta = 1000000.0f;
  o.rope_scaling_factor = 8.0f;
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(o, "gemma3.gguf"));
  const ModelConfig& c = w->config;
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FLOAT_EQ(c.attn_softcap, 0.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 0.0f);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.local_layers,
            (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_FLOAT_EQ(c.rope_theta_local, 10000.0f);  // not rope.freq_base
  EXPECT_FLOAT_EQ(c.rope_freq_scale_local, 1.0f);  // local layers are never scaled
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f / 8.0f);
  // Without a window, every layer is global.
  o.sliding_window = 0;
  w = *LoadModel(Write(o, "gemma3-global.gguf"));
  EXPECT_FALSE(w->config.is_local(0));
  // A missing post-norm is named.
  o.sliding_window = 16;
  absl::StatusOr<std::unique_ptr<ModelWeights>> bad = LoadModel(
      Patched(Write(o, "gemma3-bad.gguf"), "blk.2.post_ffw_norm", "blk.2.post_ffX_norm"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("blk.2.post_ffw_norm.weight"));
}

TEST(ArchitectureTest, Phi3SlicesItsFusedProjectionsAndPicksItsRopeFactors) {
  RandomModelOptions o = Small("phi3");
  o.context_length = 512;
  std::unique_ptr<ModelWeights> w = *LoadModel(Write(o, "phi3.gguf"));
  const ModelConfig& c = w->config;
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_FALSE(c.rope_freq_factors);
  const LayerWeights& l = w->layers[0];
  // Q, K and V are consecutive rows of attn_qkv; gate and up the halves of ffn_up.
  EXPECT_EQ(l.wq.shape, std::vector<int64_t>({64, 64}));
  EXPECT_EQ(l.wk.shape, std::vector<int64_t>({32, 64}));
  EXPECT_EQ(static_cast<const char*>(l.wk.data) - static_cast<const char*>(l.wq.data),
            64 * 64 * 4);
  EXPECT_EQ(static_cast<const char*>(l.wv.data) - static_cast<const char*>(l.wk.data),
            32 * 64 * 4);
  EXPECT_EQ(l.w_gate.shape, std::vector<int64_t>({96, 64}));
  EXPECT_EQ(static_cast<const char*>(l.w_up.data) - static_cast<const char*>(l.w_gate.data),
            96 * 64 * 4);
  // LongRoPE: a model serving past its original context takes the long factors.
  o.longrope_original_context = 128;
  w = *LoadModel(Write(o, "phi35.gguf"));
  ASSERT_TRUE(w->config.rope_freq_factors);
  std::vector<float> factors = ToF32(w->rope_freqs);
  EXPECT_FLOAT_EQ(factors.back(), 30.0f);  // the generator's long factors end at 30
  const double attn_factor = std::sqrt(1 + std::log(4.0) / std::log(128.0));
  EXPECT_NEAR(w->config.attention_scale, attn_factor * attn_factor / 4.0, 1e-6);
  // ... and one within it the short ones.
  o.longrope_original_context = 512;
  w = *LoadModel(Write(o, "phi3-short.gguf"));
  factors = ToF32(w->rope_freqs);
  EXPECT_FLOAT_EQ(factors.back(), 1.5f);
}

TEST(ArchitectureTest, UnknownArchitectureIsRefusedNamingTheSupportedOnes) {
  const std::string path = Patched(Write(Small("qwen2"), "gpt2.gguf"), "qwen2", "gpt_2");
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(w.status().message(), HasSubstr(path));
  EXPECT_THAT(w.status().message(), HasSubstr("architecture 'gpt_2' (key 'general.architecture') is not supported"));
  EXPECT_THAT(w.status().message(),
              HasSubstr("'llama', 'qwen2', 'qwen3', 'qwen3moe', 'gemma2', 'gemma3', 'phi3'"));
}

TEST(ArchitectureTest, MissingRequiredTensorNamesIt) {
  // A qwen3 file relabelled qwen2: qwen2 needs biases it does not have.
  const std::string path = Patched(Write(Small("qwen3"), "q3.gguf"), "qwen3", "qwen2");
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr(path));
  EXPECT_THAT(w.status().message(), HasSubstr("missing tensor 'blk.0.attn_q.bias'"));
}

TEST(ArchitectureTest, TensorTheArchitectureCannotUseIsRefused) {
  // A qwen2 file relabelled qwen3: qwen3 has no Q/K/V biases.
  const std::string path = Patched(Write(Small("qwen2"), "q2.gguf"), "qwen2", "qwen3");
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(w.status().message(), HasSubstr("tensor 'blk.0.attn_q.bias'"));
  EXPECT_THAT(w.status().message(), HasSubstr("not used by architecture 'qwen3'"));
}

TEST(ArchitectureTest, ShapeThatDisagreesWithKeyLengthNamesTheTensor) {
  RandomModelOptions o = Small("qwen3");
  o.head_dim = 32;
  const std::string path = Write(o, "q3kl.gguf");
  // key_length 32 -> 16 (as uint32 LE: 0x20 -> 0x10) makes every Q/K/V shape wrong; the
  // patch hits the value after the key's name.
  std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  const std::string key = "qwen3.attention.key_length";
  std::string s(bytes.begin(), bytes.end());
  const size_t at = s.find(key);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(s[at + key.size() + 4], 0x20);  // after the u32 value type
  s[at + key.size() + 4] = 0x10;
  const std::string value_key = "qwen3.attention.value_length";
  const size_t vat = s.find(value_key);
  s[vat + value_key.size() + 4] = 0x10;
  s.replace(s.find("qwen3.rope.dimension_count") + 26 + 4, 1, 1, 0x10);
  testing::WriteFileBytes(path, s.data(), s.size());
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("tensor 'blk.0.attn_q.weight' has shape [128, 64]"));
  EXPECT_THAT(w.status().message(), HasSubstr("expected [64, 64]"));
}

}  // namespace
}  // namespace folio::worker
