#include "services/worker/backend.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

#ifdef FOLIO_HAVE_CUDA
#include <vector>

#include "services/worker/cuda/cuda_model_runner.h"
#include "services/worker/cuda/host_staged_communicator.h"
#include "services/worker/cuda/nccl_communicator.h"
#endif

namespace folio::worker {

bool HaveCudaBackend() {
#ifdef FOLIO_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

// What can be checked of a --device=cuda configuration in any build.
absl::Status CheckCudaFlags(const BackendOptions& backend) {
  if (backend.cuda_collectives != "nccl" && backend.cuda_collectives != "host") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cuda_collectives must be nccl or host, got \"", backend.cuda_collectives, "\""));
  }
  if (!(backend.gpu_memory_utilization > 0 && backend.gpu_memory_utilization <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpu_memory_utilization must lie in (0, 1], got ", backend.gpu_memory_utilization));
  }
#ifndef FOLIO_HAVE_CUDA
  return absl::FailedPreconditionError(
      "--device=cuda: this folio-worker was built without the CUDA backend (configure with "
      "-DFOLIO_CUDA=ON on a machine with nvcc and NCCL)");
#else
  return absl::OkStatus();
#endif
}

#ifdef FOLIO_HAVE_CUDA
// The runner options of a --device=cuda configuration, once the flags and the device are
// checked.
absl::StatusOr<cuda::CudaModelRunnerOptions> CudaOptions(const BackendOptions& backend) {
  if (backend.kv_dtype != kernels::KvDType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=cuda keeps the KV cache in f16 (--kv_dtype=", kernels::KvDTypeName(backend.kv_dtype),
        " is CPU only): use --kv_dtype=f16"));
  }
  cuda::CudaModelRunnerOptions options;
  options.device = backend.cuda_device;
  options.kv_dtype = cuda::DType::kF16;
  options.gpu_memory_utilization = backend.gpu_memory_utilization;
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
  return options;
}

// The device-memory communicator of a CUDA rank whose group is `group` (the worker's Gloo
// group, formed through the gRPC rendezvous). NCCL: rank 0 makes the unique id and the id
// rides the group's first collective, a sum in which the other ranks add zeros (each byte
// is exact in f32). Host: the Gloo group itself, staged through pinned memory.
absl::StatusOr<std::function<absl::StatusOr<std::unique_ptr<Communicator>>(cudaStream_t)>>
CudaCommunicatorFor(Communicator* group, const std::string& collectives, int32_t device) {
  if (collectives == "host") {
    return [group](cudaStream_t stream) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      return std::make_unique<cuda::HostStagedCommunicator>(group, stream);
    };
  }
  std::string id;
  if (group->rank() == 0) {
    absl::StatusOr<std::string> made = cuda::NcclCommunicator::NewUniqueId();
    if (!made.ok()) return made.status();
    id = *std::move(made);
  }
  // Every rank learns the id's length first (NCCL's is fixed, but say so on the wire).
  std::vector<float> length = {static_cast<float>(id.size())};
  if (absl::Status s = group->AllReduceSum(length.data(), 1, CommDType::kF32); !s.ok()) return s;
  std::vector<float> bytes(static_cast<size_t>(length[0]), 0.0f);
  for (size_t i = 0; i < id.size(); ++i) bytes[i] = static_cast<unsigned char>(id[i]);
  if (absl::Status s = group->AllReduceSum(bytes.data(), static_cast<int64_t>(bytes.size()),
                                           CommDType::kF32);
      !s.ok()) {
    return s;
  }
  id.assign(bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) id[i] = static_cast<char>(static_cast<int>(bytes[i]));
  const int rank = group->rank(), size = group->world_size();
  return [id, rank, size, device](cudaStream_t stream) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    absl::StatusOr<std::unique_ptr<cuda::NcclCommunicator>> nccl =
        cuda::NcclCommunicator::Create(rank, size, id, device, stream);
    if (!nccl.ok()) return nccl.status();
    return std::unique_ptr<Communicator>(*std::move(nccl));
  };
}
#endif

}  // namespace

absl::StatusOr<RunnerFactory> MakeRunnerFactory(const BackendOptions& backend) {
  if (backend.device == "cpu") return RunnerFactory();
  if (backend.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got \"", backend.device, "\""));
  }
  if (absl::Status s = CheckCudaFlags(backend); !s.ok()) return s;
#ifdef FOLIO_HAVE_CUDA
  absl::StatusOr<cuda::CudaModelRunnerOptions> options = CudaOptions(backend);
  if (!options.ok()) return options.status();
  return RunnerFactory([options = *options, collectives = backend.cuda_collectives](
                           const ModelWeights& weights,
                           const RunnerRequest& request) -> absl::StatusOr<RunnerResources> {
    cuda::CudaModelRunnerOptions o = options;
    o.block_size = request.block_size;
    o.kv_cache_bytes = request.kv_cache_bytes;
    o.max_num_blocks = request.num_blocks;
    if (request.communicator != nullptr && request.communicator->world_size() > 1) {
      o.shard = {.rank = request.communicator->rank(), .size = request.communicator->world_size()};
      auto make = CudaCommunicatorFor(request.communicator, collectives, o.device);
      if (!make.ok()) return make.status();
      o.make_communicator = *std::move(make);
    }
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
#else
  return absl::InternalError("unreachable: CheckCudaFlags refuses CUDA in this build");
#endif
}

absl::StatusOr<int64_t> MeasureKvBudget(const ModelWeights& weights,
                                        const BackendOptions& backend) {
  if (backend.device != "cuda") {
    return absl::FailedPreconditionError(
        "the KV budget is measured on the CUDA backend only; give the CPU worker "
        "--kv_cache_bytes");
  }
  if (absl::Status s = CheckCudaFlags(backend); !s.ok()) return s;
#ifdef FOLIO_HAVE_CUDA
  if (backend.tp_size > 1) {
    return absl::InvalidArgumentError(
        "--kv_cache_bytes=auto is for one CUDA rank: a tensor-parallel rank's profiling step "
        "needs its whole group, so give every rank the same --kv_cache_bytes");
  }
  absl::StatusOr<cuda::CudaModelRunnerOptions> options = CudaOptions(backend);
  if (!options.ok()) return options.status();
  options->kv_cache_bytes = 0;  // the utilization rule
  absl::StatusOr<std::unique_ptr<cuda::CudaModelRunner>> runner =
      cuda::CudaModelRunner::Create(weights, *options);
  if (!runner.ok()) return runner.status();
  const cuda::CudaMemoryReport& m = (*runner)->memory();
  constexpr double kMiB = 1024.0 * 1024.0;
  LOG(INFO) << "device " << backend.cuda_device << " (" << m.device_name << "): "
            << m.total_bytes / kMiB << " MiB; weights " << m.weight_bytes / kMiB
            << " MiB, activations for " << backend.max_num_batched_tokens << " tokens / "
            << backend.max_num_seqs << " sequences " << m.activation_bytes / kMiB
            << " MiB, in use after the profiling step " << m.in_use_after_profile / kMiB
            << " MiB; KV budget at --gpu_memory_utilization=" << backend.gpu_memory_utilization
            << ": " << m.kv_cache_bytes / kMiB << " MiB (" << m.num_blocks << " blocks of "
            << options->block_size << " tokens)";
  return m.kv_cache_bytes;
#else
  return absl::InternalError("unreachable: CheckCudaFlags refuses CUDA in this build");
#endif
}

}  // namespace folio::worker
