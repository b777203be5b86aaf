#include "services/frontend/routing/replica_set.h"

#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include <algorithm>
#include <chrono>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "services/cachemgr/block_hash.h"

namespace folio::frontend::routing {
namespace ipb = folio::internal::v1;

namespace {

// "HOST:PORT" with a numeric port in range; IPv6 hosts in brackets.
absl::Status CheckHostPort(absl::string_view entry) {
  const size_t colon = entry.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(entry.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica \"", entry, "\" is not HOST:PORT with a port in 1..65535"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReplicaTargets> ParseReplicaTargets(const std::string& flag) {
  ReplicaTargets targets;
  absl::string_view rest = flag;
  if (absl::ConsumePrefix(&rest, "dns:///")) {
    if (absl::Status s = CheckHostPort(rest); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--replicas=", flag, ": ", s.message()));
    }
    targets.dns_name = std::string(rest);
    return targets;
  }
  if (absl::StrContains(flag, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas=", flag, ": the only scheme is dns:///NAME:PORT; otherwise HOST:PORT,..."));
  }
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(flag, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--replicas=\"", flag, "\": an empty entry (expected HOST:PORT[,HOST:PORT...])"));
    }
    if (absl::Status s = CheckHostPort(entry); !s.ok()) return s;
    if (!seen.insert(std::string(entry)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--replicas: \"", entry, "\" is listed twice"));
    }
    targets.addresses.emplace_back(entry);
  }
  return targets;
}

absl::StatusOr<std::vector<std::string>> ResolveDns(const std::string& name_port) {
  const size_t colon = name_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name_port, "\" has no port"));
  }
  std::string host = name_port.substr(0, colon);
  const std::string port = name_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  std::vector<std::string> out;
  if (rc == EAI_NONAME || rc == EAI_NODATA) return out;  // no address (yet)
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving ", name_port, ": ", gai_strerror(rc)));
  }
  absl::flat_hash_set<std::string> seen;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof buf);
      address = absl::StrCat(buf, ":", port);
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf,
                sizeof buf);
      address = absl::StrCat("[", buf, "]:", port);
    } else {
      continue;
    }
    if (seen.insert(address).second) out.push_back(address);
  }
  freeaddrinfo(result);
  std::sort(out.begin(), out.end());
  return out;
}

const char* ReplicaHealthName(ReplicaHealth health) {
  switch (health) {
    case ReplicaHealth::kServing: return "serving";
    case ReplicaHealth::kRecovering: return "recovering";
    case ReplicaHealth::kGone: return "gone";
  }
  return "unknown";
}

// Guarded by ReplicaSet::mu_ except the immutable address, channel and stub.
struct ReplicaSet::Replica {
  Replica(std::string a, std::shared_ptr<grpc::ChannelInterface> c)
      : address(std::move(a)), channel(std::move(c)),
        stub(ipb::Scheduler::NewStub(channel)) {}

  const std::string address;
  const std::shared_ptr<grpc::ChannelInterface> channel;
  const std::shared_ptr<ipb::Scheduler::Stub> stub;

  ReplicaHealth health = ReplicaHealth::kServing;
  PrefixIndex index;
  int64_t reported_pending_tokens = 0;
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  // Tokens routed here, with when: those sent after the poll that reported the load began
  // are not in the report yet.
  std::deque<std::pair<absl::Time, int64_t>> sent;
  int32_t in_flight = 0;
  int64_t num_polls = 0;
  absl::Time last_applied = absl::InfinitePast();  // the start of the poll whose events applied

  int64_t pending_tokens() const {
    int64_t total = reported_pending_tokens;
    for (const auto& [at, tokens] : sent) total += tokens;
    return total;
  }
};

struct ReplicaSet::Metrics {
  explicit Metrics(MetricsRegistry* r)
      : routes(r->AddCounterFamily("folio_frontend_route_total",
                                   "Requests (and stream resumptions) routed, by replica and policy.",
                                   {"replica", "policy"})),
        predicted_cached(r->AddCounter(
            "folio_frontend_route_predicted_cached_tokens_total",
            "Prompt tokens the router expected the chosen replica's prefix cache to serve.")),
        actual_cached(r->AddCounter(
            "folio_frontend_route_actual_cached_tokens_total",
            "Prompt tokens the chosen replica's prefix cache served, as its scheduler reported.")),
        index_blocks(r->AddGaugeFamily("folio_frontend_route_index_blocks",
                                       "Block hashes in the router's prefix index of a replica.",
                                       {"replica"})),
        event_lag(r->AddGaugeFamily(
            "folio_frontend_route_event_lag_seconds",
            "Time since the router last applied a replica's block events (its index's age).",
            {"replica"})),
        health(r->AddGaugeFamily("folio_frontend_replica_health",
                                 "1 for the replica's current health state, 0 for the others.",
                                 {"replica", "state"})),
        resyncs(r->AddCounterFamily("folio_frontend_route_index_resyncs_total",
                                    "Prefix-index snapshots forced by a gap or a new pool.",
                                    {"replica"})) {}

  Family<Counter>& routes;
  Counter& predicted_cached;
  Counter& actual_cached;
  Family<Gauge>& index_blocks;
  Family<Gauge>& event_lag;
  Family<Gauge>& health;
  Family<Counter>& resyncs;
};

class ReplicaSet::Lease final : public RouteLease {
 public:
  Lease(ReplicaSet* set, std::shared_ptr<Replica> replica)
      : set_(set), replica_(std::move(replica)) {}
  ~Lease() override {
    absl::MutexLock lock(&set_->mu_);
    --replica_->in_flight;
  }
  void ReportCachedTokens(int32_t tokens) override {
    if (set_->metrics_ != nullptr) set_->metrics_->actual_cached.Increment(tokens);
  }
  void ReportBroken() override {
    if (!set_->polling()) return;
    absl::MutexLock lock(&set_->mu_);
    replica_->health = ReplicaHealth::kGone;
    replica_->index.Clear();
  }

 private:
  ReplicaSet* const set_;
  const std::shared_ptr<Replica> replica_;
};

absl::StatusOr<std::unique_ptr<ReplicaSet>> ReplicaSet::Create(ReplicaSetOptions options) {
  if (options.targets.addresses.empty() && options.targets.dns_name.empty()) {
    return absl::InvalidArgumentError("no replicas: --replicas lists none");
  }
  if (!options.make_channel) return absl::InvalidArgumentError("no make_channel");
  if (!options.resolve) options.resolve = ResolveDns;
  std::unique_ptr<ReplicaSet> set(new ReplicaSet(std::move(options)));
  {
    absl::MutexLock lock(&set->mu_);
    for (const std::string& a : set->options_.targets.addresses) set->AddReplica(a);
  }
  if (set->polling()) {
    set->PollNow();  // resolves the DNS name and learns every replica's state once
    set->poller_ = std::thread([s = set.get()] { s->PollLoop(); });
  }
  return set;
}

ReplicaSet::ReplicaSet(ReplicaSetOptions options)
    : options_(std::move(options)),
      metrics_(options_.registry != nullptr ? std::make_unique<Metrics>(options_.registry)
                                            : nullptr),
      chooser_(options_.policy, options_.kv_prefill_weight, /*seed=*/0x5eed,
               options_.kv_disk_hit_cost),
      block_size_(options_.block_size) {}

ReplicaSet::~ReplicaSet() {
  stop_.store(true);
  if (poller_.joinable()) poller_.join();
}

void ReplicaSet::AddReplica(const std::string& address) {
  replicas_.push_back(std::make_shared<Replica>(address, options_.make_channel(address)));
  LOG(INFO) << "replica " << address << " joined (" << replicas_.size() << " in all)";
}

void ReplicaSet::Resolve() {
  if (options_.targets.dns_name.empty()) return;
  absl::StatusOr<std::vector<std::string>> addresses = options_.resolve(options_.targets.dns_name);
  if (!addresses.ok()) {
    LOG(WARNING) << "replicas: " << addresses.status() << "; keeping the current set";
    return;
  }
  absl::flat_hash_set<std::string> now(addresses->begin(), addresses->end());
  absl::MutexLock lock(&mu_);
  last_resolve_ = absl::Now();
  std::vector<std::shared_ptr<Replica>> kept;
  for (std::shared_ptr<Replica>& r : replicas_) {
    if (now.erase(r->address) > 0) {
      kept.push_back(std::move(r));
    } else {
      // Its streams keep their leases (and so the replica); it takes no new work.
      LOG(INFO) << "replica " << r->address << " left " << options_.targets.dns_name;
    }
  }
  replicas_ = std::move(kept);
  for (const std::string& a : *addresses) {
    if (now.contains(a)) AddReplica(a);
  }
  if (replicas_.empty()) {
    LOG_EVERY_N(WARNING, 20) << "replicas: " << options_.targets.dns_name
                             << " resolves to no address yet";
  }
}

void ReplicaSet::PollAll() {
  struct Poll {
    std::shared_ptr<Replica> replica;
    grpc::ClientContext ctx;
    ipb::ReplicaStateRequest request;
    ipb::ReplicaState response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Poll>> polls;
  const absl::Time started = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<Replica>& r : replicas_) {
      auto p = std::make_unique<Poll>();
      p->replica = r;
      const EventCursor cursor = r->index.cursor();
      p->request.mutable_block_events()->set_pool_id(cursor.pool_id);
      p->request.mutable_block_events()->set_after_seq(cursor.after_seq);
      p->request.mutable_block_events()->set_disk_events(true);
      p->ctx.set_deadline(absl::ToChronoTime(started + options_.poll_timeout));
      polls.push_back(std::move(p));
    }
  }
  if (polls.empty()) return;
  // Shared with the callbacks: the last one may still be inside DecrementCount when
  // Wait returns.
  auto done = std::make_shared<absl::BlockingCounter>(static_cast<int>(polls.size()));
  for (auto& p : polls) {
    Poll* raw = p.get();
    raw->replica->stub->async()->GetReplicaState(&raw->ctx, &raw->request, &raw->response,
                                                 [raw, done](grpc::Status s) {
                                                   raw->status = std::move(s);
                                                   done->DecrementCount();
                                                 });
  }
  done->Wait();

  absl::MutexLock lock(&mu_);
  for (auto& p : polls) {
    Replica& r = *p->replica;
    const ReplicaHealth before = r.health;
    if (!p->status.ok()) {
      r.health = ReplicaHealth::kGone;
      // A scheduler that answers (UNAVAILABLE "starting", say) is coming back.
      if (p->status.error_code() == grpc::StatusCode::UNAVAILABLE &&
          absl::StrContains(p->status.error_message(), "starting")) {
        r.health = ReplicaHealth::kRecovering;
      }
      r.index.Clear();
    } else {
      const ipb::ReplicaState& s = p->response;
      ++r.num_polls;
      r.reported_pending_tokens = s.num_tokens_pending();
      r.num_running = s.num_running();
      r.num_waiting = s.num_waiting();
      while (!r.sent.empty() && r.sent.front().first < started) r.sent.pop_front();
      if (!s.has_block_events() || !s.block_events().configured()) {
        r.health = ReplicaHealth::kRecovering;
        r.index.Clear();
      } else {
        r.health = ReplicaHealth::kServing;
        const ipb::BlockEvents& e = s.block_events();
        BlockEventBatch batch;
        batch.pool_id = e.pool_id();
        batch.snapshot = e.snapshot();
        batch.last_seq = e.last_seq();
        batch.block_size = e.block_size();
        batch.events.reserve(e.events_size());
        for (const ipb::BlockEvent& ev : e.events()) {
          batch.events.push_back(BlockEventBatch::Event{
              .seq = ev.seq(),
              .stored = ev.kind() == ipb::BlockEvent::STORED ||
                        ev.kind() == ipb::BlockEvent::STORED_ON_DISK,
              .hash = BlockHash{ev.hash_hi(), ev.hash_lo()},
              .on_disk = ev.kind() == ipb::BlockEvent::STORED_ON_DISK});
        }
        // All replicas of one model share a block size; the hashes follow what they report.
        if (batch.block_size > 0) block_size_.store(batch.block_size, std::memory_order_relaxed);
        if (r.index.Apply(batch) == PrefixIndex::ApplyResult::kResync) {
          VLOG(1) << "replica " << r.address << ": block events out of step; resyncing";
          if (metrics_ != nullptr) metrics_->resyncs.WithLabels({r.address}).Increment();
        } else {
          r.last_applied = started;
        }
      }
    }
    if (r.health != before) {
      LOG(INFO) << "replica " << r.address << " is " << ReplicaHealthName(r.health)
                << (p->status.ok() ? "" : absl::StrCat(" (", p->status.error_message(), ")"));
    }
    if (metrics_ != nullptr) {
      metrics_->index_blocks.WithLabels({r.address}).Set(static_cast<double>(r.index.size()));
      if (r.last_applied != absl::InfinitePast()) {
        metrics_->event_lag.WithLabels({r.address})
            .Set(absl::ToDoubleSeconds(absl::Now() - r.last_applied));
      }
      for (ReplicaHealth h : {ReplicaHealth::kServing, ReplicaHealth::kRecovering,
                              ReplicaHealth::kGone}) {
        metrics_->health.WithLabels({r.address, ReplicaHealthName(h)}).Set(r.health == h ? 1 : 0);
      }
    }
  }
}

void ReplicaSet::PollNow() {
  absl::MutexLock poll_lock(&poll_mu_);
  bool resolve = false;
  {
    absl::MutexLock lock(&mu_);
    resolve = absl::Now() - last_resolve_ >= options_.resolve_interval;
  }
  if (resolve) Resolve();
  PollAll();
}

void ReplicaSet::PollLoop() {
  while (!stop_.load()) {
    const absl::Time next = absl::Now() + options_.poll_interval;
    PollNow();
    // Sleeps in short slices so the destructor's stop is seen soon.
    while (!stop_.load() && absl::Now() < next) {
      absl::SleepFor(std::min(absl::Milliseconds(10), next - absl::Now()));
    }
  }
}

absl::StatusOr<StreamRouter::Target> ReplicaSet::Route(const ipb::ScheduleRequest& request,
                                                       const std::string& avoid) {
  const auto& prompt = request.prompt_token_ids();
  const int32_t prompt_tokens = prompt.size();
  // The prompt's block hashes, outside the lock (a long prompt's hashing must not hold up
  // other requests' routing), with the block size the replicas reported.
  const int32_t block_size = block_size_.load(std::memory_order_relaxed);
  std::vector<BlockHash> hashes;
  if (polling() && options_.policy == RoutingPolicy::kKv) {
    hashes = cachemgr::HashFullBlocks(absl::MakeConstSpan(prompt.data(), prompt.size()),
                                      block_size);
  }
  absl::MutexLock lock(&mu_);
  if (replicas_.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "no replica: ", options_.targets.dns_name, " resolves to no address yet"));
  }
  if (!polling()) {
    const std::shared_ptr<Replica>& r = replicas_.front();
    ++r->in_flight;
    return Target{r->stub.get(), r->address, std::make_shared<Lease>(this, r)};
  }
  // The best health any replica has decides who is eligible; `avoid` only while another
  // replica of that health exists.
  ReplicaHealth best = ReplicaHealth::kGone;
  for (const auto& r : replicas_) best = std::min(best, r->health);
  if (best == ReplicaHealth::kGone) {
    return absl::UnavailableError(
        absl::StrCat("none of the ", replicas_.size(), " replicas answers"));
  }
  int32_t num_best = 0;
  for (const auto& r : replicas_) num_best += r->health == best && r->address != avoid;
  std::vector<ReplicaLoad> loads;
  loads.reserve(replicas_.size());
  for (const auto& r : replicas_) {
    ReplicaLoad l;
    l.eligible = r->health == best && (num_best == 0 || r->address != avoid);
    l.matched_blocks = hashes.empty() ? 0 : r->index.Match(hashes, &l.matched_disk_blocks);
    l.pending_tokens = r->pending_tokens();
    loads.push_back(l);
  }
  absl::StatusOr<RouteChoice> choice = chooser_.Choose(loads, prompt_tokens, block_size);
  if (!choice.ok()) return absl::UnavailableError(choice.status().message());
  const std::shared_ptr<Replica>& r = replicas_[choice->replica];
  ++r->in_flight;
  // What the request adds to the replica's pending tokens, as its scheduler will count
  // them: the prompt less the expected hit, and every branch's output budget.
  r->sent.emplace_back(absl::Now(),
                       prompt_tokens - choice->predicted_cached_tokens +
                           int64_t{std::max(request.max_tokens(), 0)} *
                               std::max({request.n(), request.beam_width(), 1}));
  if (metrics_ != nullptr) {
    metrics_->routes.WithLabels({r->address, RoutingPolicyName(options_.policy)}).Increment();
    metrics_->predicted_cached.Increment(choice->predicted_cached_tokens);
  }
  VLOG(1) << "request " << request.request_id() << " -> " << r->address << " (cost "
          << choice->cost << ", " << choice->predicted_cached_tokens << " cached tokens expected)";
  return Target{r->stub.get(), r->address, std::make_shared<Lease>(this, r)};
}

std::vector<ReplicaStatus> ReplicaSet::Status() const {
  absl::MutexLock lock(&mu_);
  std::vector<ReplicaStatus> out;
  for (const auto& r : replicas_) {
    out.push_back(ReplicaStatus{.address = r->address, .health = r->health,
                                .index_blocks = r->index.size(),
                                .pending_tokens = r->pending_tokens(),
                                .in_flight = r->in_flight, .num_running = r->num_running,
                                .num_waiting = r->num_waiting, .num_polls = r->num_polls,
                                .num_resyncs = r->index.num_resyncs()});
  }
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<ipb::Scheduler::Stub>>> ReplicaSet::Stubs()
    const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, std::shared_ptr<ipb::Scheduler::Stub>>> out;
  for (const auto& r : replicas_) out.emplace_back(r->address, r->stub);
  return out;
}

bool ReplicaSet::AnyServing() const {
  absl::MutexLock lock(&mu_);
  for (const auto& r : replicas_) {
    if (r->health == ReplicaHealth::kServing) return true;
  }
  return false;
}

}  // namespace folio::frontend::routing
