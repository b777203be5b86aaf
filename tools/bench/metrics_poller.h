// Server-side figures for folio-bench: a thread that scrapes Prometheus /metrics pages
// every interval while the run goes on, keeps chosen gauges (each summed over its label
// sets, and over the URLs that have it) with the client's count of requests in flight,
// and sums them up as the "server_metrics" object of the result JSON.
#ifndef FOLIO_TOOLS_BENCH_METRICS_POLLER_H_
#define FOLIO_TOOLS_BENCH_METRICS_POLLER_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/bench/http_url.h"

namespace folio::bench {

// The gauges kept when none are named: the cache manager's pool figures and the
// scheduler's running / waiting requests.
std::vector<std::string> DefaultMetricsGauges();

struct MetricsSample {
  double t_s = 0;     // from the run's start, when the scrape began
  int in_flight = 0;  // requests in flight both when the scrape began and when it ended
  std::map<std::string, double> gauges;  // absent gauges are absent
};

// The "server_metrics" object: urls, interval_s, samples, scrape_errors (and the last
// error's text), per-gauge mean/max/min over the samples with in_flight >= 1 (a gauge
// seen in none of them is left out), and the whole series.
nlohmann::json SummarizeMetrics(const std::vector<std::string>& urls, double interval_s,
                                const std::vector<MetricsSample>& samples, int scrape_errors,
                                const std::string& last_error);

class MetricsPoller {
 public:
  using Clock = std::chrono::steady_clock;

  // Checks the URLs and scrapes each once: InvalidArgument for a bad URL or a page that
  // is not the Prometheus text format, Unavailable when a URL cannot be fetched with
  // status 200. `in_flight` is read from the polling thread.
  static absl::StatusOr<std::unique_ptr<MetricsPoller>> Create(
      std::vector<std::string> urls, double interval_s, std::vector<std::string> gauges,
      std::function<int()> in_flight);
  ~MetricsPoller();

  // Scrapes at start + interval, start + 2 interval, ... until Stop().
  void Start(Clock::time_point start);
  void Stop();

  // After Stop().
  nlohmann::json Result() const;

 private:
  MetricsPoller() = default;
  // One scrape of every URL, the gauges summed; Unavailable / InvalidArgument on failure.
  absl::StatusOr<std::map<std::string, double>> ScrapeAll() const;
  void Loop(Clock::time_point start);

  std::vector<std::string> urls_;
  std::vector<HttpUrl> parsed_;
  double interval_s_ = 0.25;
  std::vector<std::string> gauges_;
  std::function<int()> in_flight_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  std::vector<MetricsSample> samples_;  // written by the thread until it is joined
  int scrape_errors_ = 0;
  std::string last_error_;
};

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_METRICS_POLLER_H_
