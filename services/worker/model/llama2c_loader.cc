#include "services/worker/model/llama2c_loader.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/llama2c_vocab.h"
#include "services/worker/model/mapped_file.h"
#include "services/worker/model/mapped_weights.h"

namespace folio::worker {
namespace {

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::Status CheckHeader(const Header& h, absl::string_view name) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": not a llama2.c checkpoint: ", what, " (header dim=", h.dim,
        " hidden_dim=", h.hidden_dim, " n_layers=", h.n_layers, " n_heads=", h.n_heads,
        " n_kv_heads=", h.n_kv_heads, " vocab_size=", h.vocab_size,
        " seq_len=", h.seq_len, ")"));
  };
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 ||
      h.n_kv_heads <= 0 || h.seq_len <= 0 || h.vocab_size == 0 ||
      h.vocab_size == INT32_MIN) {
    return bad("sizes must be positive");
  }
  if (h.dim % h.n_heads != 0) return bad("dim is not a multiple of n_heads");
  if ((h.dim / h.n_heads) % 2 != 0) return bad("head_dim is odd (RoPE needs pairs)");
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0) {
    return bad("n_heads is not a multiple of n_kv_heads");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseLlama2cCheckpoint(absl::Span<const uint8_t> bytes, absl::string_view name,
                                    ModelWeights* weights) {
  if (bytes.size() < static_cast<size_t>(kLlama2cHeaderBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": file has ", bytes.size(), " bytes, too short for a llama2.c header (",
        kLlama2cHeaderBytes, " bytes)"));
  }
  Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (absl::Status s = CheckHeader(h, name); !s.ok()) return s;

  const bool shared_classifier = h.vocab_size > 0;
  const int64_t vocab = shared_classifier ? h.vocab_size : -static_cast<int64_t>(h.vocab_size);
  const int64_t dim = h.dim, hidden = h.hidden_dim, layers = h.n_layers;
  const int64_t head_dim = dim / h.n_heads;
  const int64_t q_dim = h.n_heads * head_dim;
  const int64_t kv_dim = h.n_kv_heads * head_dim;

  // Count in 128 bits: the header is untrusted and the products can overflow int64.
  using u128 = unsigned __int128;
  const u128 floats = u128(vocab) * dim + u128(layers) * dim * 2 +
                      u128(layers) * dim * (q_dim * 2 + kv_dim * 2) +
                      u128(layers) * dim * hidden * 3 + u128(dim) +
                      u128(h.seq_len) * head_dim + (shared_classifier ? 0 : u128(vocab) * dim);
  const u128 expected = u128(kLlama2cHeaderBytes) + floats * 4;
  if (expected != bytes.size()) {
    const std::string expected_str =
        expected > u128(INT64_MAX) ? std::string("more than 2^63")
                                   : absl::StrCat(static_cast<int64_t>(expected));
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": llama2.c checkpoint size mismatch: header (dim=", h.dim,
        " hidden_dim=", h.hidden_dim, " n_layers=", h.n_layers, " n_heads=", h.n_heads,
        " n_kv_heads=", h.n_kv_heads, " vocab_size=", h.vocab_size, " seq_len=", h.seq_len,
        ") implies ", expected_str, " bytes, file has ", bytes.size()));
  }

  ModelConfig& c = weights->config;
  c.architecture = "llama";
  c.stored_type = "F32";
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = static_cast<int32_t>(head_dim);
  c.vocab_size = static_cast<int32_t>(vocab);
  c.max_seq_len = h.seq_len;
  c.rope_theta = 10000.0f;  // run.c hard-codes both
  c.rms_norm_eps = 1e-5f;
  c.tied_embeddings = shared_classifier;

  // Walks the tensors in file order; every size was validated by the total above.
  const float* p = reinterpret_cast<const float*>(bytes.data() + kLlama2cHeaderBytes);
  auto take = [&p](std::vector<int64_t> shape) {
    TensorView v;
    v.dtype = DType::kF32;
    v.data = p;
    v.shape = std::move(shape);
    p += v.num_elements();
    return v;
  };
  // A stacked tensor [L, rows, cols] becomes L views of [rows, cols] (or [cols]).
  auto take_stacked = [&](std::vector<int64_t> per_layer, TensorView LayerWeights::*field) {
    for (int64_t l = 0; l < layers; ++l) weights->layers[l].*field = take(per_layer);
  };

  weights->layers.assign(static_cast<size_t>(layers), LayerWeights{});
  weights->tok_embeddings = take({vocab, dim});
  take_stacked({dim}, &LayerWeights::attn_norm);
  take_stacked({q_dim, dim}, &LayerWeights::wq);
  take_stacked({kv_dim, dim}, &LayerWeights::wk);
  take_stacked({kv_dim, dim}, &LayerWeights::wv);
  take_stacked({dim, q_dim}, &LayerWeights::wo);
  take_stacked({dim}, &LayerWeights::ffn_norm);
  take_stacked({hidden, dim}, &LayerWeights::w_gate);
  take_stacked({dim, hidden}, &LayerWeights::w_down);
  take_stacked({hidden, dim}, &LayerWeights::w_up);
  weights->final_norm = take({dim});
  take({h.seq_len, head_dim / 2});  // freq_cis_real: unused, RoPE is computed
  take({h.seq_len, head_dim / 2});  // freq_cis_imag
  weights->lm_head = shared_classifier ? weights->tok_embeddings : take({vocab, dim});
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindLlama2cTokenizer(const std::string& checkpoint_path,
                                                 int32_t vocab_size) {
  const std::filesystem::path dir = std::filesystem::path(checkpoint_path).parent_path();
  const std::string by_size = (dir / absl::StrCat("tok", vocab_size, ".bin")).string();
  if (IsRegularFile(by_size)) return by_size;
  const std::string generic = (dir / "tokenizer.bin").string();
  if (IsRegularFile(generic)) return generic;
  return absl::NotFoundError(absl::StrCat(checkpoint_path,
                                          ": no llama2.c tokenizer beside the checkpoint "
                                          "(looked for ",
                                          by_size, " and ", generic, ")"));
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadLlama2cModel(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const absl::Span<const uint8_t> bytes = (*file)->bytes();
  auto weights = std::make_unique<MappedModelWeights>(*std::move(file));
  if (absl::Status s = ParseLlama2cCheckpoint(bytes, path, weights.get()); !s.ok()) return s;
  weights->config.name = std::filesystem::path(path).stem().string();

  absl::StatusOr<std::string> tok_path = FindLlama2cTokenizer(path, weights->config.vocab_size);
  if (!tok_path.ok()) return tok_path.status();
  absl::StatusOr<Vocab> vocab = LoadLlama2cVocab(*tok_path, weights->config.vocab_size);
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(),
                        absl::StrCat(path, ": loading tokenizer: ", vocab.status().message()));
  }
  weights->vocab = *std::move(vocab);
  return std::unique_ptr<ModelWeights>(std::move(weights));
}

}  // namespace folio::worker
