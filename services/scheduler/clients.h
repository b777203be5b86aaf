// The scheduler's view of the other services of its replica: small interfaces with a
// gRPC implementation (grpc_clients.h) and in-process ones (local_clients.h) for tests.
// They speak the cache manager's and the worker's native step types, so the scheduler's
// domain code includes no gRPC or protobuf headers.
#ifndef FOLIO_SERVICES_SCHEDULER_CLIENTS_H_
#define FOLIO_SERVICES_SCHEDULER_CLIENTS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/cachemgr/step_types.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

// The KV offload tiers the worker ranks offer (WorkerClient::tiers): the host tier's
// segments, as their ids joined by ",", and the fewest blocks one holds (empty and 0
// without a tier); the disk tier's directory, the same on every rank, and the fewest
// blocks a rank's budget holds (empty and 0 without one).
struct OffloadTiers {
  std::string host_tier_id;
  int32_t host_blocks = 0;
  std::string disk_dir;
  int32_t disk_blocks = 0;
};

// The cache manager of this replica. Implementations are called from one thread at a time:
// the scheduler's loop thread, or recovery's restore thread while no step runs.
class CacheClient {
 public:
  virtual ~CacheClient() = default;
  // One batched step (DESIGN.md). A non-OK status means the call failed as a whole.
  virtual absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& request) = 0;
  // Drops every sequence (after a failure left the pool's state unknown).
  virtual absl::Status Reset() = 0;
  // Recovery (recovery.h): makes the pool usable again, empty, after a failed call. A
  // cache manager that came back as a new process (a new incarnation, or no pool) is
  // configured again as at start-up; the same process is reset. UNAVAILABLE while it
  // does not answer; called again with backoff until OK.
  virtual absl::Status Restore() = 0;
  // Makes the Restore in flight (on another thread) return soon, and every later one fail
  // at once: the scheduler is shutting down. Thread-safe.
  virtual void CancelRestore() {}
  // Recovery, after the workers' Restore: the workers now offer `tiers`
  // (WorkerClient::tiers). Host segments of another size or id than the pool was
  // configured with empty the host tier (their bytes are gone), or drop it at 0 blocks;
  // another disk directory or budget opens the disk tier there (indexing its files), or
  // drops it. No sequence may be live.
  virtual absl::Status SetTiers(const OffloadTiers& tiers) { return absl::OkStatus(); }
  // The workers could not load these disk-tier blocks (chained hashes as (hi, lo)): the
  // next Reset or Restore tells the cache manager to drop them for good. Called on the
  // scheduler's loop thread before the recovery that restores the pool.
  virtual void NoteBadDiskBlocks(std::vector<std::pair<uint64_t, uint64_t>> blocks) {}
};

// All worker ranks of this replica, seen as one: a step goes to every rank and rank 0's
// answer comes back. Called from one thread at a time, as CacheClient.
class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  // `request_ids[i]` names the request of step.seqs[i], for the workers' logs.
  virtual absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                                     const std::vector<std::string>& request_ids) = 0;
  // Pipelined steps (scheduler.h): Start sends a step and returns; Finish waits for its
  // answer. One step at a time, Start and Finish alternating, on one thread. This default
  // runs the whole step in Start (in-process clients have nothing to overlap); the gRPC
  // client sends in Start and waits in Finish, so the caller works meanwhile with no
  // thread of its own.
  virtual void Start(const worker::StepInput& step, const std::vector<std::string>& request_ids) {
    started_ = Execute(step, request_ids);
  }
  virtual absl::StatusOr<worker::StepOutput> Finish() {
    absl::StatusOr<worker::StepOutput> output = std::move(started_);
    started_ = absl::FailedPreconditionError("no step was started");
    return output;
  }

  // Recovery (recovery.h): makes every rank usable again after a failed step. A rank that
  // came back as a new process (a new incarnation) gets its KV cache allocated again,
  // with the block count and size of start-up. UNAVAILABLE while a rank does not answer;
  // called again with backoff until OK.
  virtual absl::Status Restore() = 0;
  // As CacheClient::CancelRestore. Thread-safe.
  virtual void CancelRestore() {}
  // The KV offload tiers the ranks offer. Known after allocation.
  virtual OffloadTiers tiers() const { return {}; }

 private:
  absl::StatusOr<worker::StepOutput> started_ = absl::FailedPreconditionError("no step was started");
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_CLIENTS_H_
