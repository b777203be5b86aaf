// The flags every Folio service's gRPC server takes, defined once: --host, --metrics_port,
// --port_file, --shutdown_grace_ms and --drain_timeout_ms. Each service defines --port
// itself (the frontend's default differs from the internal services').
#ifndef FOLIO_COMMON_SERVER_FLAGS_H_
#define FOLIO_COMMON_SERVER_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "common/service_runner.h"

ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(int, metrics_port);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(int, shutdown_grace_ms);
ABSL_DECLARE_FLAG(int, drain_timeout_ms);

namespace folio {

// The server options of `service_name` listening on `port`, the rest from the flags above.
ServerOptions ServerOptionsFromFlags(std::string service_name, int port);

}  // namespace folio

#endif  // FOLIO_COMMON_SERVER_FLAGS_H_
