#include "services/worker/backend.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#ifdef FOLIO_HAVE_CUDA
#include "services/worker/cuda/cuda_model_runner.h"
#endif

namespace folio::worker {

bool HaveCudaBackend() {
#ifdef FOLIO_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<RunnerFactory> MakeRunnerFactory(const BackendOptions& backend) {
  if (backend.device == "cpu") return RunnerFactory();
  if (backend.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got \"", backend.device, "\""));
  }
#ifndef FOLIO_HAVE_CUDA
  return absl::FailedPreconditionError(
      "--device=cuda: this folio-worker was built without the CUDA backend (configure with "
      "-DFOLIO_CUDA=ON on a machine with nvcc and NCCL)");
#else
  if (backend.tp_size > 1) {
    return absl::InvalidArgumentError(
        "--device=cuda with --tp_size > 1: tensor parallelism on the CUDA backend is not built "
        "yet; run one CUDA rank per replica");
  }
  if (backend.kv_dtype != kernels::KvDType::kF16) {
    return absl::InvalidArgumentError("--device=cuda keeps the KV cache in f16: use --kv_dtype=f16");
  }
  cuda::CudaModelRunnerOptions options;
  options.device = backend.cuda_device;
  options.kv_dtype = cuda::DType::kF16;
  if (backend.dtype == "f16") {
    options.compute_dtype = cuda::DType::kF16;
  } else if (backend.dtype == "bf16") {
    options.compute_dtype = cuda::DType::kBF16;
  } else if (backend.dtype == "f32") {
    options.compute_dtype = cuda::DType::kF32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be f16, bf16 or f32, got \"", backend.dtype, "\""));
  }
  if (backend.max_num_batched_tokens <= 0 || backend.max_num_seqs <= 0) {
    return absl::InvalidArgumentError("--max_num_batched_tokens and --max_num_seqs must be positive");
  }
  options.max_num_batched_tokens = backend.max_num_batched_tokens;
  options.max_num_seqs = backend.max_num_seqs;
  std::string why;
  const int devices = cuda::CudaDeviceCount(&why);
  if (devices == 0) {
    return absl::FailedPreconditionError(absl::StrCat("--device=cuda: no CUDA device: ", why));
  }
  if (backend.cuda_device < 0 || backend.cuda_device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--cuda_device=", backend.cuda_device, ": this machine has ", devices, " CUDA device(s)"));
  }
  return RunnerFactory([options](const ModelWeights& weights,
                                 const RunnerRequest& request) -> absl::StatusOr<RunnerResources> {
    cuda::CudaModelRunnerOptions o = options;
    o.block_size = request.block_size;
    o.kv_cache_bytes = request.kv_cache_bytes;
    o.max_num_blocks = request.num_blocks;
    absl::StatusOr<std::unique_ptr<cuda::CudaModelRunner>> runner =
        cuda::CudaModelRunner::Create(weights, o);
    if (!runner.ok()) return runner.status();
    RunnerResources r;
    r.kv_cache_bytes = (*runner)->memory().kv_cache_bytes;
    r.weight_bytes = (*runner)->memory().weight_bytes;
    r.layer_weight_bytes = (*runner)->memory().layer_weight_bytes;
    r.runner = *std::move(runner);
    return r;
  });
#endif
}

}  // namespace folio::worker
