// ReplicaSet: the frontend's replicas (one scheduler each) and the router that spreads
// requests over them (DESIGN.md, "Many replicas, one cluster").
//
// Membership: a static list of HOST:PORT, or a DNS name (dns:///NAME:PORT, such as a
// StatefulSet's headless Service) resolved again every resolve_interval, so replicas join
// and leave without a restart. A replica that leaves keeps serving the streams it has
// (their leases hold it) but takes no new work.
//
// State: with more than one replica (or a DNS name), a poller thread calls every replica's
// GetReplicaState each poll_interval, concurrently. The answer carries the scheduler's
// load and the cache manager's block events, which keep that replica's PrefixIndex
// (prefix_index.h). Health per replica:
//   serving     the last poll answered, with block events (or the replica has no cache
//               events to give, as with prefix caching off)
//   recovering  the scheduler answered but its cache manager did not, or it is starting
//   gone        the last poll failed, or a stream on it broke since (RouteLease::ReportBroken)
// New work goes to serving replicas; when none is, to recovering ones (they continue
// once they recover); when none is either, Route answers UNAVAILABLE. Before the first
// poll every replica counts as serving.
//
// One static replica is today's single-replica frontend: no poller, no index, no cost;
// Route always answers it.
//
// Routing (route_policy.h): kv hashes the prompt's full blocks with the cache manager's
// own function (services/cachemgr/block_hash.h) and matches them against each index.
// The load is the scheduler's reported pending tokens plus the tokens of what this router
// sent it after the poll that reported them began (Dynamo's trick: a burst does not all
// land on one replica between two reports).
//
// Thread-safe. Route never blocks on the network.
#ifndef FOLIO_SERVICES_FRONTEND_ROUTING_REPLICA_SET_H_
#define FOLIO_SERVICES_FRONTEND_ROUTING_REPLICA_SET_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/channel.h"
#include "services/frontend/routing/prefix_index.h"
#include "services/frontend/routing/route_policy.h"
#include "services/frontend/routing/stream_router.h"

namespace folio::frontend::routing {

// What --replicas names: a static list or one DNS name.
struct ReplicaTargets {
  std::vector<std::string> addresses;  // HOST:PORT each
  std::string dns_name;                // "NAME:PORT" from dns:///NAME:PORT; empty: static
};

// Parses "HOST:PORT[,HOST:PORT...]" or "dns:///NAME:PORT". InvalidArgument naming what is
// wrong: an empty list, an empty entry, an entry without a port, a duplicate.
absl::StatusOr<ReplicaTargets> ParseReplicaTargets(const std::string& flag);

// Resolves "NAME:PORT" to "ADDRESS:PORT" entries (getaddrinfo; IPv6 in brackets). An empty
// list (not an error) when the name has no address yet.
absl::StatusOr<std::vector<std::string>> ResolveDns(const std::string& name_port);

enum class ReplicaHealth { kServing, kRecovering, kGone };
const char* ReplicaHealthName(ReplicaHealth health);

// One replica as the router last saw it (tests, logs, the info endpoint).
struct ReplicaStatus {
  std::string address;
  ReplicaHealth health = ReplicaHealth::kServing;
  int64_t index_blocks = 0;       // hashes in its prefix index
  int64_t pending_tokens = 0;     // its last report plus what was sent since
  int32_t in_flight = 0;          // this router's requests on it
  int32_t num_running = 0;        // its last report
  int32_t num_waiting = 0;
  int64_t num_polls = 0;          // answered polls
  int64_t num_resyncs = 0;        // index snapshots forced by gaps or new pools
};

struct ReplicaSetOptions {
  ReplicaTargets targets;
  RoutingPolicy policy = RoutingPolicy::kKv;
  double kv_prefill_weight = 1.0;     // route_policy.h
  double kv_disk_hit_cost = RouteChooser::kDefaultDiskHitCost;  // route_policy.h
  int32_t block_size = 16;            // the replicas' (ClusterInfo); the index's own wins
  absl::Duration poll_interval = absl::Milliseconds(50);
  absl::Duration poll_timeout = absl::Milliseconds(500);
  absl::Duration resolve_interval = absl::Seconds(5);
  // Builds the channel to a scheduler (the frontend's MakeSchedulerChannel with its TLS).
  std::function<std::shared_ptr<grpc::ChannelInterface>(const std::string&)> make_channel;
  // DNS resolution (ResolveDns unless set; tests inject their own).
  std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)> resolve;
  // folio_frontend_route_* metrics (may be null). Must outlive the set.
  MetricsRegistry* registry = nullptr;
};

class ReplicaSet final : public StreamRouter {
 public:
  // InvalidArgument for no targets or no make_channel. A DNS name that resolves to nothing
  // is not an error: Route answers UNAVAILABLE until it resolves (the frontend stays
  // NOT_SERVING), since a StatefulSet's pods may come up after the frontend's.
  static absl::StatusOr<std::unique_ptr<ReplicaSet>> Create(ReplicaSetOptions options);
  ~ReplicaSet() override;

  absl::StatusOr<Target> Route(const folio::internal::v1::ScheduleRequest& request,
                               const std::string& avoid) override;

  // The current replicas, in the order they joined.
  std::vector<ReplicaStatus> Status() const;
  // A stub of each current replica (start-up's GetClusterInfo, readiness), with the
  // channel it uses. Valid while the returned shared_ptrs are held.
  std::vector<std::pair<std::string, std::shared_ptr<folio::internal::v1::Scheduler::Stub>>>
  Stubs() const;
  // True when some replica is serving (the frontend's readiness).
  bool AnyServing() const;
  // Polls (and resolves) once now, waiting for the answers: tests and start-up.
  void PollNow();

  RoutingPolicy policy() const { return options_.policy; }

 private:
  struct Replica;
  class Lease;
  struct Metrics;

  explicit ReplicaSet(ReplicaSetOptions options);
  void AddReplica(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Resolve();
  void PollAll();
  void PollLoop();
  bool polling() const { return options_.targets.addresses.size() > 1 ||
                                !options_.targets.dns_name.empty(); }

  const ReplicaSetOptions options_;
  std::unique_ptr<Metrics> metrics_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Replica>> replicas_ ABSL_GUARDED_BY(mu_);
  RouteChooser chooser_ ABSL_GUARDED_BY(mu_);
  absl::Time last_resolve_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The block size the replicas report (options_.block_size until one does); Route hashes
  // prompts with it before it takes mu_.
  std::atomic<int32_t> block_size_;
  std::atomic<bool> stop_{false};
  absl::Mutex poll_mu_;  // one poll at a time (the loop and PollNow)
  std::thread poller_;
};

}  // namespace folio::frontend::routing

#endif  // FOLIO_SERVICES_FRONTEND_ROUTING_REPLICA_SET_H_
