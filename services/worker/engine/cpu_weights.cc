#include "services/worker/engine/cpu_weights.h"

#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/worker/model/dequant.h"

namespace folio::worker {
namespace {

absl::Status CheckShape(const TensorView& t, std::initializer_list<int64_t> want,
                        const std::string& name) {
  std::vector<int64_t> w(want);
  // A 2-D [n, 1] and a 1-D [n] are the same vector.
  std::vector<int64_t> got = t.shape;
  if (got.size() == 2 && got[1] == 1 && w.size() == 1) got.pop_back();
  if (t.data == nullptr || got != w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, " has shape [", absl::StrJoin(t.shape, ", "), "]",
        t.data == nullptr ? " and no data" : "", "; the model config needs [",
        absl::StrJoin(w, ", "), "]"));
  }
  return absl::OkStatus();
}

// Appends tensor t as f32 (norms: small, replicated on every rank).
void Append(const TensorView& t, std::vector<float>* out) {
  const size_t n = static_cast<size_t>(t.num_elements());
  const size_t old = out->size();
  if (t.dtype == DType::kF32) {
    out->resize(old + n);
    std::memcpy(out->data() + old, t.data, n * sizeof(float));
  } else {
    const std::vector<float> f = ToF32(t);
    out->insert(out->end(), f.begin(), f.end());
  }
}

// Appends rows [r.begin, r.end) of matrix t as f32: a column-parallel slice.
void AppendRows(const TensorView& t, ShardRange r, std::vector<float>* out) {
  const int64_t cols = t.cols();
  const size_t old = out->size();
  out->resize(old + static_cast<size_t>(r.size() * cols));
  float* dst = out->data() + old;
  if (t.dtype == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(t.data) + r.begin * cols,
                static_cast<size_t>(r.size() * cols) * sizeof(float));
    return;
  }
  for (int64_t row = r.begin; row < r.end; ++row) RowToF32(t, row, dst + (row - r.begin) * cols);
}

// Appends columns [c.begin, c.end) of every row of matrix t as f32: a row-parallel slice.
// f32, f16 and bf16 convert only the slice; block types convert each row's whole blocks.
void AppendCols(const TensorView& t, ShardRange c, std::vector<float>* out) {
  const int64_t rows = t.rows();
  const int64_t cols = t.cols();
  const size_t old = out->size();
  out->resize(old + static_cast<size_t>(rows * c.size()));
  float* dst = out->data() + old;
  std::vector<float> row_f32;
  for (int64_t row = 0; row < rows; ++row) {
    float* d = dst + row * c.size();
    const int64_t first = row * cols + c.begin;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(d, static_cast<const float*>(t.data) + first,
                    static_cast<size_t>(c.size()) * sizeof(float));
        break;
      case DType::kF16:
      case DType::kBF16: {
        const auto* src = static_cast<const uint8_t*>(t.data) + 2 * first;
        for (int64_t i = 0; i < c.size(); ++i) {
          uint16_t h;
          std::memcpy(&h, src + 2 * i, 2);
          d[i] = t.dtype == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
        }
        break;
      }
      default:  // block types: whole rows (a slice need not start on a block)
        row_f32.resize(static_cast<size_t>(cols));
        RowToF32(t, row, row_f32.data());
        std::memcpy(d, row_f32.data() + c.begin, static_cast<size_t>(c.size()) * sizeof(float));
        break;
    }
  }
}

int64_t Bytes(const std::vector<float>& v) { return static_cast<int64_t>(v.size() * sizeof(float)); }

}  // namespace

ShardRange SplitEvenly(int64_t n, int32_t size, int32_t rank) {
  return ShardRange{n * rank / size, n * (rank + 1) / size};
}

absl::Status CheckTpShard(const ModelConfig& c, TpShard shard) {
  if (shard.size < 1 || shard.rank < 0 || shard.rank >= shard.size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel rank ", shard.rank,
                                                   " is outside [0, ", shard.size, ")"));
  }
  if (c.num_kv_heads % shard.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model \"", c.name, "\" has ", c.num_kv_heads, " KV heads, which do not divide over ",
        shard.size, " tensor-parallel ranks: Folio splits KV heads across ranks (it does not "
        "replicate them), so the TP degree must divide the KV head count"));
  }
  const int32_t units = c.moe() ? c.expert_hidden_dim : c.hidden_dim;
  if (units < shard.size || c.vocab_size < shard.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model \"", c.name, "\" is too small for ", shard.size,
        " tensor-parallel ranks (hidden units ", units, ", vocab ", c.vocab_size, ")"));
  }
  return absl::OkStatus();
}

int64_t CpuLayerWeights::size_bytes() const {
  return Bytes(attn_norm) + Bytes(wqkv) + Bytes(wo) + Bytes(ffn_norm) + Bytes(w_gate_up) +
         Bytes(w_down);
}

int64_t CpuWeights::layer_bytes() const {
  int64_t n = 0;
  for (const CpuLayerWeights& l : layers) n += l.size_bytes();
  return n;
}

int64_t CpuWeights::size_bytes() const {
  return layer_bytes() + Bytes(tok_embeddings) + Bytes(final_norm) + Bytes(lm_head);
}

absl::StatusOr<CpuWeights> CpuWeights::Create(const ModelWeights& weights, TpShard shard) {
  const ModelConfig& c = weights.config;
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 || c.max_seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config needs positive sizes: dim=", c.dim, " hidden_dim=", c.hidden_dim,
        " layers=", c.num_layers, " heads=", c.num_heads, " kv_heads=", c.num_kv_heads,
        " head_dim=", c.head_dim, " vocab=", c.vocab_size, " max_seq_len=", c.max_seq_len));
  }
  if (c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported head layout: ", c.num_heads, " heads over ", c.num_kv_heads,
        " kv heads, head_dim ", c.head_dim, " (needs a whole GQA ratio and even head_dim)"));
  }
  if (static_cast<int32_t>(weights.layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("model has ", weights.layers.size(),
                                                   " layers; config says ", c.num_layers));
  }
  if (c.moe() || c.post_norms) {
    return absl::UnimplementedError(absl::StrCat(
        "model \"", c.name, "\" (", c.architecture,
        ") has a layout only the CPU runner runs (experts or Gemma's post-norms)"));
  }
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  absl::Status s = CheckShape(weights.tok_embeddings, {c.vocab_size, c.dim}, "tok_embeddings");
  if (s.ok()) s = CheckShape(weights.final_norm, {c.dim}, "final_norm");
  if (s.ok() && !c.tied_embeddings) s = CheckShape(weights.lm_head, {c.vocab_size, c.dim}, "lm_head");
  for (int32_t l = 0; s.ok() && l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layers[l];
    const std::string p = absl::StrCat("layers.", l, ".");
    if (s.ok()) s = CheckShape(w.attn_norm, {c.dim}, p + "attn_norm");
    if (s.ok()) s = CheckShape(w.wq, {q_dim, c.dim}, p + "wq");
    if (s.ok()) s = CheckShape(w.wk, {kv_dim, c.dim}, p + "wk");
    if (s.ok()) s = CheckShape(w.wv, {kv_dim, c.dim}, p + "wv");
    if (s.ok()) s = CheckShape(w.wo, {c.dim, q_dim}, p + "wo");
    if (s.ok()) s = CheckShape(w.ffn_norm, {c.dim}, p + "ffn_norm");
    if (s.ok()) s = CheckShape(w.w_gate, {c.hidden_dim, c.dim}, p + "w_gate");
    if (s.ok()) s = CheckShape(w.w_up, {c.hidden_dim, c.dim}, p + "w_up");
    if (s.ok()) s = CheckShape(w.w_down, {c.dim, c.hidden_dim}, p + "w_down");
  }
  if (!s.ok()) return s;

  if (absl::Status t = CheckTpShard(c, shard); !t.ok()) return t;

  CpuWeights out;
  out.config = c;
  out.shard = shard;
  out.num_heads = c.num_heads / shard.size;
  out.num_kv_heads = c.num_kv_heads / shard.size;
  const ShardRange hidden = SplitEvenly(c.hidden_dim, shard.size, shard.rank);
  out.hidden_dim = static_cast<int32_t>(hidden.size());
  out.vocab = SplitEvenly(c.vocab_size, shard.size, shard.rank);
  const ShardRange q_rows{int64_t{shard.rank} * out.num_heads * c.head_dim,
                          int64_t{shard.rank + 1} * out.num_heads * c.head_dim};
  const ShardRange kv_rows{int64_t{shard.rank} * out.num_kv_heads * c.head_dim,
                           int64_t{shard.rank + 1} * out.num_kv_heads * c.head_dim};

  AppendRows(weights.tok_embeddings, out.vocab, &out.tok_embeddings);
  Append(weights.final_norm, &out.final_norm);
  if (!c.tied_embeddings) AppendRows(weights.lm_head, out.vocab, &out.lm_head);
  out.layers.resize(c.num_layers);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layers[l];
    CpuLayerWeights& o = out.layers[l];
    Append(w.attn_norm, &o.attn_norm);
    AppendRows(w.wq, q_rows, &o.wqkv);
    AppendRows(w.wk, kv_rows, &o.wqkv);
    AppendRows(w.wv, kv_rows, &o.wqkv);
    AppendCols(w.wo, q_rows, &o.wo);
    Append(w.ffn_norm, &o.ffn_norm);
    AppendRows(w.w_gate, hidden, &o.w_gate_up);
    AppendRows(w.w_up, hidden, &o.w_gate_up);
    AppendCols(w.w_down, hidden, &o.w_down);
  }
  return out;
}

}  // namespace folio::worker
