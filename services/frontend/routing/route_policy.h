// Which replica takes a request: the routing policies and the cost the kv policy
// minimises, over plain figures (no gRPC), so every choice can be tested on hand-made
// states.
//
// The kv policy's cost of sending a request to replica r, in KV blocks (as NVIDIA Dynamo's
// KV router weighs them):
//
//   cost(r) = prefill_weight * (new_prefill_blocks(r) + disk_hit_cost * disk_blocks(r))
//             + load_blocks(r)
//
//   new_prefill_blocks(r) = blocks of the prompt that r must compute: the prompt's blocks
//                           less those r's prefix index holds (its predicted cache hit)
//   disk_blocks(r)        = of the blocks it holds, those only its disk KV tier keeps: a
//                           load from disk costs disk_hit_cost (--kv_disk_hit_cost, default
//                           0.1) of computing the block, a hit in memory nothing
//   load_blocks(r)        = the tokens r's scheduler still has to compute (its last report)
//                           plus those of requests this router sent it since that report,
//                           in blocks
//
// so a cache hit is worth as much as the same amount of queued work, and prefill_weight
// (--kv_prefill_weight) tilts it towards hits (> 1) or balance (< 1). Ties go to the
// replica with less load, then round-robin order. least-loaded minimises load_blocks
// alone; round-robin and random ignore both.
//
// Thread-compatible (the chooser's rotation and random state are the caller's to guard).
#ifndef FOLIO_SERVICES_FRONTEND_ROUTING_ROUTE_POLICY_H_
#define FOLIO_SERVICES_FRONTEND_ROUTING_ROUTE_POLICY_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace folio::frontend::routing {

enum class RoutingPolicy { kKv, kLeastLoaded, kRoundRobin, kRandom };

// Parses "kv", "least-loaded", "round-robin" or "random"; InvalidArgument names the value
// and the choices.
absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(const std::string& name);
const char* RoutingPolicyName(RoutingPolicy policy);

// One replica as the chooser sees it.
struct ReplicaLoad {
  bool eligible = true;            // healthy enough to take new work
  int32_t matched_blocks = 0;      // the request's leading blocks this replica holds
  int32_t matched_disk_blocks = 0; // of those, the ones only its disk tier holds
  int64_t pending_tokens = 0;      // its scheduler's last report plus what was sent since
};

struct RouteChoice {
  int32_t replica = -1;             // index into the loads given
  int32_t predicted_cached_tokens = 0;
  double cost = 0;
};

class RouteChooser {
 public:
  static constexpr double kDefaultDiskHitCost = 0.1;
  RouteChooser(RoutingPolicy policy, double prefill_weight, uint64_t seed = 0x5eed,
               double disk_hit_cost = kDefaultDiskHitCost)
      : policy_(policy), prefill_weight_(prefill_weight), disk_hit_cost_(disk_hit_cost),
        rng_(seed) {}

  // Picks among the eligible replicas for a prompt of `prompt_tokens` tokens cut into
  // blocks of `block_size`. The cache manager never serves a prompt's last token from the
  // cache, so a match counts at most (prompt_tokens - 1) / block_size blocks. FailedPrecondition
  // when no replica is eligible.
  absl::StatusOr<RouteChoice> Choose(absl::Span<const ReplicaLoad> replicas,
                                     int32_t prompt_tokens, int32_t block_size);

  RoutingPolicy policy() const { return policy_; }

 private:
  const RoutingPolicy policy_;
  const double prefill_weight_;
  const double disk_hit_cost_;
  uint64_t next_ = 0;  // round-robin position, also the tie-breaker's rotation
  std::mt19937_64 rng_;
};

}  // namespace folio::frontend::routing

#endif  // FOLIO_SERVICES_FRONTEND_ROUTING_ROUTE_POLICY_H_
