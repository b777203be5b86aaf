// StreamRouter: where each submission of a scheduler stream goes. ResumableStream asks it
// once per attempt, so a stream whose replica is lost continues on whichever replica the
// router picks next (replica_set.h), from the prompt plus the tokens already streamed.
//
// Implementations are thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_ROUTING_STREAM_ROUTER_H_
#define FOLIO_SERVICES_FRONTEND_ROUTING_STREAM_ROUTER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"

namespace folio::frontend::routing {

// A request's stay on one replica: it counts as in flight there until the lease is
// released, and it tells the router what happened.
class RouteLease {
 public:
  virtual ~RouteLease() = default;
  // The scheduler's count of prompt tokens served from its prefix cache (first event).
  virtual void ReportCachedTokens(int32_t tokens) = 0;
  // The replica's stream broke (UNAVAILABLE): take no new work there until it answers again.
  virtual void ReportBroken() = 0;
};

class StreamRouter {
 public:
  struct Target {
    folio::internal::v1::Scheduler::Stub* stub = nullptr;  // valid while `lease` is held
    std::string replica;                                   // its address, for logs and `avoid`
    std::shared_ptr<RouteLease> lease;                     // never null
  };

  virtual ~StreamRouter() = default;

  // Picks a replica for `request`, avoiding `avoid` (the replica whose stream just broke;
  // empty: none) unless it is the only one left. UNAVAILABLE when no replica can take it
  // now (the caller waits and asks again).
  virtual absl::StatusOr<Target> Route(const folio::internal::v1::ScheduleRequest& request,
                                       const std::string& avoid) = 0;
};

// The router of a frontend with one scheduler and nothing to choose: every attempt goes
// to `stub` (the single-replica behaviour, at no cost).
class StubRouter final : public StreamRouter {
 public:
  // `stub` must outlive the router.
  explicit StubRouter(folio::internal::v1::Scheduler::Stub* stub) : stub_(stub) {}
  absl::StatusOr<Target> Route(const folio::internal::v1::ScheduleRequest&,
                               const std::string&) override {
    return Target{stub_, "", std::make_shared<NoLease>()};
  }

 private:
  struct NoLease final : RouteLease {
    void ReportCachedTokens(int32_t) override {}
    void ReportBroken() override {}
  };
  folio::internal::v1::Scheduler::Stub* const stub_;
};

}  // namespace folio::frontend::routing

#endif  // FOLIO_SERVICES_FRONTEND_ROUTING_STREAM_ROUTER_H_
