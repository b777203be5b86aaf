#include "services/worker/model/random_model.h"

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/worker/model/gguf_writer.h"

namespace folio::worker {
namespace {

constexpr char kSpace[] = "\xe2\x96\x81";  // U+2581, SentencePiece's space marker

// llama.cpp's general.file_type ("mostly" type of the matrices).
uint32_t FileType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ8_0: return 7;
    case DType::kBF16: return 32;
  }
  return 0;
}

// Filler pieces in a fixed order: common words, printable ASCII, lowercase bigrams
// (with and without a leading space), then lowercase trigrams (with and without a
// leading space), then numbered fillers: any size. Every piece is distinct (the word list
// and the bigrams overlap: "▁to", "▁he", ...), since readers refuse repeated pieces.
std::vector<std::string> FillerPieces(size_t n) {
  std::vector<std::string> out;
  out.reserve(n);
  absl::flat_hash_set<std::string> seen;
  auto add = [&](std::string s) {
    if (out.size() < n && seen.insert(s).second) out.push_back(std::move(s));
  };
  for (const char* w : {"the", "and", "to", "a", "was", "he", "she", "it", "of", "in",
                        "they", "said", "his", "her", "with", "day", "big", "one", "play",
                        "happy", "saw", "little", "time", "friend", "on", "you", "had"}) {
    add(absl::StrCat(kSpace, w));
  }
  for (char c = '!'; c <= '~'; ++c) add(std::string(1, c));
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) {
      add(std::string{a, b});
      add(absl::StrCat(kSpace, std::string{a, b}));
    }
  }
  for (char a = 'a'; a <= 'z' && out.size() < n; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) {
      for (char c = 'a'; c <= 'z'; ++c) {
        add(std::string{a, b, c});
        add(absl::StrCat(kSpace, std::string{a, b, c}));
      }
    }
  }
  for (size_t i = 0; out.size() < n; ++i) add(absl::StrCat("<filler", i, ">"));
  return out;
}

}  // namespace

absl::Status ValidateRandomModelOptions(const RandomModelOptions& o) {
  auto bad = [](absl::string_view what) { return absl::InvalidArgumentError(what); };
  if (o.dim <= 0 || o.hidden_dim <= 0 || o.num_layers <= 0 || o.num_heads <= 0 ||
      o.num_kv_heads <= 0 || o.context_length <= 0) {
    return bad("dim, hidden_dim, layers, heads, kv_heads and context must be positive");
  }
  if (o.dim % o.num_heads != 0) return bad("dim must be a multiple of heads");
  if ((o.dim / o.num_heads) % 2 != 0) return bad("head dimension (dim / heads) must be even");
  if (o.num_kv_heads > o.num_heads || o.num_heads % o.num_kv_heads != 0) {
    return bad("heads must be a multiple of kv_heads");
  }
  if (o.vocab_size < kMinRandomVocab) {
    return bad(absl::StrCat("vocab must be at least ", kMinRandomVocab,
                            " (3 control + 256 byte tokens)"));
  }
  if (o.dtype == DType::kQ8_0 && (o.dim % 32 != 0 || o.hidden_dim % 32 != 0)) {
    return bad("q8_0 needs dim and hidden_dim to be multiples of 32");
  }
  if (!(o.weight_std >= 0) || !(o.rope_theta > 0) || !(o.rms_norm_eps > 0)) {
    return bad("weight_std must be >= 0, rope_theta and rms_norm_eps > 0");
  }
  return absl::OkStatus();
}

Vocab MakeRandomModelVocab(int32_t vocab_size) {
  Vocab v;
  v.pieces = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    v.pieces.push_back(absl::StrFormat("<0x%02X>", b));
    v.types.push_back(TokenType::kByte);
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  const size_t fixed = v.pieces.size();
  const std::vector<std::string> fill =
      FillerPieces(static_cast<size_t>(std::max<int32_t>(vocab_size, fixed)) - fixed);
  for (size_t i = 0; i < fill.size(); ++i) {
    v.pieces.push_back(fill[i]);
    v.types.push_back(TokenType::kNormal);
    v.scores.push_back(-static_cast<float>(i));  // earlier pieces merge first
  }
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.add_bos = true;
  v.add_dummy_prefix = true;
  return v;
}

absl::StatusOr<std::string> MakeRandomModelGguf(const RandomModelOptions& o) {
  if (absl::Status s = ValidateRandomModelOptions(o); !s.ok()) return s;
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", o.name);
  w.AddUint32("general.file_type", FileType(o.dtype));
  w.AddUint32("general.quantization_version", 2);
  w.AddUint32("llama.vocab_size", static_cast<uint32_t>(o.vocab_size));
  w.AddUint32("llama.context_length", static_cast<uint32_t>(o.context_length));
  w.AddUint32("llama.embedding_length", static_cast<uint32_t>(o.dim));
  w.AddUint32("llama.block_count", static_cast<uint32_t>(o.num_layers));
  w.AddUint32("llama.feed_forward_length", static_cast<uint32_t>(o.hidden_dim));
  w.AddUint32("llama.rope.dimension_count", static_cast<uint32_t>(o.dim / o.num_heads));
  w.AddUint32("llama.attention.head_count", static_cast<uint32_t>(o.num_heads));
  w.AddUint32("llama.attention.head_count_kv", static_cast<uint32_t>(o.num_kv_heads));
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", o.rms_norm_eps);
  w.AddFloat32("llama.rope.freq_base", o.rope_theta);

  const Vocab vocab = MakeRandomModelVocab(o.vocab_size);
  std::vector<int32_t> types;
  for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", vocab.pieces);
  w.AddFloat32Array("tokenizer.ggml.scores", vocab.scores);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  w.AddUint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
  w.AddBool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", false);
  if (!o.chat_template.empty()) w.AddString("tokenizer.chat_template", o.chat_template);
  for (const auto& [name, source] : o.named_chat_templates) {
    w.AddString("tokenizer.chat_template." + name, source);
  }

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, o.weight_std);
  std::vector<float> buf;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    buf.resize(static_cast<size_t>(rows * cols));
    for (float& x : buf) x = o.weight_std > 0 ? normal(rng) : 0.0f;
    w.AddTensorF32(name, o.dtype, {rows, cols}, buf);
  };
  auto norm = [&](const std::string& name, int64_t n) {
    buf.assign(static_cast<size_t>(n), 1.0f);
    w.AddTensorF32(name, DType::kF32, {n}, buf);
  };
  const int64_t head_dim = o.dim / o.num_heads;
  const int64_t q_dim = o.num_heads * head_dim, kv_dim = o.num_kv_heads * head_dim;
  matrix("token_embd.weight", o.vocab_size, o.dim);
  norm("output_norm.weight", o.dim);
  if (!o.tied_embeddings) matrix("output.weight", o.vocab_size, o.dim);
  for (int32_t l = 0; l < o.num_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    norm(p + "attn_norm.weight", o.dim);
    matrix(p + "attn_q.weight", q_dim, o.dim);
    matrix(p + "attn_k.weight", kv_dim, o.dim);
    matrix(p + "attn_v.weight", kv_dim, o.dim);
    matrix(p + "attn_output.weight", o.dim, q_dim);
    norm(p + "ffn_norm.weight", o.dim);
    matrix(p + "ffn_gate.weight", o.hidden_dim, o.dim);
    matrix(p + "ffn_down.weight", o.dim, o.hidden_dim);
    matrix(p + "ffn_up.weight", o.hidden_dim, o.dim);
  }
  return w.Serialize();
}

absl::Status WriteRandomModel(const RandomModelOptions& options, const std::string& path) {
  absl::StatusOr<std::string> bytes = MakeRandomModelGguf(options);
  if (!bytes.ok()) return bytes.status();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::InternalError(absl::StrCat(path, ": cannot open for writing"));
  f.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace folio::worker
