// gguf-make-fuzz-corpus OUT_DIR: writes the seed corpus for gguf_fuzz (committed in
// services/worker/model/fuzz_corpus/): tiny valid Llama GGUF files in each dtype, a
// metadata-only file with every value type, and truncated variants. Deterministic, so
// re-running it reproduces the committed files.
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/random_model.h"

namespace folio::worker {
namespace {

struct TinySpec {
  DType dtype = DType::kF32;
  int64_t dim = 8, hidden = 8, heads = 2, kv_heads = 1;
  bool tied = false;
  uint32_t alignment = 32;
};

std::string TinyModel(const TinySpec& s) {
  GgufWriter w(s.alignment);
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "tiny");
  w.AddUint32("llama.context_length", 16);
  w.AddUint32("llama.embedding_length", static_cast<uint32_t>(s.dim));
  w.AddUint32("llama.block_count", 1);
  w.AddUint32("llama.feed_forward_length", static_cast<uint32_t>(s.hidden));
  w.AddUint32("llama.attention.head_count", static_cast<uint32_t>(s.heads));
  w.AddUint32("llama.attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddFloat32("llama.rope.freq_base", 10000.0f);
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens",
                   std::vector<std::string>{"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a"});
  w.AddFloat32Array("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1});
  w.AddInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1});
  w.AddUint32("tokenizer.ggml.bos_token_id", 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 2);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& x : v) x = normal(rng);
    w.AddTensorF32(name, s.dtype, {rows, cols}, v);
  };
  auto norm = [&](const std::string& name) {
    w.AddTensorF32(name, DType::kF32, {s.dim}, std::vector<float>(s.dim, 1.0f));
  };
  const int64_t hd = s.dim / s.heads;
  matrix("token_embd.weight", 4, s.dim);
  norm("output_norm.weight");
  if (!s.tied) matrix("output.weight", 4, s.dim);
  norm("blk.0.attn_norm.weight");
  matrix("blk.0.attn_q.weight", s.heads * hd, s.dim);
  matrix("blk.0.attn_k.weight", s.kv_heads * hd, s.dim);
  matrix("blk.0.attn_v.weight", s.kv_heads * hd, s.dim);
  matrix("blk.0.attn_output.weight", s.dim, s.heads * hd);
  norm("blk.0.ffn_norm.weight");
  matrix("blk.0.ffn_gate.weight", s.hidden, s.dim);
  matrix("blk.0.ffn_down.weight", s.dim, s.hidden);
  matrix("blk.0.ffn_up.weight", s.hidden, s.dim);
  return w.Serialize();
}

std::string AllMetadataTypes() {
  GgufWriter w;
  w.AddUint32("u32", 7);
  w.AddInt32("i32", -7);
  w.AddUint64("u64", 1ull << 40);
  w.AddFloat32("f32", 0.5f);
  w.AddFloat64("f64", 0.25);
  w.AddBool("bool", true);
  w.AddString("str", "hello");
  w.AddStringArray("strs", std::vector<std::string>{"a", "bb", ""});
  w.AddFloat32Array("floats", std::vector<float>{1, 2});
  w.AddInt32Array("ints", std::vector<int32_t>{-1, 1});
  w.AddTensorF32("t", DType::kBF16, {2, 2}, std::vector<float>{1, 2, 3, 4});
  return w.Serialize();
}

}  // namespace
}  // namespace folio::worker

int main(int argc, char** argv) {
  using folio::worker::DType;
  using folio::worker::TinySpec;
  if (argc != 2) {
    std::cerr << "usage: gguf-make-fuzz-corpus OUT_DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, std::string>> files;
  const std::string f32 = folio::worker::TinyModel(TinySpec{});
  files.emplace_back("tiny_f32.gguf", f32);
  files.emplace_back("tiny_f16_tied.gguf",
                     folio::worker::TinyModel(TinySpec{.dtype = DType::kF16, .tied = true}));
  files.emplace_back("tiny_bf16_align64.gguf",
                     folio::worker::TinyModel(TinySpec{.dtype = DType::kBF16, .alignment = 64}));
  files.emplace_back("tiny_q8_0.gguf",
                     folio::worker::TinyModel(TinySpec{.dtype = DType::kQ8_0, .dim = 32,
                                                       .hidden = 32, .heads = 2, .kv_heads = 1}));
  files.emplace_back("metadata_all_types.gguf", folio::worker::AllMetadataTypes());
  // One small seed per architecture and block type family (random blocks for the
  // K-quants), so mutations start from every loader path.
  auto random_model = [](const char* arch, DType dtype, int32_t dim, bool tied, bool freqs) {
    folio::worker::RandomModelOptions o;
    o.architecture = arch;
    o.dtype = dtype;
    o.dim = dim;
    o.hidden_dim = dim;
    o.num_layers = 1;
    o.num_heads = 2;
    o.num_kv_heads = 1;
    o.vocab_size = folio::worker::kMinRandomVocab;
    o.context_length = 64;
    o.tied_embeddings = tied;
    o.rope_freqs = freqs;
    absl::StatusOr<std::string> bytes = folio::worker::MakeRandomModelGguf(o);
    CHECK(bytes.ok()) << bytes.status();
    return *bytes;
  };
  files.emplace_back("llama3_q4_0_freqs.gguf", random_model("llama", DType::kQ4_0, 64, true, true));
  files.emplace_back("qwen2_q4_K.gguf", random_model("qwen2", DType::kQ4_K, 256, true, false));
  files.emplace_back("qwen3_q8_0.gguf", random_model("qwen3", DType::kQ8_0, 64, false, false));
  files.emplace_back("llama_q5_1.gguf", random_model("llama", DType::kQ5_1, 64, false, false));
  {
    folio::worker::RandomModelOptions o;
    o.architecture = "qwen3moe";
    o.dtype = DType::kQ8_0;
    o.dim = o.hidden_dim = 64;
    o.num_layers = 1;
    o.num_heads = 2;
    o.num_kv_heads = 1;
    o.vocab_size = folio::worker::kMinRandomVocab;
    o.context_length = 64;
    o.num_experts = 4;
    o.num_experts_used = 2;
    o.expert_hidden_dim = 32;
    absl::StatusOr<std::string> bytes = folio::worker::MakeRandomModelGguf(o);
    CHECK(bytes.ok()) << bytes.status();
    files.emplace_back("qwen3moe_q8_0.gguf", *bytes);
    o.architecture = "gemma3";
    o.num_experts = o.num_experts_used = o.expert_hidden_dim = 0;
    o.num_layers = 2;
    o.sliding_window = 8;
    bytes = folio::worker::MakeRandomModelGguf(o);
    CHECK(bytes.ok()) << bytes.status();
    files.emplace_back("gemma3_q8_0.gguf", *bytes);
  }
  files.emplace_back("trunc_header.gguf", f32.substr(0, 20));
  files.emplace_back("trunc_metadata.gguf", f32.substr(0, 300));
  files.emplace_back("trunc_tensor_infos.gguf", f32.substr(0, f32.size() / 3));
  files.emplace_back("trunc_data.gguf", f32.substr(0, f32.size() - 100));
  for (const auto& [name, bytes] : files) {
    std::FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      std::cerr << "cannot write " << dir << "/" << name << "\n";
      return 1;
    }
    std::fclose(f);
    std::cout << name << " " << bytes.size() << " bytes\n";
  }
  return 0;
}
