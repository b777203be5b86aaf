#include "tests/cluster.h"

#include <cstdlib>
#include <fstream>
#include <regex>
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
  std::smatch m;
  if (!std::regex_search(page, m, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) return -1;
  return std::stod(m[1]);
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const ClusterOptions& options) {
  auto c = std::make_unique<Cluster>();
  auto with = [](std::vector<std::string> base, const std::vector<std::string>& extra) {
    base.insert(base.end(), extra.begin(), extra.end());
    return base;
  };
  const std::vector<std::string> fast_shutdown = {"--shutdown_grace_ms=0"};
  auto cachemgr = ServiceProcess::Start("folio-cachemgr", with(fast_shutdown, options.cachemgr_args));
  if (!cachemgr.ok()) return cachemgr.status();
  c->cachemgr_ = std::move(*cachemgr);
  std::string worker_addresses;
  for (int rank = 0; rank < options.tp_size; ++rank) {
    std::vector<std::string> args = {"--model=" + options.model};
    if (options.tp_size == 1) {
      args.push_back("--num_threads=2");
    } else {
      args.push_back("--num_threads=1");
      args.push_back("--tp_size=" + std::to_string(options.tp_size));
      args.push_back("--tp_rank=" + std::to_string(rank));
      if (rank > 0) args.push_back("--tp_rendezvous=" + c->workers_[0]->address());
    }
    auto worker = ServiceProcess::Start("folio-worker",
                                        with(with(fast_shutdown, args), options.worker_args));
    if (!worker.ok()) return worker.status();
    c->workers_.push_back(std::move(*worker));
    worker_addresses += (rank > 0 ? "," : "") + c->workers_.back()->address();
  }
  auto scheduler = ServiceProcess::Start(
      "folio-scheduler",
      with(with(fast_shutdown, {"--cachemgr=" + c->cachemgr_->address(),
                                "--workers=" + worker_addresses, "--startup_timeout_s=60"}),
           options.scheduler_args));
  if (!scheduler.ok()) return scheduler.status();
  c->scheduler_ = std::move(*scheduler);
  auto frontend = ServiceProcess::Start(
      "folio-frontend",
      with(with(fast_shutdown, {"--scheduler=" + c->scheduler_->address(), "--port=0",
                                "--http_port=0"}),
           options.frontend_args));
  if (!frontend.ok()) return frontend.status();
  c->frontend_ = std::move(*frontend);

  auto channel = grpc::CreateChannel(c->frontend_->address(), grpc::InsecureChannelCredentials());
  c->frontend_stub_ = folio::v1::TextGeneration::NewStub(channel);
  c->cachemgr_stub_ = pb::CacheManager::NewStub(
      grpc::CreateChannel(c->cachemgr_->address(), grpc::InsecureChannelCredentials()));
  auto health = grpc::health::v1::Health::NewStub(channel);
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (absl::Now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckResponse resp;
    if (health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok() &&
        resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return c;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError("the frontend did not report SERVING within 90 s");
}

pb::CacheStats Cluster::CacheStats() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::CacheStats stats;
  cachemgr_stub_->GetStats(&ctx, pb::GetStatsRequest(), &stats);
  return stats;
}

bool Cluster::WaitForEmptyPool(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const pb::CacheStats s = CacheStats();
    if (s.num_sequences() == 0 && s.num_blocks_free() == s.num_blocks_total()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

}  // namespace folio::testing
