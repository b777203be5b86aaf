#include "tests/cluster.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/test_models_dir.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"

namespace folio::testing {
namespace pb = folio::internal::v1;

std::optional<std::string> ModelsDir() { return TestModelsDir(); }

std::string GoldenText(const std::string& models_dir) {
  std::ifstream in(models_dir + "/stories260K/expected_run_c_t0_n200.txt");
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

double MetricValue(const std::string& page, const std::string& name) {
  const std::string key = "\n" + name + " ";  // name may carry labels: {k="v"}
  const size_t at = page.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + key.size()));
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const ClusterOptions& options) {
  auto c = std::make_unique<Cluster>();
  auto with = [](std::vector<std::string> base, const std::vector<std::string>& extra) {
    base.insert(base.end(), extra.begin(), extra.end());
    return base;
  };
  const std::vector<std::string> fast_shutdown = {"--shutdown_grace_ms=0"};
  // Two cores in all: one thread per worker once there is more than one.
  const bool one_thread = options.tp_size * options.num_replicas > 1;
  std::string scheduler_addresses;
  for (int ri = 0; ri < options.num_replicas; ++ri) {
    Replica& r = c->replicas_.emplace_back();
    auto cachemgr =
        ServiceProcess::Start("folio-cachemgr", with(fast_shutdown, options.cachemgr_args));
    if (!cachemgr.ok()) return cachemgr.status();
    r.cachemgr = std::move(*cachemgr);
    std::string worker_addresses;
    for (int rank = 0; rank < options.tp_size; ++rank) {
      std::vector<std::string> args = {"--model=" + options.model};
      args.push_back(one_thread ? "--num_threads=1" : "--num_threads=2");
      if (options.tp_size > 1) {
        args.push_back("--tp_size=" + std::to_string(options.tp_size));
        args.push_back("--tp_rank=" + std::to_string(rank));
        if (rank > 0) args.push_back("--tp_rendezvous=" + r.workers[0]->address());
      }
      auto worker = ServiceProcess::Start("folio-worker",
                                          with(with(fast_shutdown, args), options.worker_args));
      if (!worker.ok()) return worker.status();
      r.workers.push_back(std::move(*worker));
      worker_addresses += (rank > 0 ? "," : "") + r.workers.back()->address();
    }
    auto scheduler = ServiceProcess::Start(
        "folio-scheduler",
        with(with(fast_shutdown, {"--cachemgr=" + r.cachemgr->address(),
                                  "--workers=" + worker_addresses, "--startup_timeout_s=60"}),
             options.scheduler_args));
    if (!scheduler.ok()) return scheduler.status();
    r.scheduler = std::move(*scheduler);
    r.cachemgr_stub = pb::CacheManager::NewStub(
        grpc::CreateChannel(r.cachemgr->address(), grpc::InsecureChannelCredentials()));
    scheduler_addresses += (ri > 0 ? "," : "") + r.scheduler->address();
  }
  const std::string target = options.num_replicas == 1 ? "--scheduler=" + scheduler_addresses
                                                       : "--replicas=" + scheduler_addresses;
  auto frontend = ServiceProcess::Start(
      "folio-frontend",
      with(with(fast_shutdown, {target, "--port=0", "--http_port=0"}), options.frontend_args));
  if (!frontend.ok()) return frontend.status();
  c->frontend_ = std::move(*frontend);

  auto channel = grpc::CreateChannel(c->frontend_->address(), grpc::InsecureChannelCredentials());
  c->frontend_stub_ = folio::v1::TextGeneration::NewStub(channel);
  // The frontend is SERVING once one replica answers; with many, every scheduler too, so
  // that a test starts with all of them taking work.
  std::vector<std::string> addresses = {c->frontend_->address()};
  if (options.num_replicas > 1) {
    for (const Replica& r : c->replicas_) addresses.push_back(r.scheduler->address());
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  for (const std::string& address : addresses) {
    auto health = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    bool serving = false;
    while (!serving && absl::Now() < deadline) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      grpc::health::v1::HealthCheckResponse resp;
      serving = health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok() &&
                resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
      if (!serving) absl::SleepFor(absl::Milliseconds(50));
    }
    if (!serving) break;
    if (address == addresses.back()) return c;
  }
  return absl::DeadlineExceededError("the frontend (and every scheduler) did not report SERVING within 90 s");
}

pb::CacheStats Cluster::CacheStats(int replica) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::CacheStats stats;
  replicas_[replica].cachemgr_stub->GetStats(&ctx, pb::GetStatsRequest(), &stats);
  return stats;
}

bool Cluster::WaitForEmptyPool(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool empty = true;
    for (int i = 0; i < num_replicas() && empty; ++i) {
      const pb::CacheStats s = CacheStats(i);
      empty = s.num_sequences() == 0 && s.num_blocks_free() == s.num_blocks_total();
    }
    if (empty) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

}  // namespace folio::testing
