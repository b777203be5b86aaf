// FrontendMetrics: the folio_frontend_* Prometheus metrics, registered in a registry that
// main() (or a test) owns and injects. The metric objects belong to the registry, which
// must outlive this struct. Thread-safe (every metric is).
#ifndef FOLIO_SERVICES_FRONTEND_FRONTEND_METRICS_H_
#define FOLIO_SERVICES_FRONTEND_FRONTEND_METRICS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace folio::frontend {

struct FrontendMetrics {
  explicit FrontendMetrics(MetricsRegistry* registry);

  // Counts one finished RPC of `method` ("Generate", "Tokenize", ...) with its final code
  // and observes its latency.
  void RecordRequest(const std::string& method, absl::StatusCode code, absl::Duration latency);

  // folio_frontend_requests_total{method, code}
  Family<Counter>& requests;
  // folio_frontend_request_duration_seconds{method}
  Family<Histogram>& request_duration;
  // folio_frontend_time_to_first_token_seconds: request start to the first generated token
  // leaving the frontend (Generate and Complete).
  Histogram& time_to_first_token;
  // folio_frontend_streamed_tokens_total: generated tokens sent to clients.
  Counter& streamed_tokens;
  // folio_frontend_prompt_tokens_total: prompt tokens of requests sent to the scheduler.
  Counter& prompt_tokens;
  // folio_frontend_stop_string_matches_total: completions ended by a stop string.
  Counter& stop_string_matches;
  // folio_frontend_active_streams: Generate and Complete calls in flight (each holds one
  // scheduler stream).
  Gauge& active_streams;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_FRONTEND_METRICS_H_
