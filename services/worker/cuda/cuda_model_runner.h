// CudaModelRunner: the CUDA backend of ModelRunner, on one device. The same step
// protocol, block tables and validation as the CPU backend (cpu_model_runner.h); the
// forward pass runs as kernels (kernels.h) and cuBLAS GEMMs on one stream:
//
//   embed -> for each layer:
//              RMSNorm -> fused QKV GEMM -> RoPE(q, k) -> write K/V into slots
//              -> paged attention (GQA) -> wo GEMM (+ residual, beta = 1)
//              -> RMSNorm -> fused gate/up GEMM -> SiLU-and-multiply -> down GEMM (+ residual)
//         -> final RMSNorm of the rows that need logits -> LM head -> logits to the host
//            -> sampling on the host (the CPU Sampler: the same draws on every backend)
//
// Precision: weights and GEMM inputs in the compute dtype (f32, f16 or bf16); GEMMs
// accumulate and write f32; the residual stream, q and logits are f32; the KV cache is f16
// or bf16.
//
// Memory, at Create: weights are uploaded, activation buffers are allocated for the
// largest step (max_num_batched_tokens rows, max_num_seqs logit rows), and one profiling
// step of that size runs against a scratch KV pool, so cuBLAS's workspaces exist too.
// Then the KV pool takes gpu_memory_utilization of the device's memory minus what the
// device has in use (this process and any other), unless kv_cache_bytes fixes it.
// memory() reports the figures. Steps larger than the profiled shape are refused with
// InvalidArgument rather than allocating during serving.
//
// Tensor parallelism (shard.size > 1), as the CPU runner: the embedding and the LM head
// are split by vocabulary rows, Q/K/V and gate/up by heads and units (column-parallel), wo
// and down by their inputs (row-parallel) and all-reduced into the residual stream; rank 0
// gathers the logits and samples, the other ranks return no samples. Every rank must run
// every step, the profiling step at Create included.
//
// Thread-compatible: one step thread calls Execute; the runner binds its device on every
// call.
#ifndef FOLIO_SERVICES_WORKER_CUDA_CUDA_MODEL_RUNNER_H_
#define FOLIO_SERVICES_WORKER_CUDA_CUDA_MODEL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/cuda/kernels.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/cpu_weights.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/model/weights.h"

namespace folio::worker::cuda {

struct CudaModelRunnerOptions {
  int32_t device = 0;
  int32_t block_size = 16;
  DType compute_dtype = DType::kF16;  // weights and GEMM inputs: kF32, kF16 or kBF16
  DType kv_dtype = DType::kF16;       // kF16 or kBF16
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_bytes = 0;   // > 0: this KV budget instead of the utilization rule
  int64_t max_num_blocks = 0;   // > 0: cap on the pool
  int32_t max_num_batched_tokens = 2048;  // largest step, in new tokens
  int32_t max_num_seqs = 256;             // largest step, in sequences
  // Tensor parallelism: this runner is rank shard.rank of shard.size and holds that rank's
  // slices (the Megatron split of cpu_weights.h: heads, SwiGLU units and vocabulary rows)
  // and only its KV heads. make_communicator builds the group's communicator for device
  // memory on the runner's stream (NcclCommunicator, or a host one behind
  // HostStagedCommunicator); it is required when shard.size > 1 and must give a group of
  // shard.size ranks in which this one is shard.rank.
  TpShard shard;
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(cudaStream_t stream)>
      make_communicator;
};

struct CudaMemoryReport {
  std::string device_name;
  int64_t total_bytes = 0;        // the device's memory
  int64_t weight_bytes = 0;
  int64_t layer_weight_bytes = 0;  // of weight_bytes, in the transformer layers
  int64_t activation_bytes = 0;   // buffers for the largest step
  int64_t in_use_after_profile = 0;  // device-wide, after the profiling step, without KV
  int64_t kv_cache_bytes = 0;
  int64_t num_blocks = 0;
};

class CudaModelRunner final : public ModelRunner {
 public:
  ~CudaModelRunner() override;

  // Uploads `weights` (converted to the compute dtype) and sizes the KV pool (see the
  // file comment). FailedPrecondition when there is no usable device, ResourceExhausted
  // when the weights or one KV block do not fit, InvalidArgument for an unsupported
  // model (head size, GQA group) or bad options.
  static absl::StatusOr<std::unique_ptr<CudaModelRunner>> Create(
      const ModelWeights& weights, const CudaModelRunnerOptions& options);

  // A model of `config` whose weights are made on the device from `seed` (uniform in
  // +-0.03, norms 1): for benchmarks at real model shapes without a file.
  static absl::StatusOr<std::unique_ptr<CudaModelRunner>> CreateRandom(
      const ModelConfig& config, uint64_t seed, const CudaModelRunnerOptions& options);

  absl::StatusOr<StepOutput> Execute(const StepInput& step) override;

  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return options_.block_size; }
  int64_t num_blocks() const override { return num_blocks_; }

  const CudaMemoryReport& memory() const { return memory_; }

  // Waits for the device (benchmarks time whole steps with it).
  absl::Status Synchronize();

  struct Impl;

 private:
  CudaModelRunner(const ModelConfig& config, const CudaModelRunnerOptions& options);
  absl::Status Initialize(const ModelWeights* weights, uint64_t seed);

  // This rank's share of the model (all of it without tensor parallelism).
  struct LocalShape {
    int32_t num_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t hidden_dim = 0;
    ShardRange vocab;
  };

  bool tensor_parallel() const { return options_.shard.size > 1; }

  const ModelConfig config_;
  const CudaModelRunnerOptions options_;
  LocalShape local_;
  std::unique_ptr<Impl> impl_;
  int64_t num_blocks_ = 0;
  CudaMemoryReport memory_;
};

// Number of CUDA devices the runtime sees; 0 when there is none or no driver (the reason
// in *why when given).
int CudaDeviceCount(std::string* why = nullptr);

}  // namespace folio::worker::cuda

#endif  // FOLIO_SERVICES_WORKER_CUDA_CUDA_MODEL_RUNNER_H_
