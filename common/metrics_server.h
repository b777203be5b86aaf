// MetricsServer: serves a MetricsRegistry at GET /metrics over HTTP (Prometheus text
// format 0.0.4) on its own thread. Thread-safe; Stop() is idempotent.
#ifndef FOLIO_COMMON_METRICS_SERVER_H_
#define FOLIO_COMMON_METRICS_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}

namespace folio {

class MetricsServer {
 public:
  // Binds host:port (port 0 picks a free one) and starts serving. `registry` must outlive
  // the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                              const MetricsRegistry* registry);
  ~MetricsServer();

  int port() const { return port_; }
  void Stop();

 private:
  MetricsServer() = default;

  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};  // the listening thread is done
  int port_ = 0;
};

}  // namespace folio

#endif  // FOLIO_COMMON_METRICS_SERVER_H_
