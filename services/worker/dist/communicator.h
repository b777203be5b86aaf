// Communicator: the collectives that tensor-parallel ranks of one model replica run with
// each other. The CPU backend uses Gloo over TCP (gloo_communicator.h); a GPU backend puts
// NCCL behind the same interface.
//
// Every rank of a group must issue the same collectives, in the same order, with the same
// counts and types: a collective pairs up by order, so a rank that skips one would pair its
// next call with the others' previous one. The model runner guarantees this by running the
// same steps in the same order on every rank.
//
// A failed collective (a peer that died or did not answer within the backend's timeout)
// returns an error and leaves the group broken: every later call fails at once with
// FailedPrecondition naming the first failure. The worker then forms a new group
// (WorkerService::JoinGroup) when the scheduler recovers the replica.
//
// Thread-compatible: one thread (the rank's step thread) issues the collectives; counts()
// may be read from any thread.
#ifndef FOLIO_SERVICES_WORKER_DIST_COMMUNICATOR_H_
#define FOLIO_SERVICES_WORKER_DIST_COMMUNICATOR_H_

#include <cstdint>

#include "absl/status/status.h"

namespace folio::worker {

enum class CommDType { kF32, kF16, kBF16 };

// Bytes of one element.
inline int64_t CommDTypeBytes(CommDType dtype) { return dtype == CommDType::kF32 ? 4 : 2; }

// Collectives issued by one rank since its communicator was created (failed ones too).
struct CollectiveCounts {
  int64_t all_reduces = 0;
  int64_t gathers = 0;
  int64_t bytes = 0;  // payload this rank contributed: count * element size, summed
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In-place elementwise sum over all ranks of `count` elements at `data`. The memory
  // is the backend's (host memory for Gloo, device memory for NCCL).
  virtual absl::Status AllReduceSum(void* data, int64_t count, CommDType dtype) = 0;
  // Every rank contributes `count` elements; rank 0 receives world_size * count elements
  // in rank order at `recv` (recv is ignored on other ranks).
  virtual absl::Status GatherToRoot(const void* send, void* recv, int64_t count,
                                    CommDType dtype) = 0;
  // What this rank has issued so far (for tests and metrics).
  virtual CollectiveCounts counts() const = 0;
  // OK while the group works; else the failure that broke it. Read on the thread that
  // issues the collectives.
  virtual absl::Status broken() const { return absl::OkStatus(); }
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_DIST_COMMUNICATOR_H_
