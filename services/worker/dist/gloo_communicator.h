// GlooCommunicator: the CPU Communicator, over Gloo's TCP transport. Each rank opens one
// TCP endpoint (a Gloo device) on `hostname`, publishes its address through a rendezvous
// store (kv_store.h in one process, rendezvous_service.h across processes), and connects a
// full mesh to the other ranks. All-reduce and gather then run Gloo's algorithms over it.
//
// Gloo reports failures by exception (a peer that closed its socket, an operation past the
// timeout); this class turns them into Status and marks the group broken (communicator.h).
// Thread-compatible, as Communicator says.
#ifndef FOLIO_SERVICES_WORKER_DIST_GLOO_COMMUNICATOR_H_
#define FOLIO_SERVICES_WORKER_DIST_GLOO_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/context.h"
#include "gloo/rendezvous/store.h"
#include "services/worker/dist/communicator.h"

namespace folio::worker {

struct GlooCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  // The address this rank's TCP endpoint listens on and the peers connect to (an address
  // or a host name of this machine that the other ranks can reach).
  std::string hostname = "127.0.0.1";
  // Bounds every collective: a peer that does not take part within it fails the call
  // (and breaks the group).
  absl::Duration timeout = absl::Seconds(60);
  // Bounds joining the group (every rank must have started by then); 0 = `timeout`.
  absl::Duration rendezvous_timeout = absl::ZeroDuration();
  // The group's keys in the store live under this prefix (kv_store.h: GroupKeyPrefix).
  std::string key_prefix = "folio-tp";
};

class GlooCommunicator final : public Communicator {
 public:
  // Joins the group: publishes this rank's address in `store` and connects to every other
  // rank; blocks until all ranks have joined. InvalidArgument for a bad rank or size,
  // Unavailable when the rendezvous or a connection fails or times out.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      const GlooCommunicatorOptions& options, gloo::rendezvous::Store& store);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(void* data, int64_t count, CommDType dtype) override;
  absl::Status GatherToRoot(const void* send, void* recv, int64_t count, CommDType dtype) override;
  CollectiveCounts counts() const override;
  absl::Status broken() const override { return broken_; }

 private:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int world_size)
      : context_(std::move(context)), rank_(rank), world_size_(world_size) {}

  // OK, or the error that broke the group.
  absl::Status CheckUsable(const char* op, int64_t count) const;

  std::shared_ptr<gloo::Context> context_;
  const int rank_;
  const int world_size_;
  absl::Status broken_;  // the first failure; OK while the group works
  std::atomic<int64_t> all_reduces_{0};
  std::atomic<int64_t> gathers_{0};
  std::atomic<int64_t> bytes_{0};
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_DIST_GLOO_COMMUNICATOR_H_
