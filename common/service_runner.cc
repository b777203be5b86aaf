#include "common/service_runner.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
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

namespace {

// The handler's end and the waiter's end of the signal pipe; -1 until caught.
std::atomic<int> signal_pipe_write{-1};
int signal_pipe_read = -1;

void OnTerminationSignal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Async-signal-safe; a full pipe (signals nobody waits for) drops the byte.
  [[maybe_unused]] ssize_t n = write(signal_pipe_write.load(), &byte, 1);
  errno = saved_errno;
}

}  // namespace

void CatchTerminationSignals() {
  if (signal_pipe_write.load() >= 0) return;
  int fds[2];
  CHECK_EQ(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0) << "pipe2: " << std::strerror(errno);
  // Only the write end is non-blocking (a handler never waits); the reader waits.
  CHECK_EQ(fcntl(fds[0], F_SETFL, 0), 0);
  signal_pipe_read = fds[0];
  signal_pipe_write = fds[1];
  struct sigaction action {};
  action.sa_handler = OnTerminationSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  CHECK_EQ(sigaction(SIGTERM, &action, nullptr), 0);
  CHECK_EQ(sigaction(SIGINT, &action, nullptr), 0);
}

int WaitForTerminationSignal() {
  CHECK_GE(signal_pipe_read, 0) << "WaitForTerminationSignal before CatchTerminationSignals";
  unsigned char byte = 0;
  while (true) {
    const ssize_t n = read(signal_pipe_read, &byte, 1);
    if (n == 1) return byte;
    CHECK(n < 0 && errno == EINTR) << "reading the signal pipe: " << std::strerror(errno);
  }
}

TerminationSignals& TerminationSignals::Start() {
  // Leaked on purpose: the detached thread refers to it until the process ends.
  static TerminationSignals* const signals = [] {
    auto* s = new TerminationSignals();
    std::thread([s] {
      const int sig = WaitForTerminationSignal();
      s->signal_ = sig;
      if (!s->set_up_.load()) {
        LOG(INFO) << "signal " << sig << " during start-up: exiting";
        std::_Exit(0);
      }
      s->signalled_.Notify();
    }).detach();
    return s;
  }();
  return *signals;
}

void TerminationSignals::MarkSetUp() { set_up_ = true; }

int TerminationSignals::Wait() {
  signalled_.WaitForNotification();
  return signal_.load();
}

absl::Status CheckPortFree(const std::string& host, int port) {
  if (port <= 0) return absl::OkStatus();
  // "[::1]" as gRPC spells it; getaddrinfo wants the bare address.
  absl::string_view bare = host;
  if (absl::ConsumePrefix(&bare, "[")) absl::ConsumeSuffix(&bare, "]");
  const std::string node(bare);
  const std::string service = absl::StrCat(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(node.empty() ? nullptr : node.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve --host=", host, ": ", gai_strerror(rc)));
  }
  absl::Status status = absl::OkStatus();
  for (addrinfo* a = found; a != nullptr && status.ok(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // As gRPC binds: SO_REUSEADDR (a port left in TIME_WAIT is free), no SO_REUSEPORT.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) {
      status = absl::FailedPreconditionError(
          absl::StrCat("port ", port, " on ", host, " is in use (another process listens there)"));
    }
    close(fd);
  }
  freeaddrinfo(found);
  return status;
}

}  // namespace folio
