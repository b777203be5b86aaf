#include "services/worker/model/hf_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/model_test_util.h"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/random_hf_model.h"

namespace folio::worker {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void Spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

class HfModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HfModelTest, LoadsEveryArchitecture) {
  const std::string dir = testing::MakeTempDir(absl::StrCat("hf_", GetParam()));
  RandomHfOptions o;
  o.hf_class = GetParam();
  o.eos_token = "<|eot_id|>";
  o.bos_token = "<|begin_of_text|>";
  if (o.hf_class == "Qwen3ForCausalLM") o.head_dim = 32;  // not dim / heads
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, dir).ok());
  // The eos ids generation_config.json lists: <|end_of_text|> and <|eot_id|>.
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.architecture, o.hf_class == "Qwen2ForCausalLM"   ? "qwen2"
                            : o.hf_class == "Qwen3ForCausalLM" ? "qwen3"
                                                               : "llama");
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.stored_type, "BF16");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.head_dim, o.head_dim > 0 ? 32 : 16);
  EXPECT_EQ(c.qkv_bias, o.hf_class == "Qwen2ForCausalLM");
  EXPECT_EQ(c.qk_norm, o.hf_class == "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, (*w)->vocab.size());
  EXPECT_EQ((*w)->tok_embeddings.dtype, DType::kBF16);
  EXPECT_EQ((*w)->layers[1].wq.shape, (std::vector<int64_t>{c.q_dim(), c.dim}));
  EXPECT_EQ((*w)->layers[1].w_down.shape, (std::vector<int64_t>{c.dim, c.hidden_dim}));
  EXPECT_EQ((*w)->vocab.pieces[(*w)->vocab.eos_id], "<|eot_id|>");
  EXPECT_GT((*w)->file_bytes(), 0);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Classes, HfModelTest,
                         ::testing::Values("LlamaForCausalLM", "MistralForCausalLM",
                                           "Qwen2ForCausalLM", "Qwen3ForCausalLM"));

// Every view's bytes, in order.
std::vector<std::string> AllBytes(const ModelWeights& w) {
  std::vector<std::string> out;
  auto add = [&](const TensorView& t) {
    if (t.data == nullptr) return;
    out.emplace_back(static_cast<const char*>(t.data), DTypeBytes(t.dtype, t.num_elements()));
  };
  add(w.tok_embeddings);
  add(w.lm_head);
  add(w.final_norm);
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate,
                                &l.w_up, &l.w_down, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm}) {
      add(*t);
    }
  }
  return out;
}

TEST(HfModelTest, ShardedEqualsSingleAndGenerationConfigStops) {
  const std::string single = testing::MakeTempDir("hf_single");
  const std::string sharded = testing::MakeTempDir("hf_sharded");
  RandomHfOptions o;
  o.hf_class = "Qwen2ForCausalLM";
  o.dtype = DType::kF16;
  o.tied_embeddings = true;
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, single).ok());
  o.num_shards = 3;
  o.eos_token = "<|end_of_text|>";
  absl::StatusOr<Vocab> tok = ParseHfTokenizerJson(MakeByteLevelTokenizerJson(), "t");
  ASSERT_TRUE(tok.ok());
  o.eos_token_ids = {tok->size() - 2, tok->size() - 1};
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, sharded).ok());
  EXPECT_TRUE(std::filesystem::exists(sharded + "/model-00003-of-00003.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(sharded + "/model.safetensors"));
  absl::StatusOr<std::unique_ptr<ModelWeights>> a = LoadModel(single);
  absl::StatusOr<std::unique_ptr<ModelWeights>> b = LoadModel(sharded);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->config.stored_type, "F16");
  EXPECT_TRUE((*b)->config.tied_embeddings);
  EXPECT_EQ((*b)->lm_head.data, (*b)->tok_embeddings.data);
  EXPECT_EQ(AllBytes(**a), AllBytes(**b));
  EXPECT_EQ((*b)->vocab.eog_ids, o.eos_token_ids);  // both listed ids stop
  EXPECT_EQ((*b)->vocab.eos_id, tok->size() - 2);
  std::filesystem::remove_all(single);
  std::filesystem::remove_all(sharded);
}

// A folder written by WriteRandomHfCheckpoint, changed by `edit`, fails to load with a
// message containing `parts`.
void ExpectRefused(const std::string& name, const RandomHfOptions& o,
                   const std::function<void(const std::string&)>& edit, absl::StatusCode code,
                   const std::vector<std::string>& parts) {
  SCOPED_TRACE(name);
  const std::string dir = testing::MakeTempDir("hf_bad_" + name);
  ASSERT_TRUE(WriteRandomHfCheckpoint(o, dir).ok());
  edit(dir);
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), code) << w.status();
  for (const std::string& p : parts) EXPECT_THAT(std::string(w.status().message()), HasSubstr(p));
  std::filesystem::remove_all(dir);
}

TEST(HfModelTest, BadFoldersAreRefusedNamingFileAndKey) {
  RandomHfOptions sharded;
  sharded.num_shards = 2;
  ExpectRefused("missing_shard", sharded,
                [](const std::string& d) { std::filesystem::remove(d + "/model-00002-of-00002.safetensors"); },
                absl::StatusCode::kNotFound, {"model-00002-of-00002.safetensors", "shard missing"});
  ExpectRefused("index_lies", sharded,
                [](const std::string& d) {
                  const std::string p = d + "/model.safetensors.index.json";
                  Spit(p, absl::StrReplaceAll(Slurp(p), {{"\"model.norm.weight\": \"model-00002-of-00002",
                                                          "\"model.norm.weight\": \"model-00001-of-00002"}}));
                },
                absl::StatusCode::kInvalidArgument, {"model.norm.weight", "model.safetensors.index.json"});
  RandomHfOptions o;
  ExpectRefused("dtype_not_allowed", o,
                [](const std::string& d) {
                  const std::string p = d + "/config.json";
                  Spit(p, absl::StrReplaceAll(Slurp(p), {{"bfloat16", "float16"}}));
                },
                absl::StatusCode::kInvalidArgument,
                {"model.safetensors", "tensor 'model.embed_tokens.weight' is BF16", "torch_dtype"});
  ExpectRefused("header_lies", o,
                [](const std::string& d) {
                  const std::string p = d + "/model.safetensors";
                  std::string s = Slurp(p);
                  s.resize(s.size() - 100);  // the last tensor's offsets now run past the end
                  Spit(p, s);
                },
                absl::StatusCode::kInvalidArgument, {"model.safetensors", "lm_head.weight", "run past"});
  ExpectRefused("unknown_architecture", o,
                [](const std::string& d) {
                  const std::string p = d + "/config.json";
                  Spit(p, absl::StrReplaceAll(Slurp(p), {{"LlamaForCausalLM", "PhiForCausalLM"}}));
                },
                absl::StatusCode::kUnimplemented, {"config.json", "'architectures'", "PhiForCausalLM"});
  ExpectRefused("unknown_rope", o,
                [](const std::string& d) {
                  const std::string p = d + "/config.json";
                  Spit(p, absl::StrReplaceAll(Slurp(p), {{"\"rope_scaling\": null",
                                                          "\"rope_scaling\": {\"rope_type\": \"yarn\"}"}}));
                },
                absl::StatusCode::kUnimplemented, {"config.json", "rope_scaling.rope_type", "yarn"});
  ExpectRefused("wrong_shape", o,
                [](const std::string& d) {
                  const std::string p = d + "/config.json";
                  Spit(p, absl::StrReplaceAll(Slurp(p), {{"\"intermediate_size\": 160", "\"intermediate_size\": 128"}}));
                },
                absl::StatusCode::kInvalidArgument, {"mlp.gate_proj.weight", "has shape [160, 64]", "[128, 64]"});
  ExpectRefused("no_tokenizer", o,
                [](const std::string& d) { std::filesystem::remove(d + "/tokenizer.json"); },
                absl::StatusCode::kNotFound, {"tokenizer.json"});
  ExpectRefused("no_config", o,
                [](const std::string& d) { std::filesystem::remove(d + "/config.json"); },
                absl::StatusCode::kNotFound, {"a folder without config.json"});
  ExpectRefused("no_weights", o,
                [](const std::string& d) { std::filesystem::remove(d + "/model.safetensors"); },
                absl::StatusCode::kNotFound, {"no model.safetensors"});
  RandomHfOptions qwen3;
  qwen3.hf_class = "Qwen3ForCausalLM";
  ExpectRefused("unused_tensor", qwen3,
                [](const std::string& d) {
                  const std::string p = d + "/config.json";
                  Spit(p, absl::StrReplaceAll(Slurp(p), {{"Qwen3ForCausalLM", "LlamaForCausalLM"}}));
                },
                absl::StatusCode::kUnimplemented, {"self_attn.k_norm.weight", "not used by architecture 'llama'"});
  RandomHfOptions qwen2;
  qwen2.hf_class = "Qwen2ForCausalLM";
  ExpectRefused("missing_bias", qwen2,
                [](const std::string& d) {
                  const std::string p = d + "/model.safetensors";
                  std::string s = Slurp(p);
                  // Rename the tensor in the header: same length, so offsets still hold.
                  s = absl::StrReplaceAll(s, {{"model.layers.1.self_attn.v_proj.bias", "model.layers.1.self_attn.v_proj.bia_"}});
                  Spit(p, s);
                },
                absl::StatusCode::kInvalidArgument, {"missing tensor 'model.layers.1.self_attn.v_proj.bias'"});
}

}  // namespace
}  // namespace folio::worker
