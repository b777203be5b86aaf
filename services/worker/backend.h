// The worker's choice of backend (--device): the CPU engine, or the CUDA backend when the
// binary was built with it. MakeRunnerFactory checks at start-up what can be checked
// before the scheduler allocates the KV pool (the build, the device, the flags), so a
// worker that cannot get a device says so at once and exits.
#ifndef FOLIO_SERVICES_WORKER_BACKEND_H_
#define FOLIO_SERVICES_WORKER_BACKEND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "services/worker/engine/runner_factory.h"
#include "services/worker/kernels/kv_cache_view.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

struct BackendOptions {
  std::string device = "cpu";      // cpu or cuda
  int32_t cuda_device = 0;
  std::string dtype = "f16";       // CUDA weights: f16, bf16 or f32
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  kernels::KvDType kv_dtype = kernels::KvDType::kF16;  // the worker's --kv_dtype
  int32_t tp_size = 1;                                  // the worker's --tp_size
  double gpu_memory_utilization = 0.9;  // CUDA: share of the device the worker may fill
  // CUDA tensor-parallel collectives: "nccl" (ranks on separate devices), or "host" (the
  // worker's Gloo group through pinned host memory; ranks may share a device).
  std::string cuda_collectives = "nccl";
};

// True when this binary carries the CUDA backend.
bool HaveCudaBackend();

// The factory WorkerServiceOptions::make_runner takes: empty for the CPU. With tensor
// parallelism a CUDA rank holds its shard and joins its group's collectives (NCCL, its
// unique id passed over the worker's Gloo group; or that group itself, host-staged).
// InvalidArgument for bad flags or a combination not built (f32 KV on CUDA);
// FailedPrecondition when CUDA is asked for and the build or the machine has none.
absl::StatusOr<RunnerFactory> MakeRunnerFactory(const BackendOptions& backend);

// The KV cache budget the CUDA backend finds at start-up, as vLLM sizes its pool: it
// uploads `weights`, runs one profiling step at the largest batch (max_num_batched_tokens
// rows, max_num_seqs sequences), and takes gpu_memory_utilization of the device's memory
// minus everything then in use. The runner it built is freed before returning. Logs the
// device's memory report. ResourceExhausted when the weights or one KV block do not fit
// (the message gives the figures), FailedPrecondition for the CPU backend, whose budget is
// the --kv_cache_bytes flag, or a build without CUDA.
absl::StatusOr<int64_t> MeasureKvBudget(const ModelWeights& weights, const BackendOptions& backend);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_BACKEND_H_
