// ModelRunner: the worker's backend interface. A backend owns one rank's weights and
// KV tensors and executes steps (step.h) against them. The CPU backend
// (cpu_model_runner.h) is the first; a CUDA backend and tensor-parallel ranks plug in
// behind the same interface.
//
// Contract of Execute: a step whose positions fall outside its block table, whose block
// ids lie outside the pool, or that is otherwise malformed is rejected with
// InvalidArgument before anything (KV cache included) is written.
//
// Thread-compatibility: implementations are driven by one step thread; Execute must not
// be called concurrently on one runner.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_MODEL_RUNNER_H_
#define FOLIO_SERVICES_WORKER_ENGINE_MODEL_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "services/worker/engine/host_kv_segment.h"
#include "services/worker/engine/kv_disk_store.h"
#include "services/worker/engine/step.h"
#include "services/worker/model/weights.h"

namespace folio::worker {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Runs the host-tier transfers, then block copies, then the forward pass for every
  // sequence's new tokens (writing their K/V), then sampling. See the class comment for
  // validation (transfers included: a block or slot out of range is InvalidArgument).
  virtual absl::StatusOr<StepOutput> Execute(const StepInput& step) = 0;

  // The host KV tier's segment (host_kv_segment.h; must outlive the runner, or be
  // replaced first) that steps' host_transfers copy to and from: a slot holds a block's
  // host_bytes_per_block() bytes. Unimplemented for a backend without a host tier.
  absl::Status SetHostSegment(const HostKvSegment* host) { return SetHostSegmentAt(host, 0); }
  // The same, this runner's part of each slot starting at byte `offset` (a drafting
  // runner keeps its draft model's KV after the model's: drafting_runner.h).
  virtual absl::Status SetHostSegmentAt(const HostKvSegment* host, int64_t offset) {
    return absl::UnimplementedError("this backend has no host KV tier");
  }
  // What a host slot holds for one block of this runner's pool (0: no host tier).
  virtual int64_t host_bytes_per_block() const { return 0; }
  // The KV disk tier's store (kv_disk_store.h; the same lifetime rule) that steps' spills
  // write and disk loads read. Unimplemented for a backend without one.
  virtual absl::Status SetDiskStore(KvDiskStore* disk) {
    return absl::UnimplementedError("this backend has no disk KV tier");
  }

  virtual const ModelConfig& config() const = 0;
  // The KV pool this runner holds: block ids in steps must be below num_blocks().
  virtual int32_t block_size() const = 0;
  virtual int64_t num_blocks() const = 0;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_MODEL_RUNNER_H_
