// What folio-bench measures per request, and the run's figures computed from them: the
// throughputs, latency distributions (mean, p50, p90, p99) and failure counts, as JSON
// and as a table.
#ifndef FOLIO_TOOLS_BENCH_REPORT_H_
#define FOLIO_TOOLS_BENCH_REPORT_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace folio::bench {

struct RequestResult {
  bool sent = false;          // false: the duration bound ended the run first
  bool ok = false;            // the stream ended with status OK
  std::string status;         // the gRPC status code name ("OK", "UNAVAILABLE", ...)
  std::string error_message;
  int prompt_tokens = 0;      // sent
  int requested_output = 0;   // max_tokens
  int output_tokens = 0;      // received
  std::string finish_reason;
  double ttft_s = 0;          // request start to the first token
  double e2e_s = 0;           // request start to the end of the stream
  std::vector<double> itl_s;  // gaps between messages that carried tokens
  int n = 1;                  // choices asked for; output_tokens counts them all
  int beam_width = 0;         // > 0: beam search
};

// One finish reason for a request from its choices' (by index): the common one when they
// agree ("" if none arrived), else the distinct ones joined by commas in index order.
std::string CombineFinishReasons(const std::vector<std::string>& by_choice);

// The value at fraction q in [0, 1] of sorted `v`, interpolating linearly between ranks.
double Percentile(const std::vector<double>& sorted, double q);

// {"mean", "p50", "p90", "p99"} of `values` in milliseconds; zeros when empty.
nlohmann::json Distribution(std::vector<double> values_s);

// The run's figures; `duration_s` is the wall time from the first send to the last end.
nlohmann::json Summarize(const std::vector<RequestResult>& results, double duration_s);

// A readable table of a summary.
std::string FormatTable(const nlohmann::json& summary);

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_REPORT_H_
