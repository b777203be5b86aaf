// The rendezvous of a tensor-parallel group over the workers' own gRPC: rank 0 serves its
// KvStore as folio.internal.v1.Rendezvous (RendezvousService), and the other ranks reach
// it through GrpcRendezvousStore, Gloo's store interface over that service. So ranks need
// no shared file system, even on different machines: only rank 0's gRPC address.
//
// RendezvousService is thread-safe and never blocks (a missing key is NOT_FOUND at once);
// GrpcRendezvousStore is used by one thread (the one joining the group) and polls.
#ifndef FOLIO_SERVICES_WORKER_DIST_RENDEZVOUS_SERVICE_H_
#define FOLIO_SERVICES_WORKER_DIST_RENDEZVOUS_SERVICE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "folio/internal/v1/rendezvous.grpc.pb.h"
#include "gloo/rendezvous/store.h"
#include "grpcpp/channel.h"
#include "services/worker/dist/kv_store.h"

namespace folio::worker {

class RendezvousService final : public folio::internal::v1::Rendezvous::CallbackService {
 public:
  // `store` must outlive the service.
  explicit RendezvousService(KvStore* store) : store_(store) {}

  grpc::ServerUnaryReactor* SetKey(grpc::CallbackServerContext* ctx,
                                   const folio::internal::v1::SetKeyRequest* request,
                                   folio::internal::v1::SetKeyResponse* response) override;
  grpc::ServerUnaryReactor* GetKey(grpc::CallbackServerContext* ctx,
                                   const folio::internal::v1::GetKeyRequest* request,
                                   folio::internal::v1::GetKeyResponse* response) override;

 private:
  KvStore* const store_;
};

// Gloo's rendezvous store over rank 0's RendezvousService. Each call waits for rank 0 to
// come up (wait_for_ready) until `timeout`; errors are thrown as std::runtime_error, as
// Gloo's interface expects.
class GrpcRendezvousStore final : public gloo::rendezvous::Store {
 public:
  GrpcRendezvousStore(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  // The value of key once present, polling until `deadline`.
  std::string Poll(const std::string& key, absl::Time deadline);

  std::unique_ptr<folio::internal::v1::Rendezvous::Stub> stub_;
  const absl::Duration timeout_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_DIST_RENDEZVOUS_SERVICE_H_
