#include "common/metrics_server.h"

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace folio {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, const MetricsRegistry* registry) {
  auto server = absl::WrapUnique(new MetricsServer());
  server->http_ = std::make_unique<httplib::Server>();
  server->http_->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (port == 0) {
    server->port_ = server->http_->bind_to_any_port(host);
  } else if (server->http_->bind_to_port(host, port)) {
    server->port_ = port;
  } else {
    server->port_ = -1;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the metrics endpoint to ", host, ":", port));
  }
  server->thread_ = std::thread([http = server->http_.get()] { http->listen_after_bind(); });
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace folio
