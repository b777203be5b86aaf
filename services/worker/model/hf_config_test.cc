#include "services/worker/model/hf_config.h"

#include <cmath>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"

namespace folio::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// meta-llama/Llama-3.1-8B-Instruct's config.json.
constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// Qwen/Qwen3-0.6B's config.json.
constexpr char kQwen3[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

// mistralai/Mistral-7B-v0.1's config.json.
constexpr char kMistral01[] = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

// Qwen/Qwen2.5-0.5B-Instruct's config.json.
constexpr char kQwen25[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

// Qwen/Qwen3-30B-A3B's config.json.
constexpr char kQwen3Moe[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

TEST(HfConfigTest, Qwen3MoeExpertsAndWhatIsRefused) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kQwen3Moe, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  const ModelConfig& c = hf->config;
  EXPECT_EQ(c.architecture, "qwen3moe");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_used, 8);
  EXPECT_EQ(c.expert_hidden_dim, 768);
  EXPECT_TRUE(c.expert_weights_norm);
  hf = ParseHfConfig(absl::StrReplaceAll(kQwen3Moe, {{"\"norm_topk_prob\": true",
                                                      "\"norm_topk_prob\": false"}}),
                     "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FALSE(hf->config.expert_weights_norm);
  hf = ParseHfConfig(absl::StrReplaceAll(kQwen3Moe, {{"\"decoder_sparse_step\": 1",
                                                      "\"decoder_sparse_step\": 2"}}),
                     "config.json");
  EXPECT_THAT(hf.status().message(), HasSubstr("decoder_sparse_step"));
  hf = ParseHfConfig(absl::StrReplaceAll(kQwen3Moe, {{"\"mlp_only_layers\": []",
                                                      "\"mlp_only_layers\": [0]"}}),
                     "config.json");
  EXPECT_THAT(hf.status().message(), HasSubstr("mlp_only_layers"));
  hf = ParseHfConfig(absl::StrReplaceAll(kQwen3Moe, {{"\"num_experts_per_tok\": 8",
                                                      "\"num_experts_per_tok\": 129"}}),
                     "config.json");
  EXPECT_THAT(hf.status().message(), HasSubstr("num_experts_per_tok"));
}

// microsoft/Phi-3.5-mini-instruct's config.json, its 48 factors per list shortened to the
// test's head_dim / 2 = 2 (hidden 128 over 32 heads).
constexpr char kPhi35[] = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "bos_token_id": 1,
  "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 128,
  "intermediate_size": 8192, "max_position_embeddings": 131072,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
  "rope_scaling": {"long_factor": [1.08, 64.5], "short_factor": [1.0, 1.35],
                   "type": "longrope"},
  "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 32064})";

TEST(HfConfigTest, Phi35LongRopeTakesTheLongFactorsAndTheirAttentionFactor) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kPhi35, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.architecture, "phi3");
  EXPECT_EQ(hf->rope_freqs, (std::vector<float>{1.08f, 64.5f}));
  EXPECT_TRUE(hf->config.rope_freq_factors);
  const double af = std::sqrt(1 + std::log(32.0) / std::log(4096.0));  // 131072 / 4096
  EXPECT_NEAR(hf->config.attention_scale, af * af / 2.0, 1e-6);  // head_dim 4
  // A wrong number of factors is named.
  hf = ParseHfConfig(absl::StrReplaceAll(kPhi35, {{"[1.08, 64.5]", "[1.08]"}}), "config.json");
  EXPECT_THAT(hf.status().message(), HasSubstr("long_factor"));
}

// google/gemma-3-1b-it's config.json as transformers >= 4.57 saves it: RoPE per layer kind,
// layer_types (shortened to the test's 7 layers), no top-level rope_theta.
constexpr char kGemma3New[] = R"({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false,
  "attn_logit_softcapping": null, "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "sliding_attention", "full_attention",
                  "sliding_attention"],
  "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 7,
  "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
  "sliding_window": 512, "torch_dtype": "bfloat16", "vocab_size": 262144})";

TEST(HfConfigTest, Gemma3RopePerLayerKindAndLayerTypes) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kGemma3New, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  const ModelConfig& c = hf->config;
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_FLOAT_EQ(c.rope_theta, 1000000.0f);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f / 8.0f);
  EXPECT_FLOAT_EQ(c.rope_theta_local, 10000.0f);
  EXPECT_FLOAT_EQ(c.rope_freq_scale_local, 1.0f);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.local_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_FLOAT_EQ(c.norm_offset, 1.0f);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 16.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 0.0f);
  EXPECT_TRUE(c.tied_embeddings);
  // Scaled sliding layers are refused by name.
  hf = ParseHfConfig(absl::StrReplaceAll(kGemma3New, {{"\"rope_type\": \"default\"",
                                                       "\"rope_type\": \"linear\""}}),
                     "config.json");
  EXPECT_THAT(hf.status().message(), HasSubstr("sliding_attention.rope_type"));
}

TEST(HfConfigTest, Llama31) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kLlama31, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  const ModelConfig& c = hf->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.hidden_dim, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(hf->torch_dtype, DType::kBF16);
  // Hugging Face Q/K rows are unpermuted: rotate_half pairs (i, i + d/2), NEOX.
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.rope_freq_factors);
  ASSERT_EQ(hf->rope_freqs.size(), 64u);
  // The converter's factors (numpy float32 run of its formula): 29 ones, 29 eights, and
  // these six between.
  const double between[] = {1.2074839660893077, 1.5534145675928248, 2.0263131368975973,
                            2.694530009284027,  3.684253000084566,  5.257326787751527};
  for (int i = 0; i < 29; ++i) EXPECT_EQ(hf->rope_freqs[i], 1.0f) << i;
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(hf->rope_freqs[29 + i], between[i], 1e-5) << i;
  for (int i = 35; i < 64; ++i) EXPECT_EQ(hf->rope_freqs[i], 8.0f) << i;
}

TEST(HfConfigTest, Qwen3HeadDimTiedAndNoWindow) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kQwen3, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  const ModelConfig& c = hf->config;
  EXPECT_EQ(c.architecture, "qwen3");
  EXPECT_EQ(c.head_dim, 128);  // not 1024 / 16
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.max_seq_len, 40960);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_FALSE(c.rope_freq_factors);
}

TEST(HfConfigTest, MistralSlidingWindowCapsTheContext) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kMistral01, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.architecture, "llama");
  EXPECT_EQ(hf->config.max_seq_len, 4096) << "the window is honoured, not ignored";
  // Mistral v0.2+: sliding_window null, the full context.
  hf = ParseHfConfig(absl::StrReplaceAll(kMistral01, {{"\"sliding_window\": 4096", "\"sliding_window\": null"}}),
                     "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.max_seq_len, 32768);
}

TEST(HfConfigTest, QwenSlidingWindowOnlyWhenEnabled) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(kQwen25, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.architecture, "qwen2");
  EXPECT_EQ(hf->config.head_dim, 64);
  EXPECT_EQ(hf->config.max_seq_len, 32768);
  const std::string on = absl::StrReplaceAll(
      kQwen25, {{"\"use_sliding_window\": false", "\"use_sliding_window\": true"},
                {"\"sliding_window\": 32768", "\"sliding_window\": 4096"}});
  hf = ParseHfConfig(on, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.max_seq_len, 4096);
  // Enabled, but max_window_layers covers every layer: no layer slides.
  hf = ParseHfConfig(absl::StrReplaceAll(on, {{"\"max_window_layers\": 21", "\"max_window_layers\": 24"}}),
                     "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.max_seq_len, 32768);
}

TEST(HfConfigTest, LinearRopeScaling) {
  const std::string linear = absl::StrReplaceAll(
      kQwen3, {{"\"rope_scaling\": null", R"("rope_scaling": {"type": "linear", "factor": 4.0})"}});
  absl::StatusOr<HfConfig> hf = ParseHfConfig(linear, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FLOAT_EQ(hf->config.rope_freq_scale, 0.25f);
  EXPECT_FALSE(hf->config.rope_freq_factors);
}

// transformers >= 4.56: rope_parameters, with rope_theta inside, reads as rope_scaling.
TEST(HfConfigTest, RopeParametersIsRopeScalingsNewerName) {
  std::string llama3 = absl::StrReplaceAll(
      kQwen3, {{"\"rope_scaling\": null", R"("rope_parameters": {"rope_type": "llama3",
          "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192})"},
               {"\"rope_theta\": 1000000,", ""}});
  absl::StatusOr<HfConfig> hf = ParseHfConfig(llama3, "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FLOAT_EQ(hf->config.rope_theta, 500000.0f);
  EXPECT_TRUE(hf->config.rope_freq_factors);
  ASSERT_EQ(hf->rope_freqs.size(), 64u);
  EXPECT_EQ(hf->rope_freqs.back(), 8.0f);
  hf = ParseHfConfig(absl::StrReplaceAll(kQwen3, {{"\"rope_scaling\": null",
                                                   R"("rope_parameters": {"rope_type": "linear",
                                                      "factor": 2.0})"}}),
                     "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_FLOAT_EQ(hf->config.rope_freq_scale, 0.5f);
  EXPECT_FLOAT_EQ(hf->config.rope_theta, 1000000.0f);  // the top-level one
}

TEST(HfConfigTest, TorchDtypeAndItsNewerName) {
  absl::StatusOr<HfConfig> hf = ParseHfConfig(
      absl::StrReplaceAll(kQwen3, {{"\"torch_dtype\": \"bfloat16\"", "\"dtype\": \"float16\""}}),
      "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->torch_dtype, DType::kF16);
}

struct Refusal {
  const char* name;
  std::string json;
  absl::StatusCode code;
  std::vector<std::string> parts;
};

class HfConfigRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(HfConfigRefusalTest, NamesTheFileAndTheKey) {
  const Refusal& r = GetParam();
  absl::StatusOr<HfConfig> hf = ParseHfConfig(r.json, "/m/config.json");
  ASSERT_FALSE(hf.ok());
  EXPECT_EQ(hf.status().code(), r.code) << hf.status();
  EXPECT_THAT(std::string(hf.status().message()), HasSubstr("/m/config.json"));
  for (const std::string& p : r.parts) EXPECT_THAT(std::string(hf.status().message()), HasSubstr(p));
}

std::string Qwen3With(const std::string& from, const std::string& to) {
  return absl::StrReplaceAll(kQwen3, {{from, to}});
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HfConfigRefusalTest,
    ::testing::Values(
        Refusal{"UnknownArchitecture", Qwen3With("Qwen3ForCausalLM", "GemmaForCausalLM"),
                absl::StatusCode::kUnimplemented,
                {"key 'architectures'", "'GemmaForCausalLM'", "LlamaForCausalLM"}},
        Refusal{"Yarn",
                Qwen3With("\"rope_scaling\": null",
                          R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})"),
                absl::StatusCode::kUnimplemented, {"key 'rope_scaling.rope_type'", "'yarn'"}},
        Refusal{"Dynamic",
                Qwen3With("\"rope_scaling\": null",
                          R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"),
                absl::StatusCode::kUnimplemented, {"key 'rope_scaling.type'", "'dynamic'"}},
        Refusal{"RopeParametersYarn",
                Qwen3With("\"rope_scaling\": null",
                          R"("rope_parameters": {"rope_type": "yarn", "factor": 4.0})"),
                absl::StatusCode::kUnimplemented, {"key 'rope_parameters.rope_type'", "'yarn'"}},
        Refusal{"RopeParametersThetaDisagrees",
                Qwen3With("\"rope_scaling\": null",
                          R"("rope_parameters": {"rope_type": "default", "rope_theta": 10000.0})"),
                absl::StatusCode::kInvalidArgument, {"key 'rope_parameters.rope_theta'"}},
        Refusal{"RopeParametersAndScalingDisagree",
                Qwen3With("\"rope_scaling\": null",
                          R"("rope_parameters": {"rope_type": "linear", "factor": 2.0},
                             "rope_scaling": {"rope_type": "llama3", "factor": 8.0})"),
                absl::StatusCode::kInvalidArgument, {"key 'rope_parameters.rope_type'", "differs"}},
        Refusal{"LinearWithoutFactor",
                Qwen3With("\"rope_scaling\": null", R"("rope_scaling": {"rope_type": "linear"})"),
                absl::StatusCode::kInvalidArgument, {"key 'rope_scaling.factor'"}},
        Refusal{"Float8", Qwen3With("\"bfloat16\"", "\"float8_e4m3fn\""),
                absl::StatusCode::kUnimplemented, {"key 'torch_dtype'", "float8_e4m3fn"}},
        Refusal{"MissingHiddenSize", Qwen3With("\"hidden_size\": 1024,", ""),
                absl::StatusCode::kInvalidArgument, {"key 'hidden_size'", "missing"}},
        Refusal{"StringLayers", Qwen3With("\"num_hidden_layers\": 28", "\"num_hidden_layers\": \"28\""),
                absl::StatusCode::kInvalidArgument, {"key 'num_hidden_layers'", "not an integer"}},
        Refusal{"KvHeadsDoNotDivide", Qwen3With("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 6"),
                absl::StatusCode::kInvalidArgument, {"key 'num_key_value_heads'"}},
        Refusal{"Gelu", Qwen3With("\"silu\"", "\"gelu\""), absl::StatusCode::kUnimplemented,
                {"key 'hidden_act'"}},
        Refusal{"AttentionBias", Qwen3With("\"attention_bias\": false", "\"attention_bias\": true"),
                absl::StatusCode::kUnimplemented, {"key 'attention_bias'"}},
        Refusal{"NegativeWindow", Qwen3With("\"sliding_window\": null", "\"sliding_window\": -1"),
                absl::StatusCode::kInvalidArgument, {"key 'sliding_window'"}},
        Refusal{"NotJson", "{", absl::StatusCode::kInvalidArgument, {"not valid JSON"}},
        Refusal{"TwoArchitectures",
                Qwen3With("[\"Qwen3ForCausalLM\"]", "[\"Qwen3ForCausalLM\", \"X\"]"),
                absl::StatusCode::kInvalidArgument, {"key 'architectures'"}}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.name; });

}  // namespace
}  // namespace folio::worker
