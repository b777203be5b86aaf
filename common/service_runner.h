// ServiceRunner: everything a Folio service process shares around its own gRPC services:
// the gRPC server (callback API), the standard grpc.health.v1 service, server
// reflection, the /metrics HTTP endpoint, and graceful shutdown.
//
// With metrics on, the runner adds to the registry folio_build_info{service, version,
// revision} (always 1), folio_process_start_time_seconds and folio_health_serving{service}
// (1 while health says SERVING), so every service exposes them.
//
// Health starts NOT_SERVING; the service calls SetServing(kServing) once its part is
// ready. Shutdown() is written out in three stages: report NOT_SERVING and keep serving
// for `shutdown_grace` (so load balancers and probes see the change), stop accepting and
// let in-flight RPCs finish until `drain_timeout`, then cancel whatever is left.
//
// Thread-safe.
#ifndef FOLIO_COMMON_SERVICE_RUNNER_H_
#define FOLIO_COMMON_SERVICE_RUNNER_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "grpcpp/server.h"

namespace folio {

struct ServerOptions {
  // The gRPC service name reported on grpc.health.v1 (the empty name "" follows it too).
  std::string service_name;
  std::string host = "127.0.0.1";
  int port = 0;           // 0 picks a free port
  int metrics_port = 0;   // 0 picks a free port; -1 disables /metrics
  // Written once the ports are bound: {"grpc_port": N, "metrics_port": M}. Lets a launcher
  // that asked for port 0 find the service. Empty: not written.
  std::string port_file;
  absl::Duration shutdown_grace = absl::Milliseconds(500);
  absl::Duration drain_timeout = absl::Seconds(10);
  int max_message_bytes = 64 << 20;
  // More "name": port entries for the port file (e.g. the frontend's "http_port").
  std::vector<std::pair<std::string, int>> extra_ports;
  TlsConfig tls;  // off: plaintext (common/tls.h)
};

enum class ServingState { kNotServing, kServing };

class ServiceRunner {
 public:
  // Builds and starts the server with `services` (not owned; they must outlive the runner)
  // and the metrics endpoint for `registry` (may be null when metrics_port is -1; the
  // process metrics above are added to it, so one registry serves one runner).
  static absl::StatusOr<std::unique_ptr<ServiceRunner>> Start(
      const ServerOptions& options, const std::vector<grpc::Service*>& services,
      MetricsRegistry* registry);
  ~ServiceRunner();

  int port() const { return port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : -1; }
  std::string address() const;

  void SetServing(ServingState state);
  // Sets one more grpc.health.v1 name on its own (neither the service's name nor ""
  // follow it), e.g. the scheduler's "liveness", which a Kubernetes liveness probe asks
  // while readiness asks the service's name. Not reflected in folio_health_serving.
  void SetHealth(const std::string& name, ServingState state);

  // See the class comment. Idempotent.
  void Shutdown();

 private:
  explicit ServiceRunner(const ServerOptions& options) : options_(options) {}

  const ServerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsServer> metrics_;
  Gauge* serving_gauge_ = nullptr;  // owned by the registry; null without metrics
  int port_ = 0;
  std::atomic<bool> shut_down_{false};
};

// Catches SIGINT and SIGTERM from here on, in whichever thread the kernel delivers them
// to: a handler writes the signal's number to a pipe that WaitForTerminationSignal()
// reads. Not a blocked mask and sigwait(), which only works when every thread blocks the
// signals: libraries start threads of their own before main (OpenBLAS's pool), and a
// signal delivered to one of those would kill the process unhandled. Call it first thing
// in main(), then WaitForTerminationSignal() (or TerminationSignals) once the service runs.
void CatchTerminationSignals();

// Waits for SIGINT or SIGTERM (caught by CatchTerminationSignals) and returns its number.
int WaitForTerminationSignal();

// SIGINT and SIGTERM taken on a thread of their own from Start() on (call
// CatchTerminationSignals() first), so a service honours them in every state. Until
// MarkSetUp(), a signal exits the process at once with status 0: start-up (a model
// loading, a wait for peers) has served nothing, so there is nothing to drain. After it,
// Wait() returns the signal and main shuts down in order. One per process; it lives until
// the process ends (the thread may outlive main's frame on a failed start-up).
class TerminationSignals {
 public:
  static TerminationSignals& Start();

  void MarkSetUp();
  // Blocks until a signal came after MarkSetUp() (or one that came before it, had the
  // process not exited); returns its number.
  int Wait();

 private:
  TerminationSignals() = default;

  std::atomic<bool> set_up_{false};
  std::atomic<int> signal_{0};
  absl::Notification signalled_;
};

// OK when `port` on `host` can be bound now (0 and negative ports always pass); else
// FAILED_PRECONDITION naming the address. For a service that binds late (a worker loads
// its model first): a port in use is said at once rather than after the load. A probe, not
// a reservation: the real bind may still lose a race, and then fails as it always did.
absl::Status CheckPortFree(const std::string& host, int port);

}  // namespace folio

#endif  // FOLIO_COMMON_SERVICE_RUNNER_H_
