#include "services/worker/model/hf_model.h"

#include <sys/stat.h>

#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/hf_checkpoint.h"
#include "services/worker/model/hf_config.h"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/mapped_weights.h"

namespace folio::worker {
namespace {

#define HFM_ASSIGN_OR_RETURN_IMPL(var, tmp, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  var = *std::move(tmp)
#define HFM_CONCAT_INNER(a, b) a##b
#define HFM_CONCAT(a, b) HFM_CONCAT_INNER(a, b)
#define HFM_ASSIGN_OR_RETURN(var, expr) \
  HFM_ASSIGN_OR_RETURN_IMPL(var, HFM_CONCAT(hfm_status_or_, __LINE__), expr)

// Mapped shards plus the buffers computed at load time (Llama 3.1's RoPE factors).
class HfModelWeights : public MappedModelWeights {
 public:
  using MappedModelWeights::MappedModelWeights;
  std::vector<float> rope_freqs_buffer;
};

// Looks up tensors by name, checking shape and dtype, and remembers which were used.
class TensorReader {
 public:
  TensorReader(const HfWeightFiles& files, DType torch_dtype, std::string config_path)
      : files_(files), torch_dtype_(torch_dtype), config_path_(std::move(config_path)) {}

  bool Has(const std::string& name) const { return files_.Find(name) != nullptr; }

  absl::StatusOr<TensorView> Get(const std::string& name, const std::vector<int64_t>& shape) {
    const HfWeightFiles::Tensor* t = files_.Find(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "missing tensor '", name, "' (in none of ", absl::StrJoin(files_.paths(), ", "), ")"));
    }
    used_.insert(name);
    if (t->tensor->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          *t->file, ": tensor '", name, "' has shape [", absl::StrJoin(t->tensor->shape, ", "),
          "], but ", config_path_, " implies [", absl::StrJoin(shape, ", "), "]"));
    }
    if (t->tensor->dtype != torch_dtype_ && t->tensor->dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          *t->file, ": tensor '", name, "' is ", SafetensorsDTypeName(t->tensor->dtype),
          ", which ", config_path_, " (key 'torch_dtype': ", SafetensorsDTypeName(torch_dtype_),
          ") does not allow (", SafetensorsDTypeName(torch_dtype_), " or F32)"));
    }
    TensorView v;
    v.dtype = t->tensor->dtype;
    v.data = t->tensor->data;
    v.shape = shape;
    return v;
  }

  // Refuses a tensor nothing read, but for the rotary buffers transformers derives.
  absl::Status CheckAllUsed(const char* arch) const {
    for (const auto& [name, t] : files_.tensors()) {
      if (used_.contains(name) || absl::EndsWith(name, "rotary_emb.inv_freq")) continue;
      return absl::UnimplementedError(absl::StrCat(*t.file, ": tensor '", name,
                                                   "' is not used by architecture '", arch,
                                                   "' (Folio cannot serve it as intended)"));
    }
    return absl::OkStatus();
  }

 private:
  const HfWeightFiles& files_;
  const DType torch_dtype_;
  const std::string config_path_;
  std::set<std::string, std::less<>> used_;
};

}  // namespace

bool IsHfCheckpointDir(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  return ::stat(absl::StrCat(path, "/config.json").c_str(), &st) == 0;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadHfModel(const std::string& dir) {
  const std::string config_path = absl::StrCat(dir, "/config.json");
  HFM_ASSIGN_OR_RETURN(std::string config_text, ReadTextFile(config_path, int64_t{16} << 20));
  HFM_ASSIGN_OR_RETURN(HfConfig hf, ParseHfConfig(config_text, config_path));
  HFM_ASSIGN_OR_RETURN(Vocab vocab, LoadHfVocab(dir));
  HFM_ASSIGN_OR_RETURN(HfWeightFiles files, HfWeightFiles::Open(dir));
  std::vector<std::unique_ptr<MappedFile>> mappings = files.Release();
  // The files stay mapped (owned by the weights) while `files` still indexes them.
  auto weights = std::make_unique<HfModelWeights>(std::move(mappings.front()));
  for (size_t i = 1; i < mappings.size(); ++i) weights->AddFile(std::move(mappings[i]));

  ModelConfig& c = weights->config;
  c = hf.config;
  c.stored_type = SafetensorsDTypeName(hf.torch_dtype);
  if (absl::Status s = PadVocab(c.vocab_size, absl::StrCat(dir, "/tokenizer.json"), &vocab);
      !s.ok()) {
    return s;
  }
  weights->vocab = std::move(vocab);

  TensorReader r(files, hf.torch_dtype, config_path);
  const int64_t dim = c.dim, hidden = c.hidden_dim, vocab_size = c.vocab_size;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  HFM_ASSIGN_OR_RETURN(weights->tok_embeddings, r.Get("model.embed_tokens.weight", {vocab_size, dim}));
  if (c.tied_embeddings) {
    weights->lm_head = weights->tok_embeddings;
    // transformers ties lm_head to the embeddings; a stored copy is the same values.
    if (r.Has("lm_head.weight")) {
      HFM_ASSIGN_OR_RETURN(TensorView unused, r.Get("lm_head.weight", {vocab_size, dim}));
      (void)unused;
    }
  } else {
    HFM_ASSIGN_OR_RETURN(weights->lm_head, r.Get("lm_head.weight", {vocab_size, dim}));
  }
  HFM_ASSIGN_OR_RETURN(weights->final_norm, r.Get("model.norm.weight", {dim}));
  if (!hf.rope_freqs.empty()) {
    weights->rope_freqs_buffer = std::move(hf.rope_freqs);
    weights->rope_freqs.dtype = DType::kF32;
    weights->rope_freqs.data = weights->rope_freqs_buffer.data();
    weights->rope_freqs.shape = {static_cast<int64_t>(weights->rope_freqs_buffer.size())};
  }
  const Architecture& arch = *hf.arch;
  const std::string p0 = "model.layers.0.self_attn.";
  c.qkv_bias = arch.qkv_bias == TensorPresence::kRequired ||
               (arch.qkv_bias == TensorPresence::kOptional && r.Has(p0 + "q_proj.bias"));
  c.qk_norm = arch.qk_norm == TensorPresence::kRequired;
  weights->layers.assign(static_cast<size_t>(c.num_layers), LayerWeights{});
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = weights->layers[l];
    const std::string p = absl::StrCat("model.layers.", l, ".");
    HFM_ASSIGN_OR_RETURN(lw.attn_norm, r.Get(p + "input_layernorm.weight", {dim}));
    if (arch.phi3) {  // Q/K/V fused in qkv_proj
      TensorView qkv;
      HFM_ASSIGN_OR_RETURN(qkv, r.Get(p + "self_attn.qkv_proj.weight", {q_dim + 2 * kv_dim, dim}));
      lw.wq = RowsOf(qkv, 0, q_dim);
      lw.wk = RowsOf(qkv, q_dim, kv_dim);
      lw.wv = RowsOf(qkv, q_dim + kv_dim, kv_dim);
    } else {
      HFM_ASSIGN_OR_RETURN(lw.wq, r.Get(p + "self_attn.q_proj.weight", {q_dim, dim}));
      HFM_ASSIGN_OR_RETURN(lw.wk, r.Get(p + "self_attn.k_proj.weight", {kv_dim, dim}));
      HFM_ASSIGN_OR_RETURN(lw.wv, r.Get(p + "self_attn.v_proj.weight", {kv_dim, dim}));
    }
    HFM_ASSIGN_OR_RETURN(lw.wo, r.Get(p + "self_attn.o_proj.weight", {dim, q_dim}));
    if (c.post_norms) {  // Gemma: post_attention_layernorm is the attention's post-norm
      HFM_ASSIGN_OR_RETURN(lw.post_attn_norm,
                           r.Get(p + "post_attention_layernorm.weight", {dim}));
      HFM_ASSIGN_OR_RETURN(lw.ffn_norm, r.Get(p + "pre_feedforward_layernorm.weight", {dim}));
      HFM_ASSIGN_OR_RETURN(lw.post_ffn_norm,
                           r.Get(p + "post_feedforward_layernorm.weight", {dim}));
    } else {
      HFM_ASSIGN_OR_RETURN(lw.ffn_norm, r.Get(p + "post_attention_layernorm.weight", {dim}));
    }
    if (c.moe()) {
      // Qwen3-MoE: mlp.gate (the router) and mlp.experts.E.{gate,up,down}_proj;
      // Mixtral: block_sparse_moe.gate and block_sparse_moe.experts.E.{w1,w3,w2}.
      const bool mixtral = r.Has(p + "block_sparse_moe.gate.weight");
      const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
      const int64_t eh = c.expert_hidden_dim;
      HFM_ASSIGN_OR_RETURN(lw.router, r.Get(moe + "gate.weight", {c.num_experts, dim}));
      lw.experts.resize(static_cast<size_t>(c.num_experts));
      for (int32_t e = 0; e < c.num_experts; ++e) {
        const std::string x = absl::StrCat(moe, "experts.", e, ".");
        LayerWeights::Expert& ex = lw.experts[e];
        HFM_ASSIGN_OR_RETURN(ex.w_gate, r.Get(x + (mixtral ? "w1" : "gate_proj") + ".weight",
                                              {eh, dim}));
        HFM_ASSIGN_OR_RETURN(ex.w_up, r.Get(x + (mixtral ? "w3" : "up_proj") + ".weight",
                                            {eh, dim}));
        HFM_ASSIGN_OR_RETURN(ex.w_down, r.Get(x + (mixtral ? "w2" : "down_proj") + ".weight",
                                              {dim, eh}));
      }
    } else if (arch.phi3) {  // gate and up fused in gate_up_proj, gate rows first
      TensorView gate_up;
      HFM_ASSIGN_OR_RETURN(gate_up, r.Get(p + "mlp.gate_up_proj.weight", {2 * hidden, dim}));
      lw.w_gate = RowsOf(gate_up, 0, hidden);
      lw.w_up = RowsOf(gate_up, hidden, hidden);
      HFM_ASSIGN_OR_RETURN(lw.w_down, r.Get(p + "mlp.down_proj.weight", {dim, hidden}));
    } else {
      HFM_ASSIGN_OR_RETURN(lw.w_gate, r.Get(p + "mlp.gate_proj.weight", {hidden, dim}));
      HFM_ASSIGN_OR_RETURN(lw.w_up, r.Get(p + "mlp.up_proj.weight", {hidden, dim}));
      HFM_ASSIGN_OR_RETURN(lw.w_down, r.Get(p + "mlp.down_proj.weight", {dim, hidden}));
    }
    if (c.qkv_bias) {
      HFM_ASSIGN_OR_RETURN(lw.bq, r.Get(p + "self_attn.q_proj.bias", {q_dim}));
      HFM_ASSIGN_OR_RETURN(lw.bk, r.Get(p + "self_attn.k_proj.bias", {kv_dim}));
      HFM_ASSIGN_OR_RETURN(lw.bv, r.Get(p + "self_attn.v_proj.bias", {kv_dim}));
    }
    if (c.qk_norm) {
      HFM_ASSIGN_OR_RETURN(lw.q_norm, r.Get(p + "self_attn.q_norm.weight", {c.head_dim}));
      HFM_ASSIGN_OR_RETURN(lw.k_norm, r.Get(p + "self_attn.k_norm.weight", {c.head_dim}));
    }
  }
  if (absl::Status s = r.CheckAllUsed(arch.name); !s.ok()) return s;
  LOG(INFO) << dir << ": Hugging Face checkpoint, " << c.name << " (" << c.architecture << "), "
            << c.num_layers << " layers, dim " << c.dim << ", " << files.tensors().size()
            << " tensors (" << c.stored_type << ") in " << files.paths().size() << " file(s), "
            << (weights->file_bytes() >> 20) << " MiB mapped, weights kept as stored";
  return std::unique_ptr<ModelWeights>(std::move(weights));
}

}  // namespace folio::worker
