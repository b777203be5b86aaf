// PrometheusServer: a real Prometheus (the Debian package's binary) started on loopback for
// tests, scraping a fixed list of targets every second, with its data in a temp folder.
// Queries go through Prometheus's HTTP API (/api/v1/query). Thread-compatible.
#ifndef FOLIO_TESTS_PROMETHEUS_SERVER_H_
#define FOLIO_TESTS_PROMETHEUS_SERVER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace folio::testing {

// The prometheus binary on PATH, or nullopt.
std::optional<std::string> FindPrometheus();

class PrometheusServer {
 public:
  // Starts `binary` with one scrape job per entry of `targets` (job name -> port on
  // 127.0.0.1) and waits until /-/ready answers 200 or `timeout` passes.
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const std::string& binary, const std::map<std::string, int>& targets,
      absl::Duration timeout = absl::Seconds(60));
  ~PrometheusServer();  // SIGTERM, then SIGKILL after 10 s

  int port() const { return port_; }

  // Evaluates an instant PromQL query. Returns the value of the first sample of a vector
  // result (or a scalar), nullopt for an empty vector, an error when the query fails.
  absl::StatusOr<std::optional<double>> Query(const std::string& promql);

  // Polls Query(promql) about once a second until it returns a value >= `at_least` or
  // `timeout` passes; returns the last value seen (nullopt when it never had one).
  std::optional<double> WaitForAtLeast(const std::string& promql, double at_least,
                                       absl::Duration timeout);

  // The tail of Prometheus's own log, for failure messages.
  std::string LogTail() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

}  // namespace folio::testing

#endif  // FOLIO_TESTS_PROMETHEUS_SERVER_H_
