#include "common/service_runner.h"

#include <csignal>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/reflection_v1.h"
#include "common/version.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

namespace folio {

absl::StatusOr<std::unique_ptr<ServiceRunner>> ServiceRunner::Start(
    const ServerOptions& options, const std::vector<grpc::Service*>& services,
    MetricsRegistry* registry) {
  auto runner = absl::WrapUnique(new ServiceRunner(options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  EnableReflectionV1();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(address, *credentials, &runner->port_);
  // Without this, gRPC binds with SO_REUSEPORT and a second server on a busy port would
  // silently share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  runner->server_ = builder.BuildAndStart();
  if (runner->server_ == nullptr || runner->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address,
                                               " (port in use, or host not local?)"));
  }
  if (options.metrics_port >= 0) {
    CHECK(registry != nullptr) << "metrics enabled without a registry";
    registry
        ->AddGaugeFamily("folio_build_info",
                         "Always 1; the labels name the service and the build it runs.",
                         {"service", "version", "revision"})
        .WithLabels({options.service_name, kVersionNumber, kGitRevision})
        .Set(1);
    registry
        ->AddGauge("folio_process_start_time_seconds",
                   "Start time of the process, in seconds since the Unix epoch.")
        .Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    runner->serving_gauge_ =
        &registry
             ->AddGaugeFamily("folio_health_serving",
                              "1 while grpc.health.v1 reports SERVING for the service, else 0.",
                              {"service"})
             .WithLabels({options.service_name});
  }
  runner->SetServing(ServingState::kNotServing);

  if (options.metrics_port >= 0) {
    auto metrics = MetricsServer::Start(options.host, options.metrics_port, registry);
    if (!metrics.ok()) return metrics.status();
    runner->metrics_ = std::move(*metrics);
  }
  if (!options.port_file.empty()) {
    const std::string tmp = options.port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << "{\"grpc_port\": " << runner->port_ << ", \"metrics_port\": "
          << runner->metrics_port();
      for (const auto& [name, port] : options.extra_ports) out << ", \"" << name << "\": " << port;
      out << "}\n";
      if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
    if (std::rename(tmp.c_str(), options.port_file.c_str()) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot write ", options.port_file));
    }
  }
  LOG(INFO) << options.service_name << " listening on " << runner->address()
            << (runner->metrics_ ? absl::StrCat(", metrics on :", runner->metrics_port()) : "");
  return runner;
}

ServiceRunner::~ServiceRunner() { Shutdown(); }

std::string ServiceRunner::address() const { return absl::StrCat(options_.host, ":", port_); }

void ServiceRunner::SetServing(ServingState state) {
  const bool serving = state == ServingState::kServing;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(options_.service_name, serving);
  health->SetServingStatus("", serving);
  if (serving_gauge_ != nullptr) serving_gauge_->Set(serving ? 1 : 0);
  LOG(INFO) << options_.service_name << " health: " << (serving ? "SERVING" : "NOT_SERVING");
}

void ServiceRunner::SetHealth(const std::string& name, ServingState state) {
  const bool serving = state == ServingState::kServing;
  server_->GetHealthCheckService()->SetServingStatus(name, serving);
  LOG(INFO) << options_.service_name << " health of \"" << name
            << "\": " << (serving ? "SERVING" : "NOT_SERVING");
}

void ServiceRunner::Shutdown() {
  // exchange() makes a second caller (a signal path and a destructor, say) a no-op.
  if (server_ == nullptr || shut_down_.exchange(true)) return;
  SetServing(ServingState::kNotServing);
  absl::SleepFor(options_.shutdown_grace);
  LOG(INFO) << options_.service_name << " draining (up to "
            << absl::FormatDuration(options_.drain_timeout) << ")";
  server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.drain_timeout));
  server_->Wait();
  if (metrics_) metrics_->Stop();
  LOG(INFO) << options_.service_name << " stopped";
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace folio
