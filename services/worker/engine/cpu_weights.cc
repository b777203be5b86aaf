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

// Appends tensor t as f32.
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

}  // namespace

absl::StatusOr<CpuWeights> CpuWeights::Create(const ModelWeights& weights) {
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

  CpuWeights out;
  out.config = c;
  Append(weights.tok_embeddings, &out.tok_embeddings);
  Append(weights.final_norm, &out.final_norm);
  if (!c.tied_embeddings) Append(weights.lm_head, &out.lm_head);
  out.layers.resize(c.num_layers);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layers[l];
    CpuLayerWeights& o = out.layers[l];
    Append(w.attn_norm, &o.attn_norm);
    Append(w.wq, &o.wqkv);
    Append(w.wk, &o.wqkv);
    Append(w.wv, &o.wqkv);
    Append(w.wo, &o.wo);
    Append(w.ffn_norm, &o.ffn_norm);
    Append(w.w_gate, &o.w_gate_up);
    Append(w.w_up, &o.w_gate_up);
    Append(w.w_down, &o.w_down);
  }
  return out;
}

}  // namespace folio::worker
