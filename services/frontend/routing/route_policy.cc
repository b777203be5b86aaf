#include "services/frontend/routing/route_policy.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace folio::frontend::routing {

absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(const std::string& name) {
  if (name == "kv") return RoutingPolicy::kKv;
  if (name == "least-loaded") return RoutingPolicy::kLeastLoaded;
  if (name == "round-robin") return RoutingPolicy::kRoundRobin;
  if (name == "random") return RoutingPolicy::kRandom;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown routing policy \"", name, "\": expected kv, least-loaded, round-robin or random"));
}

const char* RoutingPolicyName(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kKv: return "kv";
    case RoutingPolicy::kLeastLoaded: return "least-loaded";
    case RoutingPolicy::kRoundRobin: return "round-robin";
    case RoutingPolicy::kRandom: return "random";
  }
  return "unknown";
}

absl::StatusOr<RouteChoice> RouteChooser::Choose(absl::Span<const ReplicaLoad> replicas,
                                                 int32_t prompt_tokens, int32_t block_size) {
  const int32_t n = static_cast<int32_t>(replicas.size());
  std::vector<int32_t> eligible;
  for (int32_t i = 0; i < n; ++i) {
    if (replicas[i].eligible) eligible.push_back(i);
  }
  if (eligible.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("none of the ", n, " replicas can take work now"));
  }
  const int64_t bs = std::max(block_size, 1);
  const int32_t max_match = prompt_tokens > 0 ? (prompt_tokens - 1) / static_cast<int32_t>(bs) : 0;
  auto cached_tokens = [&](int32_t i) {
    return static_cast<int32_t>(std::min(replicas[i].matched_blocks, max_match) * bs);
  };
  auto choice_of = [&](int32_t i, double cost) {
    return RouteChoice{.replica = i, .predicted_cached_tokens = cached_tokens(i), .cost = cost};
  };
  const uint64_t turn = next_++;
  switch (policy_) {
    case RoutingPolicy::kRoundRobin: {
      const int32_t i = eligible[turn % eligible.size()];
      return choice_of(i, 0);
    }
    case RoutingPolicy::kRandom: {
      const int32_t i = eligible[rng_() % eligible.size()];
      return choice_of(i, 0);
    }
    case RoutingPolicy::kKv:
    case RoutingPolicy::kLeastLoaded:
      break;
  }
  // Lowest cost, then lowest load, then the first after this turn's rotation.
  int32_t best = -1;
  double best_cost = std::numeric_limits<double>::infinity();
  double best_load = std::numeric_limits<double>::infinity();
  const size_t m = eligible.size();
  for (size_t k = 0; k < m; ++k) {
    const int32_t i = eligible[(turn + k) % m];
    const double load = static_cast<double>(replicas[i].pending_tokens) / bs;
    double cost = load;
    if (policy_ == RoutingPolicy::kKv) {
      const int64_t prompt_blocks = (prompt_tokens + bs - 1) / bs;
      const int64_t cached_blocks = cached_tokens(i) / bs;
      const int64_t new_blocks = prompt_blocks - cached_blocks;
      const int64_t disk_blocks = std::min<int64_t>(replicas[i].matched_disk_blocks, cached_blocks);
      cost += prefill_weight_ * (static_cast<double>(new_blocks) +
                                 disk_hit_cost_ * static_cast<double>(disk_blocks));
    }
    if (cost < best_cost || (cost == best_cost && load < best_load)) {
      best = i;
      best_cost = cost;
      best_load = load;
    }
  }
  return choice_of(best, best_cost);
}

}  // namespace folio::frontend::routing
