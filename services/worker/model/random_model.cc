#include "services/worker/model/random_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "glog/logging.h"
#include "services/worker/model/gguf.h"
#include "services/worker/model/gguf_writer.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/weight_format.h"

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
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 12;
    case DType::kQ4_K: return 15;
    case DType::kQ5_K: return 17;
    case DType::kQ6_K: return 18;
  }
  LOG(FATAL) << "no GGUF file type for dtype " << static_cast<int>(dtype);
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
  if (o.architecture != "llama" && o.architecture != "qwen2" && o.architecture != "qwen3" &&
      o.architecture != "qwen3moe" && o.architecture != "gemma2" && o.architecture != "gemma3" &&
      o.architecture != "phi3") {
    return bad(absl::StrCat("architecture '", o.architecture,
                            "': expected llama, qwen2, qwen3, qwen3moe, gemma2, gemma3 or phi3"));
  }
  if (o.longrope_original_context != 0 &&
      (o.architecture != "phi3" || o.longrope_original_context < 0)) {
    return bad("longrope_original_context is phi3's (and must be > 0)");
  }
  const bool gemma = o.architecture == "gemma2" || o.architecture == "gemma3";
  if (!gemma && (o.sliding_window != 0 || o.attn_softcap != 0 || o.final_softcap != 0 ||
                 o.rope_theta_local != 0)) {
    return bad("sliding_window, softcaps and rope_theta_local are Gemma's keys");
  }
  if (o.sliding_window < 0 || !(o.attn_softcap >= 0) || !(o.final_softcap >= 0) ||
      !(o.rope_theta_local >= 0)) {
    return bad("sliding_window, softcaps and rope_theta_local must be >= 0");
  }
  if (o.architecture == "qwen3moe" && o.num_experts == 0) {
    return bad("qwen3moe needs num_experts > 0");
  }
  if (o.num_experts != 0 && o.architecture != "llama" && o.architecture != "qwen3moe") {
    return bad("experts are written for llama (Mixtral-style) and qwen3moe only");
  }
  if (o.num_experts < 0 || o.num_experts_used < 0 || o.expert_hidden_dim < 0 ||
      (o.num_experts > 0 && (o.num_experts_used < 1 || o.num_experts_used > o.num_experts))) {
    return bad("num_experts_used must be in [1, num_experts]");
  }
  if (o.num_experts > 0 && o.architecture == "llama" && o.expert_hidden_dim > 0 &&
      o.expert_hidden_dim != o.hidden_dim) {
    return bad("llama's experts are hidden_dim wide (no expert_feed_forward_length)");
  }
  if (o.head_dim < 0) return bad("head_dim must be >= 0");
  if (o.head_dim == 0 && o.dim % o.num_heads != 0) return bad("dim must be a multiple of heads");
  const int32_t head_dim = o.head_dim > 0 ? o.head_dim : o.dim / o.num_heads;
  if (head_dim % 2 != 0) return bad("head dimension must be even");
  if (o.rope_freqs && o.architecture != "llama") return bad("rope_freqs is a llama tensor");
  if (!(o.embedding_std >= 0) || !(o.rope_scaling_factor >= 0)) {
    return bad("embedding_std and rope_scaling_factor must be >= 0");
  }
  if (o.num_kv_heads > o.num_heads || o.num_heads % o.num_kv_heads != 0) {
    return bad("heads must be a multiple of kv_heads");
  }
  if (o.vocab_from.empty() && !o.rename_tokens.empty()) {
    return bad("rename_tokens needs vocab_from");
  }
  if (o.vocab_from.empty() && o.vocab_size < kMinRandomVocab) {
    return bad(absl::StrCat("vocab must be at least ", kMinRandomVocab,
                            " (3 control + 256 byte tokens)"));
  }
  const int32_t block = FormatOf(o.dtype).block_values;
  const int32_t hd = o.head_dim > 0 ? o.head_dim : (o.num_heads > 0 ? o.dim / o.num_heads : 0);
  const int32_t expert_hidden = o.expert_hidden_dim > 0 ? o.expert_hidden_dim : o.hidden_dim;
  if (o.dim % block != 0 || o.hidden_dim % block != 0 || (o.num_heads * hd) % block != 0 ||
      expert_hidden % block != 0) {
    return bad(absl::StrCat(DTypeName(o.dtype), " needs dim, hidden_dim, heads * head_dim "
                            "and the experts' width to be multiples of ", block));
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

absl::StatusOr<std::string> MakeRandomModelGguf(const RandomModelOptions& options) {
  if (absl::Status s = ValidateRandomModelOptions(options); !s.ok()) return s;
  RandomModelOptions o = options;
  // The vocabulary file's tokenizer.* keys, and its size.
  std::unique_ptr<MappedFile> vocab_file;
  std::optional<GgufFile> vocab_gguf;
  if (!o.vocab_from.empty()) {
    absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(o.vocab_from);
    if (!f.ok()) return f.status();
    vocab_file = *std::move(f);
    absl::StatusOr<GgufFile> g = GgufFile::Parse(
        absl::MakeConstSpan(vocab_file->data(), vocab_file->size()), o.vocab_from);
    if (!g.ok()) return g.status();
    vocab_gguf = *std::move(g);
    const GgufValue* tokens = vocab_gguf->FindValue("tokenizer.ggml.tokens");
    if (tokens == nullptr || !tokens->is_array() || tokens->array_size() == 0 ||
        tokens->array_size() > (1u << 24)) {
      return absl::InvalidArgumentError(absl::StrCat(
          o.vocab_from, ": no usable tokenizer.ggml.tokens array (not a vocabulary file?)"));
    }
    o.vocab_size = static_cast<int32_t>(tokens->array_size());
  }
  GgufWriter w;
  const std::string k = o.architecture + ".";
  const int64_t head_dim = o.head_dim > 0 ? o.head_dim : o.dim / o.num_heads;
  w.AddString("general.architecture", o.architecture);
  w.AddString("general.name", o.name);
  w.AddUint32("general.file_type", FileType(o.dtype));
  w.AddUint32("general.quantization_version", 2);
  w.AddUint32(k + "vocab_size", static_cast<uint32_t>(o.vocab_size));
  w.AddUint32(k + "context_length", static_cast<uint32_t>(o.context_length));
  w.AddUint32(k + "embedding_length", static_cast<uint32_t>(o.dim));
  w.AddUint32(k + "block_count", static_cast<uint32_t>(o.num_layers));
  w.AddUint32(k + "feed_forward_length", static_cast<uint32_t>(o.hidden_dim));
  if (o.sliding_window > 0) {
    w.AddUint32(k + "attention.sliding_window", static_cast<uint32_t>(o.sliding_window));
  }
  if (o.attn_softcap > 0) w.AddFloat32(k + "attn_logit_softcapping", o.attn_softcap);
  if (o.final_softcap > 0) w.AddFloat32(k + "final_logit_softcapping", o.final_softcap);
  if (o.rope_theta_local > 0) w.AddFloat32(k + "rope.freq_base_swa", o.rope_theta_local);
  if (o.longrope_original_context > 0) {
    w.AddUint32(k + "rope.scaling.original_context_length",
                static_cast<uint32_t>(o.longrope_original_context));
    const double scale = static_cast<double>(o.context_length) / o.longrope_original_context;
    const double attn_factor =
        scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(o.longrope_original_context)) : 1.0;
    w.AddFloat32(k + "rope.scaling.attn_factor", static_cast<float>(attn_factor));
  }
  const int32_t expert_hidden = o.expert_hidden_dim > 0 ? o.expert_hidden_dim : o.hidden_dim;
  if (o.num_experts > 0) {
    w.AddUint32(k + "expert_count", static_cast<uint32_t>(o.num_experts));
    w.AddUint32(k + "expert_used_count", static_cast<uint32_t>(o.num_experts_used));
    if (o.architecture == "qwen3moe") {
      w.AddUint32(k + "expert_feed_forward_length", static_cast<uint32_t>(expert_hidden));
    }
  }
  w.AddUint32(k + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.AddUint32(k + "attention.head_count", static_cast<uint32_t>(o.num_heads));
  w.AddUint32(k + "attention.head_count_kv", static_cast<uint32_t>(o.num_kv_heads));
  if (o.head_dim > 0) {
    w.AddUint32(k + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.AddUint32(k + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  w.AddFloat32(k + "attention.layer_norm_rms_epsilon", o.rms_norm_eps);
  w.AddFloat32(k + "rope.freq_base", o.rope_theta);
  if (o.rope_scaling_factor > 0) {
    w.AddString(k + "rope.scaling.type", "linear");
    w.AddFloat32(k + "rope.scaling.factor", o.rope_scaling_factor);
  }

  if (vocab_gguf.has_value()) {
    for (const auto& [key, value] : vocab_gguf->metadata()) {
      if (!absl::StartsWith(key, "tokenizer.")) continue;
      const bool templates_given = !o.chat_template.empty() || !o.named_chat_templates.empty();
      if (templates_given && absl::StartsWith(key, "tokenizer.chat_template")) continue;
      if (key == "tokenizer.ggml.tokens" && !o.rename_tokens.empty()) {
        std::vector<std::string> pieces;
        pieces.reserve(value.array_size());
        for (uint64_t i = 0; i < value.array_size(); ++i) {
          absl::StatusOr<absl::string_view> piece = value.ArrayString(i);
          if (!piece.ok()) return piece.status();
          pieces.emplace_back(*piece);
        }
        for (const auto& [id, piece] : o.rename_tokens) {
          if (id < 0 || static_cast<uint64_t>(id) >= pieces.size()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "rename_tokens: token ", id, " is outside ", o.vocab_from, "'s ", pieces.size(),
                " tokens"));
          }
          pieces[id] = piece;
        }
        w.AddStringArray(key, pieces);
        continue;
      }
      if (absl::Status s = w.AddValue(key, value); !s.ok()) return s;
    }
  }
  const Vocab vocab = MakeRandomModelVocab(vocab_gguf.has_value() ? kMinRandomVocab : o.vocab_size);
  std::vector<int32_t> types;
  for (TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
  if (!vocab_gguf.has_value()) {
    w.AddString("tokenizer.ggml.model", "llama");
    w.AddStringArray("tokenizer.ggml.tokens", vocab.pieces);
    w.AddFloat32Array("tokenizer.ggml.scores", vocab.scores);
    w.AddInt32Array("tokenizer.ggml.token_type", types);
    w.AddUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
    w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
    w.AddUint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
    w.AddBool("tokenizer.ggml.add_bos_token", vocab.add_bos);
    w.AddBool("tokenizer.ggml.add_eos_token", false);
  }
  if (!o.chat_template.empty()) w.AddString("tokenizer.chat_template", o.chat_template);
  for (const auto& [name, source] : o.named_chat_templates) {
    w.AddString("tokenizer.chat_template." + name, source);
  }

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> buf;
  auto fill = [&](int64_t n, float mean, float std) {
    buf.resize(static_cast<size_t>(n));
    for (float& x : buf) x = mean + (std > 0 ? std * normal(rng) : 0.0f);
  };
  const WeightFormat& format = FormatOf(o.dtype);
  std::vector<uint8_t> blocks;
  // A matrix {rows, cols}, or a stack of `count` of them {count, rows, cols} (experts).
  auto stacked = [&](const std::string& name, int64_t count, int64_t rows, int64_t cols,
                     float std) {
    const std::vector<int64_t> shape = count > 0 ? std::vector<int64_t>{count, rows, cols}
                                                 : std::vector<int64_t>{rows, cols};
    const int64_t values = std::max<int64_t>(count, 1) * rows * cols;
    if (o.dtype == DType::kF32 || o.dtype == DType::kF16 || o.dtype == DType::kBF16 ||
        o.dtype == DType::kQ8_0) {
      fill(values, 0.0f, std);
      w.AddTensorF32(name, o.dtype, shape, buf);
      return;
    }
    // Other block types: random blocks (Folio has no quantizer for them).
    const int64_t n = values / format.block_values;
    blocks.resize(static_cast<size_t>(n * format.block_bytes));
    FillRandomBlocks(format, n, std, rng(), blocks.data());
    w.AddTensorBytes(name, o.dtype, shape, blocks);
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float std) {
    stacked(name, 0, rows, cols, std);
  };
  auto vec = [&](const std::string& name, int64_t n, float mean, float std) {
    fill(n, mean, std);
    w.AddTensorF32(name, DType::kF32, {n}, buf);
  };
  const float emb_std = o.embedding_std > 0 ? o.embedding_std : o.weight_std;
  const int64_t q_dim = o.num_heads * head_dim, kv_dim = o.num_kv_heads * head_dim;
  matrix("token_embd.weight", o.vocab_size, o.dim, emb_std);
  vec("output_norm.weight", o.dim, 1.0f, 0.0f);
  const bool gemma = o.architecture == "gemma2" || o.architecture == "gemma3";
  if (!o.tied_embeddings && o.architecture != "gemma2") {
    matrix("output.weight", o.vocab_size, o.dim, emb_std);
  }
  if (o.rope_freqs) {
    // Llama 3.1's shape: factor 1 for the fast pairs, rising smoothly to 8 for the slow.
    const int64_t pairs = head_dim / 2;
    buf.resize(static_cast<size_t>(pairs));
    for (int64_t i = 0; i < pairs; ++i) {
      const float t = pairs > 1 ? static_cast<float>(i) / (pairs - 1) : 0.0f;
      buf[i] = 1.0f + 7.0f * t * t * (3.0f - 2.0f * t);
    }
    w.AddTensorF32("rope_freqs.weight", DType::kF32, {pairs}, buf);
  }
  const bool phi3 = o.architecture == "phi3";
  if (o.longrope_original_context > 0) {
    // Phi-3.5's shape: factors rising smoothly over the pairs, the long ones further.
    const int64_t pairs = head_dim / 2;
    for (const auto& [name, top] : {std::pair{"rope_factors_long.weight", 30.0f},
                                    std::pair{"rope_factors_short.weight", 1.5f}}) {
      buf.resize(static_cast<size_t>(pairs));
      for (int64_t i = 0; i < pairs; ++i) {
        const float t = pairs > 1 ? static_cast<float>(i) / (pairs - 1) : 0.0f;
        buf[i] = 1.0f + (top - 1.0f) * t * t;
      }
      w.AddTensorF32(name, DType::kF32, {pairs}, buf);
    }
  }
  for (int32_t l = 0; l < o.num_layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    vec(p + "attn_norm.weight", o.dim, 1.0f, 0.0f);
    if (phi3) {
      matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, o.dim, o.weight_std);
    } else {
      matrix(p + "attn_q.weight", q_dim, o.dim, o.weight_std);
      matrix(p + "attn_k.weight", kv_dim, o.dim, o.weight_std);
      matrix(p + "attn_v.weight", kv_dim, o.dim, o.weight_std);
    }
    if (o.architecture == "qwen2") {
      vec(p + "attn_q.bias", q_dim, 0.0f, o.weight_std);
      vec(p + "attn_k.bias", kv_dim, 0.0f, o.weight_std);
      vec(p + "attn_v.bias", kv_dim, 0.0f, o.weight_std);
    }
    if (o.architecture == "qwen3" || o.architecture == "qwen3moe" ||
        o.architecture == "gemma3") {
      vec(p + "attn_q_norm.weight", head_dim, 1.0f, 0.1f);
      vec(p + "attn_k_norm.weight", head_dim, 1.0f, 0.1f);
    }
    matrix(p + "attn_output.weight", o.dim, q_dim, o.weight_std);
    if (gemma) vec(p + "post_attention_norm.weight", o.dim, 1.0f, 0.1f);
    vec(p + "ffn_norm.weight", o.dim, 1.0f, 0.0f);
    if (gemma) vec(p + "post_ffw_norm.weight", o.dim, 1.0f, 0.1f);
    if (o.num_experts > 0) {
      // The router stays f32, as llama.cpp's converter and quantizer keep it; its spread
      // (router_std) decides how peaked the routing is.
      fill(int64_t{o.num_experts} * o.dim, 0.0f, o.router_std);
      w.AddTensorF32(p + "ffn_gate_inp.weight", DType::kF32, {o.num_experts, o.dim}, buf);
      stacked(p + "ffn_gate_exps.weight", o.num_experts, expert_hidden, o.dim, o.weight_std);
      stacked(p + "ffn_down_exps.weight", o.num_experts, o.dim, expert_hidden, o.weight_std);
      stacked(p + "ffn_up_exps.weight", o.num_experts, expert_hidden, o.dim, o.weight_std);
      continue;
    }
    if (phi3) {
      matrix(p + "ffn_down.weight", o.dim, o.hidden_dim, o.weight_std);
      matrix(p + "ffn_up.weight", 2 * o.hidden_dim, o.dim, o.weight_std);
      continue;
    }
    matrix(p + "ffn_gate.weight", o.hidden_dim, o.dim, o.weight_std);
    matrix(p + "ffn_down.weight", o.dim, o.hidden_dim, o.weight_std);
    matrix(p + "ffn_up.weight", o.hidden_dim, o.dim, o.weight_std);
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
