// RunnerFactory: how the worker service gets a backend (a ModelRunner) when the
// scheduler allocates the KV pool, so the service itself stays backend-agnostic.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_RUNNER_FACTORY_H_
#define FOLIO_SERVICES_WORKER_ENGINE_RUNNER_FACTORY_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "services/worker/dist/communicator.h"
#include "services/worker/engine/model_runner.h"
#include "services/worker/kernels/kv_cache_view.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

// What the service asks of a backend when the scheduler allocates the KV pool.
struct RunnerRequest {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int64_t kv_cache_bytes = 0;  // num_blocks whole blocks, exactly
  kernels::KvDType kv_dtype = kernels::KvDType::kF16;
  int32_t num_threads = 0;
  Communicator* communicator = nullptr;  // null unless tp_size > 1
};

// A backend built for a RunnerRequest, with the figures the service reports.
struct RunnerResources {
  std::unique_ptr<ModelRunner> runner;
  int64_t kv_cache_bytes = 0;
  int64_t weight_bytes = 0;        // on this rank
  int64_t layer_weight_bytes = 0;  // of which in the transformer layers
};

// Builds the backend. The default (empty) builds a CpuModelRunner; folio-worker
// --device=cuda passes one that builds a CudaModelRunner.
using RunnerFactory =
    std::function<absl::StatusOr<RunnerResources>(const ModelWeights&, const RunnerRequest&)>;

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_RUNNER_FACTORY_H_
