#include "services/worker/model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/worker/model/dequant.h"
#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/model_test_util.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

absl::Span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void ExpectShapes(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t q = int64_t{c.num_heads} * c.head_dim, kv = int64_t{c.num_kv_heads} * c.head_dim;
  EXPECT_EQ(w.tok_embeddings.shape, (std::vector<int64_t>{c.vocab_size, c.dim}));
  EXPECT_EQ(w.lm_head.shape, (std::vector<int64_t>{c.vocab_size, c.dim}));
  EXPECT_EQ(w.final_norm.shape, (std::vector<int64_t>{c.dim}));
  ASSERT_EQ(static_cast<int32_t>(w.layers.size()), c.num_layers);
  for (const LayerWeights& l : w.layers) {
    EXPECT_EQ(l.attn_norm.shape, (std::vector<int64_t>{c.dim}));
    EXPECT_EQ(l.wq.shape, (std::vector<int64_t>{q, c.dim}));
    EXPECT_EQ(l.wk.shape, (std::vector<int64_t>{kv, c.dim}));
    EXPECT_EQ(l.wv.shape, (std::vector<int64_t>{kv, c.dim}));
    EXPECT_EQ(l.wo.shape, (std::vector<int64_t>{c.dim, q}));
    EXPECT_EQ(l.ffn_norm.shape, (std::vector<int64_t>{c.dim}));
    EXPECT_EQ(l.w_gate.shape, (std::vector<int64_t>{c.hidden_dim, c.dim}));
    EXPECT_EQ(l.w_down.shape, (std::vector<int64_t>{c.dim, c.hidden_dim}));
    EXPECT_EQ(l.w_up.shape, (std::vector<int64_t>{c.hidden_dim, c.dim}));
    EXPECT_NE(l.w_up.data, nullptr);
  }
}

TEST(GgufModelTest, LoadsStories260K) {
  FOLIO_MODEL_OR_SKIP(path, "stories260K/stories260K.gguf");
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ((*w)->lm_head.data, (*w)->tok_embeddings.data);
  EXPECT_EQ((*w)->tok_embeddings.dtype, DType::kF32);
  ExpectShapes(**w);
  const Vocab& v = (*w)->vocab;
  ASSERT_EQ(v.size(), 512);
  EXPECT_EQ(v.pieces[0], "<unk>");
  EXPECT_EQ(v.pieces[1], "<s>");
  EXPECT_EQ(v.pieces[2], "</s>");
  EXPECT_EQ(v.pieces[3], "<0x00>");
  EXPECT_EQ(v.types[3], TokenType::kByte);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_TRUE(v.add_bos);
}

TEST(GgufModelTest, LoadsBench28mF16) {
  FOLIO_MODEL_OR_SKIP(path, "bench-28m-f16.gguf");
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.vocab_size, 4096);
  EXPECT_EQ(c.dim, 512);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.hidden_dim, 1408);
  EXPECT_EQ(c.max_seq_len, 4096);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ((*w)->layers[3].wq.dtype, DType::kF16);
  EXPECT_EQ((*w)->tok_embeddings.dtype, DType::kF16);
  EXPECT_EQ((*w)->final_norm.dtype, DType::kF32);
  ExpectShapes(**w);
  // Random N(0, 0.02) weights: check the statistics of one matrix.
  const std::vector<float> wq = ToF32((*w)->layers[3].wq);
  double sum = 0, sq = 0;
  for (float x : wq) {
    sum += x;
    sq += double{x} * x;
  }
  const double mean = sum / wq.size(), std = std::sqrt(sq / wq.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std, 0.02, 2e-3);
}

class RandomModelRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RandomModelRoundTrip, WriteThenLoad) {
  RandomModelOptions o;
  o.name = "tiny";
  o.dim = 64;
  o.hidden_dim = 96;
  o.num_layers = 3;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.vocab_size = 300;
  o.context_length = 128;
  o.dtype = GetParam();
  o.seed = 42;
  o.rope_theta = 500000.0f;
  o.rms_norm_eps = 1e-6f;
  const std::string path = testing::MakeTempDir(DTypeName(GetParam())) + "/tiny.gguf";
  ASSERT_TRUE(WriteRandomModel(o, path).ok());

  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(path);
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelConfig& c = (*w)->config;
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 96);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 300);
  EXPECT_EQ(c.max_seq_len, 128);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_NE((*w)->lm_head.data, (*w)->tok_embeddings.data);
  ExpectShapes(**w);
  EXPECT_EQ((*w)->layers[1].w_down.dtype, GetParam());
  EXPECT_EQ((*w)->layers[1].ffn_norm.dtype, DType::kF32);
  EXPECT_EQ(ToF32((*w)->layers[2].attn_norm), std::vector<float>(64, 1.0f));
  EXPECT_EQ((*w)->vocab.pieces, MakeRandomModelVocab(300).pieces);
  EXPECT_EQ((*w)->vocab.scores, MakeRandomModelVocab(300).scores);
  EXPECT_EQ((*w)->vocab.types, MakeRandomModelVocab(300).types);

  // Same seed, f32: the stored values are the reference the other dtypes approximate.
  o.dtype = DType::kF32;
  const std::string ref_path = path + ".f32.gguf";
  ASSERT_TRUE(WriteRandomModel(o, ref_path).ok());
  absl::StatusOr<std::unique_ptr<ModelWeights>> ref = LoadModel(ref_path);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<float> want = ToF32((*ref)->layers[1].w_down);
  const std::vector<float> got = ToF32((*w)->layers[1].w_down);
  ASSERT_EQ(got.size(), want.size());
  double max_err = 0, sq = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
    sq += double{want[i]} * want[i];
  }
  const double tol = GetParam() == DType::kF32 ? 0 : GetParam() == DType::kF16 ? 1e-4 : 1e-3;
  EXPECT_LE(max_err, tol);
  EXPECT_NEAR(std::sqrt(sq / want.size()), 0.02, 2e-3);
  std::vector<float> row(96);
  RowToF32((*w)->layers[1].w_down, 5, row.data());
  for (int i = 0; i < 96; ++i) ASSERT_NEAR(row[i], want[5 * 96 + i], tol);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, RandomModelRoundTrip,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(GgufModelTest, TiedModelHasNoOutputTensor) {
  RandomModelOptions o;
  o.tied_embeddings = true;
  o.vocab_size = 259;
  absl::StatusOr<std::string> bytes = MakeRandomModelGguf(o);
  ASSERT_TRUE(bytes.ok());
  absl::StatusOr<GgufFile> f = GgufFile::Parse(AsBytes(*bytes), "tied");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->FindTensor("output.weight"), nullptr);
  ModelWeights w;
  ASSERT_TRUE(BuildLlamaWeights(*f, &w).ok());
  EXPECT_TRUE(w.config.tied_embeddings);
  EXPECT_EQ(w.lm_head.data, w.tok_embeddings.data);
}

// A minimal llama GGUF whose metadata and tensors a test can perturb.
struct Spec {
  std::string arch = "llama";
  std::string tokenizer = "llama";
  int64_t q_rows = 8;  // correct: 2 heads * head_dim 4
  bool with_ffn_up = true;
  bool with_rms_eps = true;
  uint32_t blocks = 1;
};

std::string BuildSmall(const Spec& s) {
  GgufWriter w;
  w.AddString("general.architecture", s.arch);
  w.AddUint32("llama.embedding_length", 8);
  w.AddUint32("llama.feed_forward_length", 16);
  w.AddUint32("llama.block_count", s.blocks);
  w.AddUint32("llama.attention.head_count", 2);
  w.AddUint32("llama.context_length", 32);
  if (s.with_rms_eps) w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddString("tokenizer.ggml.model", s.tokenizer);
  w.AddStringArray("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "a"});
  auto m = [&](const std::string& n, int64_t r, int64_t c) {
    w.AddTensorF32(n, DType::kF32, {r, c}, std::vector<float>(r * c, 0.5f));
  };
  m("token_embd.weight", 4, 8);
  w.AddTensorF32("output_norm.weight", DType::kF32, {8}, std::vector<float>(8, 1.0f));
  w.AddTensorF32("blk.0.attn_norm.weight", DType::kF32, {8}, std::vector<float>(8, 1.0f));
  w.AddTensorF32("blk.0.ffn_norm.weight", DType::kF32, {8}, std::vector<float>(8, 1.0f));
  m("blk.0.attn_q.weight", s.q_rows, 8);
  m("blk.0.attn_k.weight", 8, 8);
  m("blk.0.attn_v.weight", 8, 8);
  m("blk.0.attn_output.weight", 8, 8);
  m("blk.0.ffn_gate.weight", 16, 8);
  m("blk.0.ffn_down.weight", 8, 16);
  if (s.with_ffn_up) m("blk.0.ffn_up.weight", 16, 8);
  return w.Serialize();
}

absl::Status Build(const Spec& s) {
  const std::string bytes = BuildSmall(s);
  absl::StatusOr<GgufFile> f = GgufFile::Parse(AsBytes(bytes), "small.gguf");
  if (!f.ok()) return f.status();
  ModelWeights w;
  return BuildLlamaWeights(*f, &w);
}

TEST(GgufModelTest, ValidatesArchitectureTokenizerAndShapes) {
  EXPECT_TRUE(Build(Spec{}).ok()) << Build(Spec{});
  Spec s;
  s.arch = "gpt2";
  EXPECT_TRUE(absl::IsUnimplemented(Build(s)));
  EXPECT_THAT(Build(s).message(), HasSubstr("architecture 'gpt2'"));
  s = Spec{};
  s.tokenizer = "gpt2";
  EXPECT_TRUE(absl::IsUnimplemented(Build(s)));
  EXPECT_THAT(Build(s).message(), HasSubstr("tokenizer.ggml.model 'gpt2'"));
  s = Spec{};
  s.q_rows = 16;
  EXPECT_TRUE(absl::IsInvalidArgument(Build(s)));
  EXPECT_THAT(Build(s).message(),
              HasSubstr("small.gguf: tensor 'blk.0.attn_q.weight' has shape [16, 8]"));
  EXPECT_THAT(Build(s).message(), HasSubstr("expected [8, 8]"));
  s = Spec{};
  s.with_ffn_up = false;
  EXPECT_THAT(Build(s).message(), HasSubstr("missing tensor 'blk.0.ffn_up.weight'"));
  s = Spec{};
  s.with_rms_eps = false;
  EXPECT_THAT(Build(s).message(), HasSubstr("llama.attention.layer_norm_rms_epsilon"));
  // A bogus block count is an error, not a huge allocation (found by gguf_fuzz).
  s = Spec{};
  s.blocks = 0x7fffffff;
  EXPECT_THAT(Build(s).message(), HasSubstr("llama.block_count is 2147483647"));
  s.blocks = 2;
  EXPECT_THAT(Build(s).message(), HasSubstr("only 11 tensors"));
}

TEST(GgufModelTest, RandomModelOptionsAreValidated) {
  RandomModelOptions o;
  o.vocab_size = 100;
  EXPECT_TRUE(absl::IsInvalidArgument(MakeRandomModelGguf(o).status()));
  o = RandomModelOptions{};
  o.num_heads = 7;
  EXPECT_FALSE(MakeRandomModelGguf(o).ok());
  o = RandomModelOptions{};
  o.dtype = DType::kQ8_0;
  o.hidden_dim = 172;  // not a multiple of 32
  EXPECT_FALSE(MakeRandomModelGguf(o).ok());
}

// Readers (Folio's tokenizer, llama.cpp, @huggingface/gguf) refuse repeated pieces, so the
// random vocabulary must be distinct at every size, with the byte and control tokens first.
TEST(GgufModelTest, RandomVocabPiecesAreDistinctAtEverySize) {
  for (int32_t size : {259, 512, 4096, 32000, 128256}) {
    const Vocab v = MakeRandomModelVocab(size);
    ASSERT_EQ(static_cast<int32_t>(v.pieces.size()), size);
    ASSERT_EQ(v.scores.size(), v.pieces.size());
    ASSERT_EQ(v.types.size(), v.pieces.size());
    std::vector<std::string> sorted = v.pieces;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
        << "repeated piece at vocab " << size << ": " << *std::adjacent_find(sorted.begin(), sorted.end());
    EXPECT_EQ(v.pieces[3], "<0x00>");
    EXPECT_EQ(v.pieces[258], "<0xFF>");
  }
}

// The committed fuzz seeds: the complete ones are valid models, the truncated ones fail.
TEST(GgufModelTest, FuzzCorpusSeeds) {
  const std::string dir = std::string(FOLIO_MODEL_SOURCE_DIR) + "/fuzz_corpus/";
  for (const char* name : {"tiny_f32.gguf", "tiny_f16_tied.gguf", "tiny_bf16_align64.gguf",
                           "tiny_q8_0.gguf"}) {
    absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(dir + name);
    ASSERT_TRUE(w.ok()) << name << ": " << w.status();
    EXPECT_EQ((*w)->config.vocab_size, 4) << name;
  }
  EXPECT_TRUE(LoadModel(dir + "tiny_f16_tied.gguf").value()->config.tied_embeddings);
  EXPECT_EQ(LoadModel(dir + "tiny_q8_0.gguf").value()->layers[0].wq.dtype, DType::kQ8_0);
  for (const char* name : {"trunc_header.gguf", "trunc_metadata.gguf",
                           "trunc_tensor_infos.gguf", "trunc_data.gguf"}) {
    absl::Status s = LoadModel(dir + name).status();
    EXPECT_TRUE(absl::IsDataLoss(s) || absl::IsInvalidArgument(s)) << name << ": " << s;
  }
}

}  // namespace
}  // namespace folio::worker
