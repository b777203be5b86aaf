#include "common/server_flags.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/tls.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on (0.0.0.0 for all interfaces).");
ABSL_FLAG(int, metrics_port, 0,
          "Port of the Prometheus /metrics endpoint; 0 picks a free one, -1 disables it.");
ABSL_FLAG(std::string, port_file, "",
          "If set, write {\"grpc_port\": N, \"metrics_port\": M} here once listening (the "
          "frontend adds \"http_port\" when its HTTP API is on).");
ABSL_FLAG(int, shutdown_grace_ms, 500,
          "On SIGTERM, report NOT_SERVING for this long before refusing new RPCs.");
ABSL_FLAG(int, drain_timeout_ms, 10000,
          "Then let in-flight RPCs (streams included) finish for this long before cancelling them.");

namespace folio {

ServerOptions ServerOptionsFromFlags(std::string service_name, int port) {
  return ServerOptions{
      .service_name = std::move(service_name),
      .host = absl::GetFlag(FLAGS_host),
      .port = port,
      .metrics_port = absl::GetFlag(FLAGS_metrics_port),
      .port_file = absl::GetFlag(FLAGS_port_file),
      .shutdown_grace = absl::Milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms)),
      .drain_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_drain_timeout_ms)),
      .tls = TlsConfigFromFlagsOrExit()};
}

}  // namespace folio
