#include "tools/bench/metrics_poller.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "tools/bench/prom_text.h"

namespace folio::bench {

using nlohmann::json;

std::vector<std::string> DefaultMetricsGauges() {
  return {"folio_cachemgr_kv_usage_ratio",    "folio_cachemgr_slot_utilization_ratio",
          "folio_cachemgr_sequences",         "folio_cachemgr_blocks_used",
          "folio_cachemgr_blocks_capacity",   "folio_cachemgr_blocks_shared_refs",
          "folio_cachemgr_blocks_used_peak",  "folio_scheduler_requests_running",
          "folio_scheduler_requests_waiting"};
}

json SummarizeMetrics(const std::vector<std::string>& urls, double interval_s,
                      const std::vector<MetricsSample>& samples, int scrape_errors,
                      const std::string& last_error) {
  struct Acc {
    double sum = 0, max = -std::numeric_limits<double>::infinity(),
           min = std::numeric_limits<double>::infinity();
    int n = 0;
  };
  std::map<std::string, Acc> acc;
  json series = json::array();
  for (const MetricsSample& s : samples) {
    json point = {{"t_s", s.t_s}, {"in_flight", s.in_flight}};
    for (const auto& [name, value] : s.gauges) {
      // JSON has no NaN or infinity: such a value is written as null and not summed.
      const bool finite = std::isfinite(value);
      point[name] = finite ? json(value) : json(nullptr);
      if (s.in_flight < 1 || !finite) continue;
      Acc& a = acc[name];
      a.sum += value;
      a.max = std::max(a.max, value);
      a.min = std::min(a.min, value);
      ++a.n;
    }
    series.push_back(std::move(point));
  }
  json gauges = json::object();
  for (const auto& [name, a] : acc) {
    gauges[name] = {{"mean", a.sum / a.n}, {"max", a.max}, {"min", a.min}};
  }
  json out = {{"urls", urls},
              {"interval_s", interval_s},
              {"samples", static_cast<int>(samples.size())},
              {"scrape_errors", scrape_errors},
              {"gauges", std::move(gauges)},
              {"series", std::move(series)}};
  if (!last_error.empty()) out["last_scrape_error"] = last_error;
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsPoller>> MetricsPoller::Create(
    std::vector<std::string> urls, double interval_s, std::vector<std::string> gauges,
    std::function<int()> in_flight) {
  if (urls.empty()) return absl::InvalidArgumentError("no metrics URL given");
  if (!(interval_s > 0) || !std::isfinite(interval_s)) {
    return absl::InvalidArgumentError("the metrics interval must be positive");
  }
  std::unique_ptr<MetricsPoller> p(new MetricsPoller());
  for (const std::string& url : urls) {
    absl::StatusOr<HttpUrl> parsed = ParseHttpUrl(url);
    if (!parsed.ok()) return parsed.status();
    p->parsed_.push_back(*std::move(parsed));
  }
  p->urls_ = std::move(urls);
  p->interval_s_ = interval_s;
  p->gauges_ = std::move(gauges);
  p->in_flight_ = std::move(in_flight);
  if (absl::StatusOr<std::map<std::string, double>> first = p->ScrapeAll(); !first.ok()) {
    return first.status();
  }
  return p;
}

MetricsPoller::~MetricsPoller() { Stop(); }

absl::StatusOr<std::map<std::string, double>> MetricsPoller::ScrapeAll() const {
  std::map<std::string, double> sums;
  for (size_t i = 0; i < parsed_.size(); ++i) {
    const HttpUrl& u = parsed_[i];
    httplib::Client client(u.host, u.port);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(5, 0);
    httplib::Result res = client.Get(u.path);
    if (!res) {
      return absl::UnavailableError(
          absl::StrCat("GET ", urls_[i], " failed: ", httplib::to_string(res.error())));
    }
    if (res->status != 200) {
      return absl::UnavailableError(
          absl::StrCat("GET ", urls_[i], " answered HTTP ", res->status));
    }
    absl::StatusOr<std::vector<PromSample>> samples = ParsePromText(res->body);
    if (!samples.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(urls_[i], " is not a Prometheus text page: ", samples.status().message()));
    }
    for (const auto& [name, value] : SumByName(*samples, gauges_)) sums[name] += value;
  }
  return sums;
}

void MetricsPoller::Start(Clock::time_point start) {
  thread_ = std::thread([this, start] { Loop(start); });
}

void MetricsPoller::Loop(Clock::time_point start) {
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(interval_s_));
  for (int64_t k = 1;; ++k) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, start + k * interval, [this] { return stop_; })) return;
    }
    const Clock::time_point began = Clock::now();
    const int before = in_flight_();
    absl::StatusOr<std::map<std::string, double>> gauges = ScrapeAll();
    const int after = in_flight_();
    if (!gauges.ok()) {
      ++scrape_errors_;
      last_error_ = std::string(gauges.status().message());
    } else {
      samples_.push_back({std::chrono::duration<double>(began - start).count(),
                          std::min(before, after), *std::move(gauges)});
    }
    // A slow scrape skips the ticks it overran rather than firing them back to back.
    const Clock::time_point now = Clock::now();
    while (start + (k + 1) * interval < now) ++k;
  }
}

void MetricsPoller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

json MetricsPoller::Result() const {
  return SummarizeMetrics(urls_, interval_s_, samples_, scrape_errors_, last_error_);
}

}  // namespace folio::bench
