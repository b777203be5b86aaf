// Goodput: the requests per second that finished within service-level objectives on
// TTFT, TPOT and end-to-end latency (any subset of them), and their fraction of the
// requests sent.
#ifndef FOLIO_TOOLS_BENCH_GOODPUT_H_
#define FOLIO_TOOLS_BENCH_GOODPUT_H_

#include <optional>
#include "absl/strings/string_view.h"
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/bench/report.h"

namespace folio::bench {

struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2e_ms;
};

// "ttft:MS,tpot:MS,e2e:MS", any non-empty subset in any order, each bound positive and
// finite; InvalidArgument saying what is wrong otherwise.
absl::StatusOr<Slo> ParseSlo(absl::string_view spec);

// Whether a request met every bound: it completed (status OK) with at least one token,
// its TTFT and end-to-end latency are within their bounds, and so is its TPOT (a
// one-token answer has no TPOT and meets any bound on it).
bool MeetsSlo(const RequestResult& r, const Slo& slo);

// {"slo_ms": {...the bounds given...}, "requests_per_s": good / duration_s,
//  "fraction": good / sent (0 when none was sent), "good_requests": good}.
nlohmann::json Goodput(const std::vector<RequestResult>& results, double duration_s,
                       const Slo& slo);

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_GOODPUT_H_
