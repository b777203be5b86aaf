#include "common/metrics_server.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
  server->thread_ = std::thread([s = server.get()] {
    s->http_->listen_after_bind();
    s->listen_returned_ = true;
  });
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (!thread_.joinable()) return;
  // cpp-httplib 0.11's stop() does nothing until the listening thread has started, and
  // that thread would then listen for ever: a server stopped right after it started hung
  // here. Wait until it listens (or has given up) first.
  while (!http_->is_running() && !listen_returned_) absl::SleepFor(absl::Milliseconds(1));
  http_->stop();
  thread_.join();
}

}  // namespace folio
