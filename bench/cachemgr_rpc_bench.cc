// Round-trip latency of the cache manager's step RPC over loopback gRPC, against an empty
// RPC measured in the same process and run:
//  * BM_EmptyRpc: grpc.health.v1.Health/Check on the same server (no service logic), the
//    floor any RPC pays.
//  * BM_GetStatsRpc: CacheManager/GetStats; it runs before any pool is configured (in
//    registration order), so the handler takes a lock and answers configured=false.
//  * BM_DecodeStepRpc/seqs:N: CacheManager/Step granting one token to each of N live
//    sequences (a decode step). Sequences are created beforehand with staggered lengths;
//    one that reaches max_len is freed and recreated inside the same step.
// Each iteration times one blocking call with a steady clock (manual time); the counters
// p50_us / p90_us / p99_us are percentiles over the iterations; server_us is the mean time
// inside the Step handler, from the service's own latency histogram. The server is an
// in-process ServiceRunner on 127.0.0.1 (no /metrics endpoint). Run with
//   build-sim/bin/cachemgr_rpc_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "common/metrics.h"
#include "common/service_runner.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "glog/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "services/cachemgr/service.h"

namespace folio::cachemgr {
namespace {

namespace pb = folio::internal::v1;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxLen = 1024;

// One server and channel for the whole process, so every benchmark measures the same
// connection. Deliberately leaked: it must outlive every benchmark.
struct Loopback {
  MetricsRegistry registry;
  CacheManagerService service{CacheConfig{}, &registry};
  std::unique_ptr<ServiceRunner> runner;
  std::unique_ptr<pb::CacheManager::Stub> cachemgr;
  std::unique_ptr<Health::Stub> health;
};

Loopback& GetLoopback() {
  static Loopback* const loopback = [] {
    auto* l = new Loopback;
    ServerOptions options{.service_name = "folio.internal.v1.CacheManager",
                          .metrics_port = -1,
                          .shutdown_grace = absl::ZeroDuration(),
                          .drain_timeout = absl::Seconds(1)};
    auto runner = ServiceRunner::Start(options, {&l->service}, &l->registry);
    CHECK(runner.ok()) << runner.status();
    l->runner = *std::move(runner);
    l->runner->SetServing(ServingState::kServing);
    auto channel = grpc::CreateChannel(l->runner->address(), grpc::InsecureChannelCredentials());
    CHECK(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
        << "cannot connect to " << l->runner->address();
    l->cachemgr = pb::CacheManager::NewStub(channel);
    l->health = Health::NewStub(channel);
    return l;
  }();
  return *loopback;
}

// Collects per-iteration latencies and reports them as manual time plus percentiles.
class Latencies {
 public:
  template <typename Call>
  void Time(benchmark::State& state, Call&& call) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(elapsed.count());
    us_.push_back(elapsed.count() * 1e6);
  }

  void Report(benchmark::State& state) {
    if (us_.empty()) return;
    std::sort(us_.begin(), us_.end());
    auto at = [&](double q) { return us_[static_cast<size_t>(q * (us_.size() - 1))]; };
    state.counters["p50_us"] = at(0.50);
    state.counters["p90_us"] = at(0.90);
    state.counters["p99_us"] = at(0.99);
  }

 private:
  std::vector<double> us_;
};

void BM_EmptyRpc(benchmark::State& state) {
  Loopback& l = GetLoopback();
  Latencies latencies;
  HealthCheckRequest request;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    HealthCheckResponse response;
    grpc::Status status;
    latencies.Time(state, [&] { status = l.health->Check(&ctx, request, &response); });
    CHECK(status.ok()) << status.error_message();
  }
  latencies.Report(state);
}
BENCHMARK(BM_EmptyRpc)->UseManualTime();

void BM_GetStatsRpc(benchmark::State& state) {
  Loopback& l = GetLoopback();
  Latencies latencies;
  pb::GetStatsRequest request;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    pb::CacheStats response;
    grpc::Status status;
    latencies.Time(state, [&] { status = l.cachemgr->GetStats(&ctx, request, &response); });
    CHECK(status.ok()) << status.error_message();
  }
  latencies.Report(state);
}
BENCHMARK(BM_GetStatsRpc)->UseManualTime();

// The service's own step-latency histogram (time inside the Step handler: protobuf to
// native, the locked KvCacheManager::Step, native to protobuf), as {sum_seconds, count}.
std::pair<double, double> ServerStepSeconds(const Loopback& l) {
  std::pair<double, double> out{0, 0};
  for (absl::string_view line : absl::StrSplit(l.registry.Serialize(), '\n')) {
    double* target = nullptr;
    if (absl::ConsumePrefix(&line, "folio_cachemgr_step_latency_seconds_sum ")) {
      target = &out.first;
    } else if (absl::ConsumePrefix(&line, "folio_cachemgr_step_latency_seconds_count ")) {
      target = &out.second;
    }
    if (target != nullptr) CHECK(absl::SimpleAtod(line, target)) << line;
  }
  return out;
}

void CheckedStep(Loopback& l, const pb::CacheStepRequest& request) {
  grpc::ClientContext ctx;
  pb::CacheStepResponse response;
  grpc::Status status = l.cachemgr->Step(&ctx, request, &response);
  CHECK(status.ok()) << status.error_message();
}

// A frontend router's view of the pool: GetBlockEvents every `period` on its own channel,
// following the cursor, until stopped (the load the routers put on the step path).
class BlockEventsWatcher {
 public:
  BlockEventsWatcher(const std::string& address, absl::Duration period)
      : stub_(pb::CacheManager::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        thread_([this, period] {
          pb::BlockEventsRequest request;
          while (!stop_.load()) {
            grpc::ClientContext ctx;
            pb::BlockEvents events;
            if (stub_->GetBlockEvents(&ctx, request, &events).ok()) {
              request.set_pool_id(events.pool_id());
              request.set_after_seq(events.last_seq());
              num_events_ += events.events_size();
              ++num_polls_;
            }
            absl::SleepFor(period);
          }
        }) {}
  ~BlockEventsWatcher() {
    stop_.store(true);
    thread_.join();
  }
  int64_t num_events() const { return num_events_.load(); }
  int64_t num_polls() const { return num_polls_.load(); }

 private:
  std::unique_ptr<pb::CacheManager::Stub> stub_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> num_events_{0};
  std::atomic<int64_t> num_polls_{0};
  std::thread thread_;
};

// Arguments: sequences per step; mode: 0 a bare decode step (grants only, as this
// benchmark always measured), 1 each step also commits the tokens computed so far (so full
// blocks enter the prefix cache and its event log, as under a real scheduler), 2 the same
// while four routers poll GetBlockEvents every 50 ms (one every 12.5 ms).
void BM_DecodeStepRpc(benchmark::State& state) {
  Loopback& l = GetLoopback();
  const int32_t num_seqs = static_cast<int32_t>(state.range(0));
  const int64_t mode = state.range(1);
  const bool commits = mode >= 1;
  {
    // A fresh pool with room for every sequence at max_len.
    // Reset drops the previous run's sequences; it fails (harmlessly) before the first
    // Configure.
    grpc::ClientContext reset_ctx;
    pb::ResetResponse reset_response;
    const grpc::Status reset = l.cachemgr->Reset(&reset_ctx, pb::ResetRequest(), &reset_response);
    CHECK(reset.ok() || reset.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
        << reset.error_message();
    grpc::ClientContext ctx;
    pb::ConfigureRequest configure;
    configure.set_num_blocks(num_seqs * (kMaxLen / kBlockSize + 1));
    configure.set_block_size(kBlockSize);
    configure.set_policy(pb::ALLOCATION_POLICY_PAGED);
    pb::ConfigureResponse response;
    grpc::Status status = l.cachemgr->Configure(&ctx, configure, &response);
    CHECK(status.ok()) << status.error_message();
  }
  // Staggered prompts, so sequences reach max_len (and are recycled) at different steps.
  std::vector<uint64_t> ids(num_seqs);
  std::vector<int32_t> lengths(num_seqs);
  uint64_t next_id = 1;
  {
    pb::CacheStepRequest prefill;
    for (int32_t i = 0; i < num_seqs; ++i) {
      ids[i] = next_id++;
      lengths[i] = 1 + (i * 131) % (kMaxLen - 1);
      pb::Create* create = prefill.add_creates();
      create->set_seq_id(ids[i]);
      create->set_max_len(kMaxLen);
      pb::Grant* grant = prefill.add_grants();
      grant->set_seq_id(ids[i]);
      grant->set_start_pos(0);
      for (int32_t t = 0; t < lengths[i]; ++t) grant->add_token_ids((i + t) % 32000);
    }
    CheckedStep(l, prefill);
  }

  std::unique_ptr<BlockEventsWatcher> watcher;
  if (mode == 2) {
    watcher = std::make_unique<BlockEventsWatcher>(l.runner->address(), absl::Microseconds(12500));
  }
  Latencies latencies;
  int64_t recycled = 0;
  const std::pair<double, double> server_before = ServerStepSeconds(l);
  // Reused across steps, as a scheduler would: protobuf keeps the cleared repeated
  // elements, so parsing the response does not allocate per sequence each step.
  pb::CacheStepRequest request;
  pb::CacheStepResponse response;
  for (auto _ : state) {
    request.Clear();
    for (int32_t i = 0; i < num_seqs; ++i) {
      if (lengths[i] == kMaxLen) {
        request.add_frees(ids[i]);
        ids[i] = next_id++;
        lengths[i] = 0;
        pb::Create* create = request.add_creates();
        create->set_seq_id(ids[i]);
        create->set_max_len(kMaxLen);
        ++recycled;
      }
      if (commits && lengths[i] > 0) {
        pb::Commit* commit = request.add_commits();
        commit->set_seq_id(ids[i]);
        commit->set_num_computed_tokens(lengths[i]);
      }
      pb::Grant* grant = request.add_grants();
      grant->set_seq_id(ids[i]);
      grant->set_start_pos(lengths[i]);
      grant->add_token_ids(static_cast<int32_t>((ids[i] + lengths[i]) % 32000));
      ++lengths[i];
    }
    grpc::ClientContext ctx;
    grpc::Status status;
    latencies.Time(state, [&] { status = l.cachemgr->Step(&ctx, request, &response); });
    CHECK(status.ok()) << status.error_message();
    CHECK_EQ(response.grants_size(), num_seqs);
    for (const pb::SequenceResult& r : response.grants()) {
      CHECK_EQ(r.status(), pb::SequenceResult::OK) << "sequence " << r.seq_id();
    }
  }
  latencies.Report(state);
  const std::pair<double, double> server_after = ServerStepSeconds(l);
  if (server_after.second > server_before.second) {
    state.counters["server_us"] = 1e6 * (server_after.first - server_before.first) /
                                  (server_after.second - server_before.second);
  }
  state.counters["recycled"] = static_cast<double>(recycled);
  if (watcher != nullptr) {
    state.counters["events_per_poll"] =
        static_cast<double>(watcher->num_events()) / std::max<int64_t>(watcher->num_polls(), 1);
  }
  state.SetItemsProcessed(state.iterations() * num_seqs);  // tokens granted
}
BENCHMARK(BM_DecodeStepRpc)
    ->ArgNames({"seqs", "mode"})
    ->Args({1, 0})
    ->Args({64, 0})
    ->Args({256, 0})
    ->Args({256, 1})
    ->Args({256, 2})
    ->UseManualTime();

}  // namespace
}  // namespace folio::cachemgr

int main(int argc, char** argv) {
  // The service logs each Configure and Reset at INFO; keep the tables readable.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  google::InitGoogleLogging(argv[0]);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
