#include "services/worker/cuda/cuda_model_runner.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "services/worker/cuda/cuda_status.h"
#include "services/worker/cuda/device_buffer.h"
#include "services/worker/engine/cpu_weights.h"
#include "services/worker/engine/logits_processor.h"
#include "services/worker/engine/sampler.h"
#include "services/worker/engine/step_validation.h"

namespace folio::worker::cuda {
namespace {

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Logits columns each vocab-parallel rank sends: its slice padded to the largest one.
int64_t LogitChunk(int64_t vocab, int32_t tp) { return (vocab + tp - 1) / tp; }

// Allocates `bytes` into b and adds them to *total.
absl::Status AllocateCounted(DeviceBuffer& b, int64_t bytes, const char* what, int64_t* total) {
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(bytes, what);
  if (!buf.ok()) return buf.status();
  b = *std::move(buf);
  *total += bytes;
  return absl::OkStatus();
}

// A sequence whose output is the greedy token alone: the device's argmax answers it and
// its logits never leave the device. Not one whose row the logits transform changes: the
// host sampler transforms a copy of it.
bool GreedyOnDevice(const SequenceStep& seq) {
  return (seq.sampling.temperature == 0.0f || seq.sampling.top_k == 1) &&
         seq.num_logprobs == 0 && seq.num_candidates == 0 && !seq.return_logits &&
         !NeedsLogitsTransform(seq.sampling, seq.history);
}

}  // namespace

int CudaDeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = CudaStatus(err, "cudaGetDeviceCount").ToString();
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "the CUDA runtime sees no device";
  return n;
}

struct LayerBuffers {
  DeviceBuffer attn_norm;  // f32 [dim]
  DeviceBuffer wqkv;       // compute dtype [q_dim + 2 kv_dim, dim]
  DeviceBuffer wo;         // [dim, q_dim]
  DeviceBuffer ffn_norm;   // f32 [dim]
  DeviceBuffer w_gate_up;  // [2 hidden, dim]
  DeviceBuffer w_down;     // [dim, hidden]
};

struct CudaModelRunner::Impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  Sampler sampler;

  // Weights.
  DeviceBuffer tok_embeddings;  // compute dtype [vocab, dim]
  std::vector<LayerBuffers> layers;
  DeviceBuffer final_norm;      // f32 [dim]
  DeviceBuffer lm_head;         // compute dtype [vocab, dim]; empty when tied

  // Activations, sized for the largest step.
  DeviceBuffer x, xb, qkv, attn, attn_in, gate_up, hidden, logits, workspace;
  // Step metadata, uploaded with one copy per step: see Stage().
  DeviceBuffer meta;
  std::vector<char> host_meta;
  // Pinned host memory for the logits and their log-sum-exp (fast device-to-host copies).
  float* host_logits = nullptr;  // [max logit rows, vocab]
  float* host_lse = nullptr;     // [max logit rows]
  int32_t* host_argmax = nullptr;  // [max logit rows]: greedy tokens
  float* host_argmax_logprob = nullptr;  // [max logit rows]: their log-probs
  DeviceBuffer lse, argmax, argmax_logprob;
  // Tensor parallelism: the group, and the LM head's vocab slices (padded to one chunk per
  // rank so every rank sends the same count) before and after the gather to rank 0.
  std::unique_ptr<Communicator> comm;
  DeviceBuffer local_logits, gathered_logits;

  // KV pool: layer l's K at l * layer_bytes * 2, its V at + layer_bytes.
  DeviceBuffer kv;
  int64_t kv_layer_bytes = 0;

  ~Impl() {
    comm.reset();  // may hold the stream
    if (host_logits != nullptr) cudaFreeHost(host_logits);
    if (host_lse != nullptr) cudaFreeHost(host_lse);
    if (host_argmax != nullptr) cudaFreeHost(host_argmax);
    if (host_argmax_logprob != nullptr) cudaFreeHost(host_argmax_logprob);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

CudaModelRunner::CudaModelRunner(const ModelConfig& config, const CudaModelRunnerOptions& options)
    : config_(config), options_(options), impl_(std::make_unique<Impl>()) {}

CudaModelRunner::~CudaModelRunner() {
  if (impl_ != nullptr) {
    cudaSetDevice(options_.device);
    impl_.reset();
  }
}

namespace {

// What this runner implements: the plain Llama-2 form of the `llama` architecture with
// f32/f16/bf16/q8_0 weights (widened on the host for upload). The rest runs on the CPU
// runner until the GPU issue adds it.
absl::Status CheckCudaSupports(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  std::string missing;
  if (c.architecture != "llama") missing = "architecture '" + c.architecture + "'";
  else if (c.moe()) missing = "a mixture of experts";
  else if (c.post_norms || c.gelu_mlp || c.sliding_window > 0 || c.attn_softcap > 0 ||
           c.final_softcap > 0 || c.embedding_scale != 1.0f || c.attention_scale != 0.0f ||
           c.norm_offset != 0.0f)
    missing = "Gemma's layout (post-norms, GeGLU, windows, softcaps)";
  else if (c.qkv_bias) missing = "Q/K/V biases";
  else if (c.qk_norm) missing = "Q/K norms";
  else if (c.rope_style != RopeStyle::kInterleaved) missing = "NEOX RoPE";
  else if (c.rope_freq_factors) missing = "RoPE frequency factors (rope_freqs)";
  else if (c.rope_freq_scale != 1.0f) missing = "linear RoPE scaling";
  else if (c.head_dim * c.num_heads != c.dim) missing = "attention.key_length != dim / heads";
  auto check_type = [&missing](const TensorView& t, const std::string& name) {
    if (!missing.empty() || t.data == nullptr) return;
    using WDType = ::folio::worker::DType;
    if (t.dtype != WDType::kF32 && t.dtype != WDType::kF16 && t.dtype != WDType::kBF16 &&
        t.dtype != WDType::kQ8_0) {
      missing = name + " in " + ::folio::worker::DTypeName(t.dtype);
    }
  };
  check_type(w.tok_embeddings, "token_embd");
  check_type(w.lm_head, "output");
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    for (auto [t, n] : {std::pair{&lw.wq, "attn_q"}, std::pair{&lw.wk, "attn_k"},
                        std::pair{&lw.wv, "attn_v"}, std::pair{&lw.wo, "attn_output"},
                        std::pair{&lw.w_gate, "ffn_gate"}, std::pair{&lw.w_up, "ffn_up"},
                        std::pair{&lw.w_down, "ffn_down"}}) {
      check_type(*t, p + n);
    }
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "the CUDA runner cannot run model \"", c.name, "\" yet: it has ", missing,
      "; the CUDA runner supports the llama architecture without biases, Q/K norms or RoPE "
      "scaling, in f32, f16, bf16 or q8_0 (run it with --device=cpu)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaModelRunner>> CudaModelRunner::Create(
    const ModelWeights& weights, const CudaModelRunnerOptions& options) {
  if (absl::Status s = CheckCudaSupports(weights); !s.ok()) return s;
  std::unique_ptr<CudaModelRunner> r(new CudaModelRunner(weights.config, options));
  if (absl::Status s = r->Initialize(&weights, 0); !s.ok()) return s;
  return r;
}

absl::StatusOr<std::unique_ptr<CudaModelRunner>> CudaModelRunner::CreateRandom(
    const ModelConfig& config, uint64_t seed, const CudaModelRunnerOptions& options) {
  std::unique_ptr<CudaModelRunner> r(new CudaModelRunner(config, options));
  if (absl::Status s = r->Initialize(nullptr, seed); !s.ok()) return s;
  return r;
}

namespace {

// Per-step metadata laid out in one host buffer and one device buffer.
struct MetaLayout {
  int64_t tokens = 0, positions = 0, slots = 0, row_seq = 0, row_context = 0, tables = 0,
          logit_rows = 0, copy_src = 0, copy_dst = 0, bytes = 0;
};

MetaLayout LayoutMeta(int64_t num_tokens, int64_t num_seqs, int64_t table_stride,
                      int64_t num_copies) {
  MetaLayout m;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t start = at;
    at = AlignUp(at + bytes, 256);
    return start;
  };
  m.slots = take(num_tokens * 8);
  m.tokens = take(num_tokens * 4);
  m.positions = take(num_tokens * 4);
  m.row_seq = take(num_tokens * 4);
  m.row_context = take(num_tokens * 4);
  m.tables = take(num_seqs * table_stride * 4);
  m.logit_rows = take(num_seqs * 4);
  m.copy_src = take(num_copies * 4);
  m.copy_dst = take(num_copies * 4);
  m.bytes = at;
  return m;
}

}  // namespace

absl::Status CudaModelRunner::Initialize(const ModelWeights* weights, uint64_t seed) {
  const ModelConfig& c = config_;
  const CudaModelRunnerOptions& o = options_;
  if (o.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be positive, got ", o.block_size));
  }
  if (o.kv_dtype == DType::kF32) {
    return absl::InvalidArgumentError("the CUDA KV cache is f16 or bf16");
  }
  if (o.gpu_memory_utilization <= 0.0 || o.gpu_memory_utilization > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu_memory_utilization must be in (0, 1], got ", o.gpu_memory_utilization));
  }
  if (o.max_num_batched_tokens <= 0 || o.max_num_seqs <= 0) {
    return absl::InvalidArgumentError("max_num_batched_tokens and max_num_seqs must be positive");
  }
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 ||
      c.head_dim <= 0 || c.dim <= 0 || c.num_layers <= 0 || c.vocab_size <= 0 ||
      c.hidden_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported model shape: dim ", c.dim, ", heads ", c.num_heads, ", kv heads ",
        c.num_kv_heads, ", head_dim ", c.head_dim));
  }
  if (!AttentionSupports(c.head_dim, c.num_heads / c.num_kv_heads)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA backend has no attention kernel for head size ", c.head_dim,
        " with ", c.num_heads / c.num_kv_heads,
        " query heads per kv head (compiled: head sizes 8, 16, 64, 128; groups 1, 2, 4, 8)"));
  }
  const TpShard shard = o.shard;
  if (absl::Status s = CheckTpShard(c, shard); !s.ok()) return s;
  if (shard.size > 1 && !o.make_communicator) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor-parallel rank ", shard.rank, " of ", shard.size, " needs a communicator"));
  }
  // The split of cpu_weights.h: whole heads (KV heads divide by the TP degree, and query
  // heads with them), SwiGLU units and vocabulary rows as evenly as whole items allow.
  local_.num_heads = c.num_heads / shard.size;
  local_.num_kv_heads = c.num_kv_heads / shard.size;
  local_.hidden_dim = static_cast<int32_t>(SplitEvenly(c.hidden_dim, shard.size, shard.rank).size());
  local_.vocab = SplitEvenly(c.vocab_size, shard.size, shard.rank);
  std::string why;
  const int devices = CudaDeviceCount(&why);
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device: " + why);
  if (o.device < 0 || o.device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", o.device,
                                                      " does not exist; this machine has ",
                                                      devices));
  }
  FOLIO_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
  cudaDeviceProp prop;
  FOLIO_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, o.device));
  memory_.device_name = prop.name;
  Impl& m = *impl_;
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  FOLIO_CUBLAS_RETURN_IF_ERROR(cublasCreate(&m.cublas));
  FOLIO_CUBLAS_RETURN_IF_ERROR(cublasSetStream(m.cublas, m.stream));
  if (tensor_parallel()) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm = o.make_communicator(m.stream);
    if (!comm.ok()) return comm.status();
    if (*comm == nullptr || (*comm)->rank() != shard.rank || (*comm)->world_size() != shard.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the communicator is not rank ", shard.rank, " of a group of ", shard.size));
    }
    m.comm = *std::move(comm);
  }

  const int64_t dim = c.dim;
  const int64_t q_dim = int64_t{local_.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{local_.num_kv_heads} * c.head_dim;
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  const int64_t hidden = local_.hidden_dim;
  const int64_t vocab = local_.vocab.size();
  const DType wt = o.compute_dtype;
  const int64_t wb = DTypeBytes(wt);

  // Weights.
  int64_t weight_bytes = 0;
  auto alloc = [&weight_bytes](DeviceBuffer& b, int64_t bytes, const char* what) {
    return AllocateCounted(b, bytes, what, &weight_bytes);
  };
  const bool tied = weights != nullptr ? weights->config.tied_embeddings : false;
  if (absl::Status s = alloc(m.tok_embeddings, vocab * dim * wb, "token embeddings"); !s.ok()) return s;
  m.layers.resize(c.num_layers);
  const int64_t before_layers = weight_bytes;
  for (LayerBuffers& l : m.layers) {
    for (auto [buf, bytes, what] :
         {std::tuple{&l.attn_norm, dim * 4, "attn_norm"},
          std::tuple{&l.wqkv, qkv_dim * dim * wb, "wqkv"},
          std::tuple{&l.wo, dim * q_dim * wb, "wo"},
          std::tuple{&l.ffn_norm, dim * 4, "ffn_norm"},
          std::tuple{&l.w_gate_up, 2 * hidden * dim * wb, "w_gate_up"},
          std::tuple{&l.w_down, dim * hidden * wb, "w_down"}}) {
      if (absl::Status s = alloc(*buf, bytes, what); !s.ok()) return s;
    }
  }
  memory_.layer_weight_bytes = weight_bytes - before_layers;
  if (absl::Status s = alloc(m.final_norm, dim * 4, "final_norm"); !s.ok()) return s;
  if (!tied) {
    if (absl::Status s = alloc(m.lm_head, vocab * dim * wb, "lm_head"); !s.ok()) return s;
  }

  if (weights != nullptr) {
    absl::StatusOr<CpuWeights> host = CpuWeights::Create(*weights, shard);
    if (!host.ok()) return host.status();
    if (host->num_heads != local_.num_heads || host->num_kv_heads != local_.num_kv_heads ||
        host->hidden_dim != local_.hidden_dim || host->vocab.begin != local_.vocab.begin ||
        host->vocab.end != local_.vocab.end) {
      return absl::InternalError("the CUDA runner's shard disagrees with CpuWeights' split");
    }
    int64_t largest = 0;
    auto track = [&largest](const std::vector<float>& v) {
      largest = std::max<int64_t>(largest, static_cast<int64_t>(v.size()));
    };
    track(host->tok_embeddings);
    track(host->lm_head);
    for (const CpuLayerWeights& l : host->layers) {
      for (const auto* v : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) track(*v);
    }
    absl::StatusOr<DeviceBuffer> staging = DeviceBuffer::Allocate(largest * 4, "weight upload");
    if (!staging.ok()) return staging.status();
    auto upload = [&](const std::vector<float>& src, DeviceBuffer& dst, DType dtype) -> absl::Status {
      const int64_t n = static_cast<int64_t>(src.size());
      if (n * DTypeBytes(dtype) != dst.bytes()) {
        return absl::InternalError("weight size mismatch while uploading");
      }
      if (dtype == DType::kF32) {
        FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.get(), src.data(), n * 4, cudaMemcpyHostToDevice));
        return absl::OkStatus();
      }
      FOLIO_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(staging->get(), src.data(), n * 4, cudaMemcpyHostToDevice, m.stream));
      LaunchConvert(staging->as<float>(), n, dst.get(), dtype, m.stream);
      FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
      return absl::OkStatus();
    };
    if (absl::Status s = upload(host->tok_embeddings, m.tok_embeddings, wt); !s.ok()) return s;
    for (int32_t i = 0; i < c.num_layers; ++i) {
      const CpuLayerWeights& h = host->layers[i];
      LayerBuffers& d = m.layers[i];
      for (auto [src, dst, dtype] :
           {std::tuple{&h.attn_norm, &d.attn_norm, DType::kF32},
            std::tuple{&h.wqkv, &d.wqkv, wt}, std::tuple{&h.wo, &d.wo, wt},
            std::tuple{&h.ffn_norm, &d.ffn_norm, DType::kF32},
            std::tuple{&h.w_gate_up, &d.w_gate_up, wt}, std::tuple{&h.w_down, &d.w_down, wt}}) {
        if (absl::Status s = upload(*src, *dst, dtype); !s.ok()) return s;
      }
    }
    if (absl::Status s = upload(host->final_norm, m.final_norm, DType::kF32); !s.ok()) return s;
    if (!tied) {
      if (absl::Status s = upload(host->lm_head, m.lm_head, wt); !s.ok()) return s;
    }
  } else {
    uint64_t key = seed;
    auto fill = [&](DeviceBuffer& b, DType dtype, float lo, float hi) {
      LaunchFillUniform(b.get(), b.bytes() / DTypeBytes(dtype), dtype, ++key * 0x9e3779b9ull,
                        lo, hi, m.stream);
    };
    fill(m.tok_embeddings, wt, -0.03f, 0.03f);
    for (LayerBuffers& l : m.layers) {
      fill(l.attn_norm, DType::kF32, 1.0f, 1.0f);
      fill(l.ffn_norm, DType::kF32, 1.0f, 1.0f);
      for (DeviceBuffer* b : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) fill(*b, wt, -0.03f, 0.03f);
    }
    fill(m.final_norm, DType::kF32, 1.0f, 1.0f);
    if (!tied) fill(m.lm_head, wt, -0.03f, 0.03f);
  }
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  if (absl::Status s = LastLaunchStatus("weight conversion"); !s.ok()) return s;
  memory_.weight_bytes = weight_bytes;

  // Activations for the largest step.
  const int64_t T = o.max_num_batched_tokens;
  const int64_t S = std::min<int64_t>(o.max_num_seqs, T);
  int64_t activation_bytes = 0;
  auto act = [&activation_bytes](DeviceBuffer& b, int64_t bytes, const char* what) {
    return AllocateCounted(b, bytes, what, &activation_bytes);
  };
  const int64_t max_context = std::max(c.max_seq_len, 1);
  const int64_t ws_floats =
      PagedAttentionWorkspaceFloats(T, local_.num_heads, c.head_dim, max_context, 0);
  const int64_t max_table = (max_context + o.block_size - 1) / o.block_size;
  const MetaLayout meta = LayoutMeta(T, S, max_table, /*num_copies=*/2 * S);
  for (auto [buf, bytes, what] :
       {std::tuple{&m.x, T * dim * 4, "x"},
        std::tuple{&m.xb, T * dim * wb, "xb"},
        std::tuple{&m.qkv, T * qkv_dim * 4, "qkv"},
        std::tuple{&m.attn, T * q_dim * 4, "attention output"},
        std::tuple{&m.attn_in, wt == DType::kF32 ? int64_t{0} : T * q_dim * wb, "wo input"},
        std::tuple{&m.gate_up, T * 2 * hidden * 4, "gate_up"},
        std::tuple{&m.hidden, T * hidden * wb, "hidden"},
        std::tuple{&m.local_logits,
                   tensor_parallel() ? S * LogitChunk(c.vocab_size, shard.size) * 4 : int64_t{0},
                   "local logits"},
        std::tuple{&m.gathered_logits,
                   tensor_parallel() && shard.rank == 0
                       ? S * LogitChunk(c.vocab_size, shard.size) * 4 * shard.size
                       : int64_t{0},
                   "gathered logits"},
        std::tuple{&m.logits, S * int64_t{c.vocab_size} * 4, "logits"},
        std::tuple{&m.lse, S * 4, "log-sum-exp"},
        std::tuple{&m.argmax, S * 4, "argmax"},
        std::tuple{&m.argmax_logprob, S * 4, "argmax log-prob"},
        std::tuple{&m.workspace, ws_floats * 4, "attention workspace"},
        std::tuple{&m.meta, meta.bytes, "step metadata"}}) {
    if (absl::Status s = act(*buf, bytes, what); !s.ok()) return s;
  }
  memory_.activation_bytes = activation_bytes;
  m.host_meta.resize(meta.bytes);
  FOLIO_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(reinterpret_cast<void**>(&m.host_logits), S * int64_t{c.vocab_size} * 4));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&m.host_lse), S * 4));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&m.host_argmax), S * 4));
  FOLIO_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(reinterpret_cast<void**>(&m.host_argmax_logprob), S * 4));

  // One KV block's bytes: K and V of every layer.
  const int64_t kv_block_bytes =
      2 * int64_t{c.num_layers} * o.block_size * kv_dim * DTypeBytes(o.kv_dtype);

  // Profiling step: T tokens split over S sequences, each needing logits, against a scratch
  // pool just large enough.
  {
    StepInput probe;
    const int64_t per_seq = T / S;
    int32_t next_block = 0;
    for (int64_t s = 0; s < S; ++s) {
      SequenceStep seq;
      seq.seq_id = static_cast<uint64_t>(s);
      const int64_t len = per_seq + (s < T % S ? 1 : 0);
      if (len == 0) continue;
      seq.token_ids.assign(len, 1);
      seq.sampling.temperature = 0.0f;
      const int32_t blocks = static_cast<int32_t>((len + o.block_size - 1) / o.block_size);
      for (int32_t b = 0; b < blocks; ++b) seq.block_table.push_back(next_block++);
      probe.seqs.push_back(std::move(seq));
    }
    absl::StatusOr<DeviceBuffer> scratch = DeviceBuffer::Allocate(next_block * kv_block_bytes,
                                                                  "profiling KV pool");
    if (!scratch.ok()) return scratch.status();
    m.kv = *std::move(scratch);
    num_blocks_ = next_block;
    m.kv_layer_bytes = next_block * kv_block_bytes / (2 * c.num_layers);
    absl::StatusOr<StepOutput> out = Execute(probe);
    if (!out.ok()) {
      return absl::Status(out.status().code(),
                          absl::StrCat("profiling step failed: ", out.status().message()));
    }
    m.kv.Reset();
    num_blocks_ = 0;
  }
  size_t free_bytes = 0, total_bytes = 0;
  FOLIO_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  memory_.total_bytes = static_cast<int64_t>(total_bytes);
  memory_.in_use_after_profile = static_cast<int64_t>(total_bytes - free_bytes);

  int64_t budget = o.kv_cache_bytes;
  if (budget <= 0) {
    budget = static_cast<int64_t>(o.gpu_memory_utilization * static_cast<double>(total_bytes)) -
             memory_.in_use_after_profile;
  }
  int64_t blocks = budget / kv_block_bytes;
  if (o.max_num_blocks > 0) blocks = std::min(blocks, o.max_num_blocks);
  if (blocks <= 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not enough device memory for the KV cache on ", memory_.device_name, ": ",
        total_bytes, " bytes in all, ", memory_.in_use_after_profile,
        " in use after loading the weights (", weight_bytes,
        ") and profiling the largest step; a block needs ", kv_block_bytes,
        " bytes and the budget (gpu_memory_utilization ", o.gpu_memory_utilization,
        ") leaves ", budget));
  }
  absl::StatusOr<DeviceBuffer> pool = DeviceBuffer::Allocate(blocks * kv_block_bytes, "KV cache");
  if (!pool.ok()) return pool.status();
  m.kv = *std::move(pool);
  FOLIO_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m.kv.get(), 0, m.kv.bytes(), m.stream));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  num_blocks_ = blocks;
  m.kv_layer_bytes = blocks * kv_block_bytes / (2 * c.num_layers);
  memory_.kv_cache_bytes = m.kv.bytes();
  memory_.num_blocks = blocks;
  LOG(INFO) << "CUDA backend on " << memory_.device_name << ": weights " << weight_bytes
            << " bytes (" << DTypeName(wt) << "), activations " << activation_bytes
            << " bytes, KV cache " << blocks << " blocks of " << o.block_size << " tokens ("
            << m.kv.bytes() << " bytes, " << DTypeName(o.kv_dtype) << ")";
  return absl::OkStatus();
}

absl::Status CudaModelRunner::Synchronize() {
  FOLIO_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> CudaModelRunner::Execute(const StepInput& step) {
  const ModelConfig& c = config_;
  Impl& m = *impl_;
  StepLimits limits;
  limits.num_blocks = num_blocks_;
  limits.block_size = options_.block_size;
  limits.vocab_size = c.vocab_size;
  limits.max_seq_len = c.max_seq_len;
  if (absl::Status s = ValidateStep(step, limits); !s.ok()) return s;

  int64_t num_tokens = 0;
  int64_t table_stride = 1;
  for (const SequenceStep& seq : step.seqs) {
    num_tokens += static_cast<int64_t>(seq.token_ids.size());
    table_stride = std::max<int64_t>(table_stride, static_cast<int64_t>(seq.block_table.size()));
  }
  const int64_t max_seqs = std::min<int64_t>(options_.max_num_seqs, options_.max_num_batched_tokens);
  if (num_tokens > options_.max_num_batched_tokens ||
      static_cast<int64_t>(step.seqs.size()) > max_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step of ", num_tokens, " tokens in ", step.seqs.size(),
        " sequences exceeds what this CUDA worker was sized for (", options_.max_num_batched_tokens,
        " tokens, ", max_seqs, " sequences)"));
  }
  const int64_t num_copies = static_cast<int64_t>(step.block_copies.size());
  const MetaLayout meta =
      LayoutMeta(num_tokens, static_cast<int64_t>(step.seqs.size()), table_stride, num_copies);
  if (meta.bytes > m.meta.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step metadata of ", meta.bytes, " bytes exceeds the ", m.meta.bytes(),
        " bytes sized at start-up (too many block copies or too long block tables)"));
  }

  // Stage the metadata on the host, then one copy to the device.
  char* h = m.host_meta.data();
  auto* tokens = reinterpret_cast<int32_t*>(h + meta.tokens);
  auto* positions = reinterpret_cast<int32_t*>(h + meta.positions);
  auto* slots = reinterpret_cast<int64_t*>(h + meta.slots);
  auto* row_seq = reinterpret_cast<int32_t*>(h + meta.row_seq);
  auto* row_context = reinterpret_cast<int32_t*>(h + meta.row_context);
  auto* tables = reinterpret_cast<int32_t*>(h + meta.tables);
  auto* logit_rows = reinterpret_cast<int32_t*>(h + meta.logit_rows);
  auto* copy_src = reinterpret_cast<int32_t*>(h + meta.copy_src);
  auto* copy_dst = reinterpret_cast<int32_t*>(h + meta.copy_dst);
  const int32_t bs = options_.block_size;
  int64_t row = 0;
  int32_t num_logit_rows = 0;
  int32_t max_context = 0;
  std::vector<int32_t> seq_logit_row(step.seqs.size(), -1);
  for (size_t s = 0; s < step.seqs.size(); ++s) {
    const SequenceStep& seq = step.seqs[s];
    const int32_t n = static_cast<int32_t>(seq.token_ids.size());
    for (int32_t i = 0; i < n; ++i, ++row) {
      const int32_t pos = seq.start_pos + i;
      tokens[row] = seq.token_ids[i];
      positions[row] = pos;
      slots[row] = static_cast<int64_t>(seq.block_table[pos / bs]) * bs + pos % bs;
      row_seq[row] = static_cast<int32_t>(s);
      row_context[row] = pos + 1;
    }
    max_context = std::max(max_context, seq.start_pos + n);
    std::fill(tables + s * table_stride, tables + (s + 1) * table_stride, 0);
    std::copy(seq.block_table.begin(), seq.block_table.end(), tables + s * table_stride);
    const bool needs_logits = seq.num_samples > 0 || seq.num_logprobs > 0 ||
                              seq.num_candidates > 0 || seq.return_logits;
    if (needs_logits) {
      seq_logit_row[s] = num_logit_rows;
      logit_rows[num_logit_rows++] = static_cast<int32_t>(row - 1);
    }
  }
  for (int64_t i = 0; i < num_copies; ++i) {
    copy_src[i] = step.block_copies[i].src_block;
    copy_dst[i] = step.block_copies[i].dst_block;
  }

  FOLIO_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  cudaStream_t st = m.stream;
  char* d = m.meta.as<char>();
  FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d, h, meta.bytes, cudaMemcpyHostToDevice, st));

  // One block of one layer's K (or V).
  const int64_t block_bytes =
      int64_t{bs} * local_.num_kv_heads * c.head_dim * DTypeBytes(options_.kv_dtype);
  LaunchCopyBlocks(m.kv.get(), 2 * m.kv_layer_bytes, m.kv_layer_bytes, c.num_layers,
                   block_bytes, reinterpret_cast<int32_t*>(d + meta.copy_src),
                   reinterpret_cast<int32_t*>(d + meta.copy_dst), static_cast<int32_t>(num_copies),
                   st);

  const int64_t dim = c.dim;
  const int64_t q_dim = int64_t{local_.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{local_.num_kv_heads} * c.head_dim;
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  const int64_t hidden = local_.hidden_dim;
  const DType wt = options_.compute_dtype;
  const cudaDataType_t ct = CudaType(wt);
  const bool tp = tensor_parallel();
  // Row-parallel projections add partial sums into the residual stream x, which every
  // rank holds whole: rank 0 accumulates its part onto x (beta 1), the others overwrite x
  // with theirs (beta 0), and the all-reduce leaves x + the sum of the parts everywhere.
  const float residual_beta = !tp || options_.shard.rank == 0 ? 1.0f : 0.0f;
  const int32_t T = static_cast<int32_t>(num_tokens);
  float* x = m.x.as<float>();
  float* qkv = m.qkv.as<float>();
  float* attn = m.attn.as<float>();
  void* attn_in = wt == DType::kF32 ? m.attn.get() : m.attn_in.get();

  // y[rows, out] (f32, ldy) = x[rows, in] (compute dtype, ldx) . w[out, in]^T + beta * y
  auto gemm = [&](const void* xin, int64_t ldx, int64_t rows, int64_t in, const void* w,
                  int64_t out, float beta, float* y, int64_t ldy) -> absl::Status {
    if (rows == 0) return absl::OkStatus();
    const float alpha = 1.0f;
    FOLIO_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
        m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
        static_cast<int>(in), &alpha, w, ct, static_cast<int>(in), xin, ct, static_cast<int>(ldx),
        &beta, y, CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  };

  auto all_reduce_x = [&]() -> absl::Status {
    return tp ? m.comm->AllReduceSum(x, int64_t{T} * dim, CommDType::kF32) : absl::OkStatus();
  };
  // Vocab-parallel embedding: tokens of other ranks' rows embed as zeros here, and the
  // all-reduce assembles every row.
  LaunchEmbedTokens(reinterpret_cast<int32_t*>(d + meta.tokens), T, m.tok_embeddings.get(), wt,
                    static_cast<int32_t>(local_.vocab.begin),
                    static_cast<int32_t>(local_.vocab.size()), c.dim, x, st);
  if (absl::Status s = all_reduce_x(); !s.ok()) return s;
  PagedAttentionParams ap;
  ap.q = qkv;
  ap.q_row_stride = qkv_dim;
  ap.out = attn;
  ap.out_row_stride = q_dim;
  ap.num_rows = T;
  ap.num_heads = local_.num_heads;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ap.row_seq = reinterpret_cast<int32_t*>(d + meta.row_seq);
  ap.row_context = reinterpret_cast<int32_t*>(d + meta.row_context);
  ap.block_tables = reinterpret_cast<int32_t*>(d + meta.tables);
  ap.block_table_stride = static_cast<int32_t>(table_stride);
  ap.max_context = max_context;
  ap.workspace = m.workspace.as<float>();
  ap.workspace_floats = m.workspace.bytes() / 4;
  const int32_t* d_positions = reinterpret_cast<int32_t*>(d + meta.positions);
  const int64_t* d_slots = reinterpret_cast<int64_t*>(d + meta.slots);

  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerBuffers& w = m.layers[l];
    KvView kv;
    kv.k = m.kv.as<char>() + 2 * l * m.kv_layer_bytes;
    kv.v = m.kv.as<char>() + (2 * l + 1) * m.kv_layer_bytes;
    kv.dtype = options_.kv_dtype;
    kv.num_blocks = num_blocks_;
    kv.block_size = bs;
    kv.num_kv_heads = local_.num_kv_heads;
    kv.head_dim = c.head_dim;

    LaunchRmsNorm(x, dim, nullptr, T, c.dim, w.attn_norm.as<float>(), c.rms_norm_eps, m.xb.get(),
                  dim, wt, st);
    if (absl::Status s = gemm(m.xb.get(), dim, T, dim, w.wqkv.get(), qkv_dim, 0.0f, qkv, qkv_dim); !s.ok()) return s;
    LaunchRope(qkv, qkv_dim, T, d_positions, local_.num_heads + local_.num_kv_heads, c.head_dim,
               c.rope_theta, st);
    LaunchWriteKv(qkv + q_dim, qkv + q_dim + kv_dim, qkv_dim, d_slots, T, kv, st);
    if (absl::Status s = LaunchPagedAttention(ap, kv, st); !s.ok()) return s;
    if (wt != DType::kF32) LaunchConvert(attn, T * q_dim, attn_in, wt, st);
    if (absl::Status s = gemm(attn_in, q_dim, T, q_dim, w.wo.get(), dim, residual_beta, x, dim); !s.ok()) return s;
    if (absl::Status s = all_reduce_x(); !s.ok()) return s;
    LaunchRmsNorm(x, dim, nullptr, T, c.dim, w.ffn_norm.as<float>(), c.rms_norm_eps, m.xb.get(),
                  dim, wt, st);
    if (absl::Status s = gemm(m.xb.get(), dim, T, dim, w.w_gate_up.get(), 2 * hidden, 0.0f,
                              m.gate_up.as<float>(), 2 * hidden); !s.ok()) return s;
    LaunchSiluAndMul(m.gate_up.as<float>(), T, local_.hidden_dim, m.hidden.get(), wt, st);
    if (absl::Status s = gemm(m.hidden.get(), hidden, T, hidden, w.w_down.get(), dim, residual_beta, x, dim); !s.ok()) return s;
    if (absl::Status s = all_reduce_x(); !s.ok()) return s;
  }

  StepOutput out;
  out.seqs.resize(step.seqs.size());
  for (size_t s = 0; s < step.seqs.size(); ++s) out.seqs[s].seq_id = step.seqs[s].seq_id;
  if (num_logit_rows > 0) {
    LaunchRmsNorm(x, dim, reinterpret_cast<int32_t*>(d + meta.logit_rows), num_logit_rows,
                  c.dim, m.final_norm.as<float>(), c.rms_norm_eps, m.xb.get(), dim, wt, st);
    const void* head = m.lm_head.get() != nullptr ? m.lm_head.get() : m.tok_embeddings.get();
    if (!tp) {
      if (absl::Status s = gemm(m.xb.get(), dim, num_logit_rows, dim, head, c.vocab_size, 0.0f,
                                m.logits.as<float>(), c.vocab_size); !s.ok()) return s;
    } else {
      // Vocab-parallel LM head: this rank's slice of each row, padded to one chunk so
      // every rank sends the same count; rank 0 gathers the chunks and unpads them into
      // whole rows.
      const int32_t tp_size = options_.shard.size;
      const int64_t chunk = LogitChunk(c.vocab_size, tp_size);
      const int64_t local_vocab = local_.vocab.size();
      float* local = m.local_logits.as<float>();
      if (chunk > local_vocab) {
        FOLIO_CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(local + local_vocab, chunk * 4, 0,
                                                     (chunk - local_vocab) * 4, num_logit_rows, st));
      }
      if (absl::Status s = gemm(m.xb.get(), dim, num_logit_rows, dim, head, local_vocab, 0.0f,
                                local, chunk); !s.ok()) return s;
      if (absl::Status s = m.comm->GatherToRoot(local, m.gathered_logits.get(),
                                                num_logit_rows * chunk, CommDType::kF32);
          !s.ok()) {
        return s;
      }
      if (options_.shard.rank == 0) {
        for (int32_t r = 0; r < tp_size; ++r) {
          const ShardRange v = SplitEvenly(c.vocab_size, tp_size, r);
          FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
              m.logits.as<float>() + v.begin, c.vocab_size * 4,
              m.gathered_logits.as<float>() + int64_t{r} * num_logit_rows * chunk, chunk * 4,
              v.size() * 4, num_logit_rows, cudaMemcpyDeviceToDevice, st));
        }
      }
    }
    if (tp && options_.shard.rank != 0) {  // rank 0 samples; the others are done
      FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
      if (absl::Status s = LastLaunchStatus("step kernels"); !s.ok()) return s;
      return out;
    }
    LaunchLogSumExpArgmax(m.logits.as<float>(), num_logit_rows, c.vocab_size,
                          m.lse.as<float>(), m.argmax.as<int32_t>(),
                          m.argmax_logprob.as<float>(), st);
    FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_lse, m.lse.get(),
                                               num_logit_rows * sizeof(float),
                                               cudaMemcpyDeviceToHost, st));
    FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_argmax, m.argmax.get(),
                                               num_logit_rows * sizeof(int32_t),
                                               cudaMemcpyDeviceToHost, st));
    FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_argmax_logprob, m.argmax_logprob.get(),
                                               num_logit_rows * sizeof(float),
                                               cudaMemcpyDeviceToHost, st));
    // Only rows the host sampler must read travel: greedy rows without log-probs,
    // candidates or raw logits are done on the device.
    for (size_t s = 0; s < step.seqs.size(); ++s) {
      if (seq_logit_row[s] < 0 || GreedyOnDevice(step.seqs[s])) continue;
      const int64_t offset = int64_t{seq_logit_row[s]} * c.vocab_size;
      FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_logits + offset, m.logits.as<float>() + offset,
                                                 c.vocab_size * sizeof(float),
                                                 cudaMemcpyDeviceToHost, st));
    }
  }
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(st));
  if (absl::Status s = LastLaunchStatus("step kernels"); !s.ok()) return s;

  for (size_t s = 0; s < step.seqs.size(); ++s) {
    if (seq_logit_row[s] < 0) continue;
    const SequenceStep& seq = step.seqs[s];
    const int32_t r = seq_logit_row[s];
    if (GreedyOnDevice(seq)) {
      SequenceOutput& o = out.seqs[s];
      SampledToken t;
      t.token_id = m.host_argmax[r];
      t.logprob = m.host_argmax_logprob[r];
      for (int32_t i = 0; i < seq.num_samples; ++i) o.samples.push_back(t);
      continue;
    }
    const absl::Span<const float> logits(
        m.host_logits + static_cast<int64_t>(seq_logit_row[s]) * c.vocab_size, c.vocab_size);
    m.sampler.Process(logits, m.host_lse[r], seq, seq.start_pos + static_cast<int64_t>(seq.token_ids.size()),
                      &out.seqs[s]);
  }
  return out;
}

}  // namespace folio::worker::cuda
