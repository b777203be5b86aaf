#include "services/worker/model/llama2c_loader.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/worker/model/dequant.h"
#include "services/worker/model/load_model.h"
#include "services/worker/model/model_test_util.h"

namespace folio::worker {
namespace {

using ::testing::HasSubstr;

void ExpectSameValues(const TensorView& a, const TensorView& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  const std::vector<float> x = ToF32(a), y = ToF32(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " element " << i;
}

TEST(Llama2cLoaderTest, Stories260KMatchesGguf) {
  FOLIO_MODEL_OR_SKIP(bin_path, "stories260K/stories260K.bin");
  const std::string gguf_path = std::filesystem::path(bin_path).replace_extension(".gguf");
  absl::StatusOr<std::unique_ptr<ModelWeights>> bin = LoadModel(bin_path);
  ASSERT_TRUE(bin.ok()) << bin.status();
  absl::StatusOr<std::unique_ptr<ModelWeights>> gguf = LoadModel(gguf_path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();

  const ModelConfig& c = (*bin)->config;
  EXPECT_EQ(c.name, "stories260K");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ((*bin)->lm_head.data, (*bin)->tok_embeddings.data);
  const ModelConfig& g = (*gguf)->config;
  EXPECT_EQ(g.dim, c.dim);
  EXPECT_EQ(g.hidden_dim, c.hidden_dim);
  EXPECT_EQ(g.num_layers, c.num_layers);
  EXPECT_EQ(g.num_heads, c.num_heads);
  EXPECT_EQ(g.num_kv_heads, c.num_kv_heads);
  EXPECT_EQ(g.vocab_size, c.vocab_size);
  EXPECT_EQ(g.max_seq_len, c.max_seq_len);
  EXPECT_EQ(g.tied_embeddings, c.tied_embeddings);

  // Every tensor, elementwise: both files hold the same f32 weights.
  const ModelWeights& a = **bin;
  const ModelWeights& b = **gguf;
  ExpectSameValues(a.tok_embeddings, b.tok_embeddings, "tok_embeddings");
  ExpectSameValues(a.final_norm, b.final_norm, "final_norm");
  ExpectSameValues(a.lm_head, b.lm_head, "lm_head");
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const std::string p = "layer " + std::to_string(l) + " ";
    ExpectSameValues(a.layers[l].attn_norm, b.layers[l].attn_norm, p + "attn_norm");
    ExpectSameValues(a.layers[l].wq, b.layers[l].wq, p + "wq");
    ExpectSameValues(a.layers[l].wk, b.layers[l].wk, p + "wk");
    ExpectSameValues(a.layers[l].wv, b.layers[l].wv, p + "wv");
    ExpectSameValues(a.layers[l].wo, b.layers[l].wo, p + "wo");
    ExpectSameValues(a.layers[l].ffn_norm, b.layers[l].ffn_norm, p + "ffn_norm");
    ExpectSameValues(a.layers[l].w_gate, b.layers[l].w_gate, p + "w_gate");
    ExpectSameValues(a.layers[l].w_down, b.layers[l].w_down, p + "w_down");
    ExpectSameValues(a.layers[l].w_up, b.layers[l].w_up, p + "w_up");
  }
  // Weights are not trivially equal (e.g. all zero).
  const std::vector<float> wq = ToF32(a.layers[2].wq);
  EXPECT_NE(wq[0], wq[1]);
  // The views point into the mapped file: layer l+1 follows layer l for stacked tensors.
  EXPECT_EQ(static_cast<const float*>(a.layers[1].wq.data),
            static_cast<const float*>(a.layers[0].wq.data) + 64 * 64);

  ASSERT_EQ(a.vocab.size(), 512);
  EXPECT_EQ(a.vocab.pieces, b.vocab.pieces);
}

// A tiny synthetic llama2.c checkpoint whose float i holds value i.
struct Tiny {
  int32_t dim = 8, hidden = 16, layers = 2, heads = 2, kv_heads = 1, vocab = 4, seq = 4;
  bool shared = true;

  int64_t NumFloats() const {
    const int64_t hd = dim / heads, q = heads * hd, kv = kv_heads * hd;
    return int64_t{vocab} * dim + layers * (2 * dim + dim * (2 * q + 2 * kv) + 3 * dim * hidden) +
           dim + int64_t{seq} * hd + (shared ? 0 : int64_t{vocab} * dim);
  }
  std::string Bytes() const {
    const int32_t header[7] = {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq};
    std::string b(reinterpret_cast<const char*>(header), sizeof(header));
    for (int64_t i = 0; i < NumFloats(); ++i) {
      const float f = static_cast<float>(i);
      b.append(reinterpret_cast<const char*>(&f), 4);
    }
    return b;
  }
};

std::string TinyTokenizer(int32_t n) {
  std::string b;
  auto put = [&](auto v) { b.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(int32_t{8});
  for (int32_t i = 0; i < n; ++i) {
    const std::string piece = i < 3 ? std::string("x") : " t" + std::to_string(i);
    put(float(-i));
    put(static_cast<int32_t>(piece.size()));
    b.append(piece);
  }
  return b;
}

TEST(Llama2cLoaderTest, UnsharedClassifierFollowsFreqCis) {
  Tiny t;
  t.shared = false;
  const std::string dir = testing::MakeTempDir("unshared");
  const std::string bytes = t.Bytes();
  testing::WriteFileBytes(dir + "/model.bin", bytes.data(), bytes.size());
  testing::WriteFileBytes(dir + "/tokenizer.bin", TinyTokenizer(4).data(), TinyTokenizer(4).size());
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadModel(dir + "/model.bin");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->config.tied_embeddings);
  EXPECT_EQ((*w)->config.vocab_size, 4);
  EXPECT_EQ((*w)->vocab.pieces[3], "\xe2\x96\x81t3");
  // wcls is the last vocab*dim floats of the file.
  const std::vector<float> wcls = ToF32((*w)->lm_head);
  ASSERT_EQ(wcls.size(), 32u);
  EXPECT_EQ(wcls.back(), static_cast<float>(t.NumFloats() - 1));
  EXPECT_EQ(wcls.front(), static_cast<float>(t.NumFloats() - 32));
  // Layer 1's wk starts right after layer 0's: offset of wk + kv*dim.
  const int64_t wk0 = 4 * 8 + 2 * 8 + 2 * 8 * 8;  // tok_emb, rms_att, wq
  EXPECT_EQ(ToF32((*w)->layers[0].wk)[0], static_cast<float>(wk0));
  EXPECT_EQ(ToF32((*w)->layers[1].wk)[0], static_cast<float>(wk0 + 4 * 8));
  float row[8];
  RowToF32((*w)->layers[1].wk, 2, row);
  EXPECT_EQ(row[0], static_cast<float>(wk0 + 4 * 8 + 2 * 8));
}

TEST(Llama2cLoaderTest, PrefersTokVocabBinOverTokenizerBin) {
  Tiny t;
  const std::string dir = testing::MakeTempDir("tokfind");
  const std::string bytes = t.Bytes();
  testing::WriteFileBytes(dir + "/m.bin", bytes.data(), bytes.size());
  EXPECT_TRUE(absl::IsNotFound(FindLlama2cTokenizer(dir + "/m.bin", 4).status()));
  absl::StatusOr<std::unique_ptr<ModelWeights>> none = LoadModel(dir + "/m.bin");
  EXPECT_THAT(none.status().message(), HasSubstr("tok4.bin"));
  testing::WriteFileBytes(dir + "/tokenizer.bin", "", 0);
  EXPECT_EQ(*FindLlama2cTokenizer(dir + "/m.bin", 4), dir + "/tokenizer.bin");
  // A broken tokenizer is reported with the checkpoint's name.
  EXPECT_THAT(LoadModel(dir + "/m.bin").status().message(), HasSubstr("loading tokenizer"));
  const std::string tok = TinyTokenizer(4);
  testing::WriteFileBytes(dir + "/tok4.bin", tok.data(), tok.size());
  EXPECT_EQ(*FindLlama2cTokenizer(dir + "/m.bin", 4), dir + "/tok4.bin");
  EXPECT_TRUE(LoadModel(dir + "/m.bin").ok());
}

TEST(Llama2cLoaderTest, TruncatedAndCorruptCheckpointsFail) {
  Tiny t;
  const std::string bytes = t.Bytes();
  ModelWeights w;
  auto parse = [&](const std::string& b) {
    return ParseLlama2cCheckpoint({reinterpret_cast<const uint8_t*>(b.data()), b.size()},
                                  "m.bin", &w);
  };
  ASSERT_TRUE(parse(bytes).ok());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    absl::Status s = parse(bytes.substr(0, cut));
    ASSERT_TRUE(absl::IsInvalidArgument(s)) << cut << ": " << s;
    ASSERT_THAT(s.message(), HasSubstr("m.bin")) << cut;
  }
  EXPECT_THAT(parse(bytes + "xxxx").message(), HasSubstr("size mismatch"));
  auto with_header = [&](int index, int32_t value) {
    std::string b = bytes;
    std::memcpy(b.data() + 4 * index, &value, 4);
    return parse(b);
  };
  EXPECT_THAT(with_header(0, 0).message(), HasSubstr("sizes must be positive"));
  EXPECT_THAT(with_header(3, 3).message(), HasSubstr("not a multiple of n_heads"));
  EXPECT_THAT(with_header(4, 3).message(), HasSubstr("n_kv_heads"));
  EXPECT_THAT(with_header(5, INT32_MIN).message(), HasSubstr("sizes must be positive"));
  // Huge sizes: the implied size overflows 64 bits and is reported, not allocated.
  EXPECT_THAT(with_header(1, INT32_MAX).message(), HasSubstr("size mismatch"));
  {
    std::string b = bytes;
    const int32_t big[3] = {1 << 30, INT32_MAX, INT32_MAX};
    std::memcpy(b.data(), big, sizeof(big));
    EXPECT_TRUE(absl::IsInvalidArgument(parse(b)));
  }
}

TEST(Llama2cLoaderTest, DispatchErrors) {
  const std::string dir = testing::MakeTempDir("dispatch");
  EXPECT_TRUE(absl::IsNotFound(LoadModel(dir + "/missing.bin").status()));
  testing::WriteFileBytes(dir + "/v1.bin", "24ka\1\0\0\0", 8);  // u32 0x616b3432
  absl::Status v1 = LoadModel(dir + "/v1.bin").status();
  EXPECT_TRUE(absl::IsUnimplemented(v1)) << v1;
  testing::WriteFileBytes(dir + "/short.bin", "ab", 2);
  EXPECT_TRUE(absl::IsInvalidArgument(LoadModel(dir + "/short.bin").status()));
  testing::WriteFileBytes(dir + "/trunc.gguf", "GGUF\3\0\0\0", 8);
  EXPECT_TRUE(absl::IsDataLoss(LoadModel(dir + "/trunc.gguf").status()));
}

}  // namespace
}  // namespace folio::worker
