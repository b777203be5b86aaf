#include "services/frontend/frontend_metrics.h"

#include "absl/time/time.h"

namespace folio::frontend {

FrontendMetrics::FrontendMetrics(MetricsRegistry* r)
    : requests(r->AddCounterFamily("folio_frontend_requests_total",
                                   "Finished RPCs by method and final gRPC status code.",
                                   {"method", "code"})),
      request_duration(
          r->AddHistogramFamily("folio_frontend_request_duration_seconds",
                                "Time from receiving an RPC to its final status, by method.",
                                {"method"}, ExponentialBuckets(0.001, 2.0, 18))),
      time_to_first_token(r->AddHistogram(
          "folio_frontend_time_to_first_token_seconds",
          "Time from receiving a generation request to sending its first generated token.",
          ExponentialBuckets(0.001, 2.0, 16))),
      streamed_tokens(r->AddCounter("folio_frontend_streamed_tokens_total",
                                    "Generated tokens sent to clients.")),
      prompt_tokens(r->AddCounter("folio_frontend_prompt_tokens_total",
                                  "Prompt tokens of requests forwarded to the scheduler.")),
      stop_string_matches(r->AddCounter("folio_frontend_stop_string_matches_total",
                                        "Completions ended by one of their stop strings.")),
      active_streams(
          r->AddGauge("folio_frontend_active_streams", "Generate and Complete calls in flight.")) {}

void FrontendMetrics::RecordRequest(const std::string& method, absl::StatusCode code,
                                    absl::Duration latency) {
  requests.WithLabels({method, absl::StatusCodeToString(code)}).Increment();
  request_duration.WithLabels({method}).Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace folio::frontend
